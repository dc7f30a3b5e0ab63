"""Templates that would burn CPU or memory stop with an error naming the file and the template:
nested loops, macros that recurse in a tree, one-step blow-ups (``|replace``, ``%``-format
widths, ``ljust``, ``join``, huge integers, lists doubled in a loop). A template that always
does it is refused by ``runner validate``; one whose cost depends on its inputs fails the run
(exit 2) or the batch row, before any model call. Ordinary templates are not affected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.config.template_types import TemplateError
from runner.config.templates import render
from runner.model.server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
TOO_MUCH = "the template does too much work"  # its steps or, on a loaded machine, its deadline

BOMBS = {
    "nested loops": ("{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}{% endfor %}done", TOO_MUCH),
    "a macro that calls itself twice": (
        "{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}", TOO_MUCH,
    ),
    "a recursive loop": ("{% for x in range(9) recursive %}{% if loop.depth < 12 %}{{ loop(range(9)) }}{% endif %}{% endfor %}", TOO_MUCH),
    "replace": ('{% set x = "a" * 999999 %}{{ x | replace("a", x) }}', "replace would make"),
    "format width": ('{{ "%999999999s" | format(1) }}', "%-format width"),
    "percent width from an argument": ('{{ "%*s" % (999999999, "x") }}', "%-format width"),
    "str.ljust": ('{{ "a".ljust(999999999) }}', "str.ljust would make"),
    "join": ('{% set x = "a" * 999999 %}{{ ([x] * 999999) | join }}', "join would make"),
    "concatenation doubling": ('{% set ns = namespace(s="a") %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}', "made a value of"),
    "addition doubling": ('{% set ns = namespace(s="a") %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}', "adding these values"),
    "list.extend doubling": ("{% set l = [1] %}{% for i in range(64) %}{{ l.extend(l) }}{% endfor %}", "list.extend would make"),
    "integer powers": ("{{ ((10 ** 1024) ** 1024) ** 1024 }}", "an integer of about"),
    "integer squaring": ("{% set ns = namespace(n=10 ** 1000) %}{% for i in range(64) %}{% set ns.n = ns.n * ns.n %}{% endfor %}", "an integer of about"),
    "summing lists": ("{{ ([[1]] * 999999) | sum(start=[]) | length }}", TOO_MUCH),
    "center": ('{{ "a" | center(999999999) }}', "center would make"),
    "indent": ('{{ ("a\\n" * 99999) | indent("x" * 99999) }}', "indent would make"),
    "wordwrap": ('{{ ("a" * 999999) | wordwrap(1, wrapstring="x" * 999) }}', "wordwrap would make"),
    "tojson indent": ("{{ range(10) | list | tojson(indent=99999999) }}", "tojson: an indent of at most"),
    "lipsum": ("{{ lipsum(n=99999, max=999) }}", "lipsum would make"),
    "batch padding": ('{{ [1] | batch(999999999, "x") | list }}', "batch would make"),
    "str.translate": ('{% set x = "a" * 999999 %}{{ x.translate({97: x}) }}', "str.translate would make"),
    "sorting in a loop": ('{% set x = ("ab" * 499999) | list %}{% for i in range(99) %}{{ (x | sort)[0] }}{% endfor %}', TOO_MUCH),
}


@pytest.mark.slow(reason="templates that run to their budget")
@pytest.mark.parametrize("name", list(BOMBS))
def test_a_costly_template_is_refused(name: str) -> None:
    template, said = BOMBS[name]
    with pytest.raises(TemplateError) as refused:
        render(template, {})
    assert said in str(refused.value) and "template refused on line" in str(refused.value)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{% for r in rows %}{{ r.name }}{{ ', ' if not loop.last }}{% endfor %}", "a, b"),
        ("{% for r in rows recursive %}{{ r.name }}{% if r.kids %}({{ loop(r.kids) }}){% endif %}{% endfor %}", "ab(c)"),
        ("{{ rows | map(attribute='name') | join('+') }}", "a+b"),
        ("{{ rows | join(', ', attribute='name') }}", "a, b"),
        ("{{ rows | sum(attribute='n') }}", "5"),
        ("{% filter upper %}{{ rows[0].name }}{% endfilter %}", "A"),
        ("{{ '%05.1f' | format(3.14159) }} {{ '%-4s|' % 'x' }}", "003.1 x   |"),
        ("{{ 'a,b' | replace(',', ';') }} {{ 'x' | center(5) }}|", "a;b   x  |"),
        ("{% set total = namespace(n=0) %}{% for i in range(20000) %}{% set total.n = total.n + i %}{% endfor %}{{ total.n }}", "199990000"),
        ("{{ (2 ** 64) * (2 ** 64) }} {{ 'ab' * 3 }} {{ [0] * 3 }}", "340282366920938463463374607431768211456 ababab [0, 0, 0]"),
        ("{% macro item(x) %}<{{ x }}>{% endmacro %}{% for i in range(3) %}{{ item(i) }}{% endfor %}", "<0><1><2>"),
        ("{% for x in [] %}x{% else %}none{% endfor %}", "none"),
    ],
)
def test_ordinary_templates_render_as_before(template: str, expected: str) -> None:
    rows = [{"name": "a", "n": 2, "kids": []}, {"name": "b", "n": 3, "kids": [{"name": "c", "n": 0, "kids": []}]}]
    assert render(template, {"rows": rows}) == expected


# --- through the CLI --------------------------------------------------------------------------


def cli(root: Path, *args: str, server: ScriptedServer | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env["PYTHONPATH"] = str(REPO)
    if server is not None:
        env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test-template-budget")
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)  # fmt: skip


def project(root: Path, tasks: dict[str, str]) -> Path:
    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    (root / "agents.d" / "writer.yaml").write_text("apiVersion: runner/v1\nkind: Agent\nname: writer\nmodel: {id: scripted}\n")
    for name, body in tasks.items():
        (root / "tasks.d" / f"{name}.yaml").write_text(f"apiVersion: runner/v1\nkind: Task\nname: {name}\nagent: writer\n{body}")
    return root


STATIC = ["nested loops", "a macro that calls itself twice", "replace", "format width", "integer powers", "list.extend doubling", "lipsum"]


def test_validate_refuses_each_static_bomb_with_its_place(tmp_path: Path) -> None:
    tasks = {f"t{i}": f"goal: {json.dumps(BOMBS[name][0])}\n" for i, name in enumerate(STATIC)}
    tasks["subject"] = (
        "goal: Write.\nreport:\n  formats: [markdown]\n  deliver:\n    - email: {to: [a@example.com], from: r@example.com, "
        f"subject: {json.dumps(BOMBS['str.ljust'][0])}, smtp: {{host: localhost}}}}\n"
    )  # fmt: skip
    root = project(tmp_path / "p", tasks)
    done = cli(root, "validate")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    out = done.stdout + done.stderr
    for i, name in enumerate(STATIC):
        (line,) = [line for line in out.splitlines() if line.startswith(f"tasks.d/t{i}.yaml:")]
        assert line.startswith(f"tasks.d/t{i}.yaml:5:7: error: /goal: template refused on line 1") and BOMBS[name][1] in line, line
    assert "tasks.d/subject.yaml:" in out and "/report/deliver/0/email/subject" in out and "str.ljust would make" in out


INPUT_TASK = (
    "inputs:\n  n: {type: integer}\n"
    "goal: \"{% for a in range(inputs.n) %}{% for b in range(inputs.n) %}{% endfor %}{% endfor %}Count to {{ inputs.n }}.\"\n"
)


def test_a_template_whose_cost_depends_on_an_input_fails_the_run_before_any_call(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"count": INPUT_TASK})
    assert cli(root, "validate").returncode == 0  # with sample inputs it is cheap
    with ScriptedServer({"fallback": "Done."}) as server:
        cheap = cli(root, "run", "count", "-i", "n=30", server=server)
        assert cheap.returncode == 0, cheap.stderr[-2000:]
        calls = len(server.requests)
        costly = cli(root, "run", "count", "-i", "n=99999", server=server)
        assert len(server.requests) == calls  # no call for the costly one
    assert costly.returncode == 2, costly.stderr[-2000:]
    assert "tasks.d/count.yaml:7:7: error: /goal: template refused on line 1: the template does too much work" in costly.stderr
    assert "Traceback" not in costly.stderr


def test_a_batch_row_whose_template_is_too_costly_fails_alone(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"count": INPUT_TASK})
    rows = root / "rows.csv"
    rows.write_text("id,n\ncheap,20\ncostly,99999\nalso_cheap,3\n")
    with ScriptedServer({"fallback": "Done."}) as server:
        done = cli(root, "batch", "count", "--input", str(rows), "--output", str(root / "out.jsonl"), "--id-column", "id", server=server)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    records = {r["id"]: r for r in map(json.loads, (root / "out.jsonl").read_text().splitlines())}
    assert records["cheap"]["status"] == records["also_cheap"]["status"] == "done"
    assert records["costly"]["status"] == "failed" and "too much work" in records["costly"]["error"]


def test_validating_many_costly_templates_spends_one_shared_budget(tmp_path: Path) -> None:
    """Two hundred nested-loop bombs would take minutes to check one by one: the checks of one
    validation share a pool (twenty renders' worth), the rest are left to the runs."""
    bomb = BOMBS["nested loops"][0]
    root = project(tmp_path / "p", {f"t{i}": f"goal: {json.dumps(bomb + str(i))}\n" for i in range(200)})
    done = cli(root, "validate")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    refused = [line for line in (done.stdout + done.stderr).splitlines() if TOO_MUCH in line]
    assert 1 <= len(refused) <= 20, len(refused)  # twenty at most (fewer if the pool's minute ran out first)
