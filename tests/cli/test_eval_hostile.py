"""Hostile ``kind: Eval`` datasets and baselines through the real CLI: paths that leave the
project (``..``, absolute, a symbolic link, a hard link, a linked directory), FIFOs,
directories and huge files; rows with wrong types, missing fields, duplicate ids, NaN and
infinite expected values, invalid UTF-8, deep JSON, assertions in a cell that backtrack for
ever or reference a remote schema, and template text that must reach the model as text.
Every case: a located message or a failed check naming the problem, the documented exit
code, no traceback, no hang, nothing read or written outside the project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-test-eval-hostile-77"
SECRET_LINE = "outside-the-project-secret-3f9a"
AGENT = "apiVersion: runner/v1\nkind: Agent\nname: labeler\nmodel: {id: scripted}\n"
TASK = "apiVersion: runner/v1\nkind: Task\nname: label\nagent: labeler\ninputs:\n  text: {type: string}\ngoal: \"Label: {{ inputs.text }}\"\n"


def runner(root: Path, *args: str, server: ScriptedServer | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "OTEL_"))}
    env["PYTHONPATH"] = str(REPO)
    if server is not None:
        env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY)
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)  # fmt: skip


def eval_yaml(dataset: str, extra: str = "", assertions: str = "  - {path: label, equals: {column: expected}}\n") -> str:
    return (
        f"apiVersion: runner/v1\nkind: Eval\nname: hostile\ntask: label\ndataset:\n  path: {dataset}\n  id_column: id\n"
        f"  checks_column: checks\nassert:\n{assertions}{extra}"
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    for folder in ("agents.d", "tasks.d", "evals.d", "data"):
        (project / folder).mkdir(parents=True)
    (project / "agents.d" / "labeler.yaml").write_text(AGENT)
    (project / "tasks.d" / "label.yaml").write_text(TASK)
    (project / "data" / "cases.csv").write_text('id,text,expected,checks\nc1,hello,greeting,\n')
    (tmp_path / "outside.csv").write_text(f"id,text,expected,checks\n{SECRET_LINE},x,y,\n")
    return project


def write_eval(root: Path, text: str) -> None:
    (root / "evals.d" / "hostile.yaml").write_text(text)


def refused(result: subprocess.CompletedProcess[str], *said: str) -> str:
    out = result.stdout + result.stderr
    assert result.returncode == 2, out[-3000:]
    assert "Traceback" not in out and SECRET_LINE not in out
    for text in said:
        assert text in out, out[-3000:]
    return out


def place(root: Path, how: str) -> str:
    """Make a dataset path of the given kind; returns the path as the YAML writes it."""
    outside = root.parent / "outside.csv"
    data = root / "data"
    if how == "dotdot":
        return "../outside.csv"
    if how == "absolute":
        return str(outside)
    if how == "symlink":
        (data / "link.csv").symlink_to(outside)
        return "data/link.csv"
    if how == "hardlink":
        os.link(outside, data / "hard.csv")
        return "data/hard.csv"
    if how == "linked directory":
        (data / "elsewhere").symlink_to(root.parent)
        return "data/elsewhere/outside.csv"
    if how == "fifo":
        os.mkfifo(data / "pipe.csv")
        return "data/pipe.csv"
    if how == "directory":
        (data / "folder.csv").mkdir()
        return "data/folder.csv"
    if how == "huge":
        with open(data / "huge.csv", "wb") as handle:
            handle.truncate((256 << 20) + 1)  # sparse: nothing is written
        return "data/huge.csv"
    raise AssertionError(how)


PLACES = {
    "dotdot": "is outside the project", "absolute": "is outside the project",
    "symlink": "goes through a symbolic link that leads outside the project", "hardlink": "has 2 hard links",
    "linked directory": "goes through a symbolic link that leads outside the project", "fifo": "is a FIFO, not a regular file",
    "directory": "is a directory, not a regular file", "huge": "eval datasets are limited to 268435456 bytes",
}  # fmt: skip


@pytest.mark.parametrize("how", list(PLACES))
def test_a_dataset_the_eval_may_not_read_is_refused_by_validate_and_eval(root: Path, how: str) -> None:
    write_eval(root, eval_yaml(place(root, how)))
    refused(runner(root, "validate"), "evals.d/hostile.yaml:6:9: error: /dataset/path: ", PLACES[how])
    with ScriptedServer({"fallback": '{"label": "greeting"}'}) as server:
        refused(runner(root, "eval", "hostile", server=server), "/dataset/path", PLACES[how])
        assert not server.requests


def test_a_dataset_swapped_for_a_link_after_validate_is_refused_when_the_eval_runs(root: Path) -> None:
    write_eval(root, eval_yaml("data/cases.csv"))
    assert runner(root, "validate").returncode == 0
    (root / "data" / "cases.csv").unlink()
    (root / "data" / "cases.csv").symlink_to(root.parent / "outside.csv")
    with ScriptedServer({"fallback": '{"label": "greeting"}'}) as server:
        refused(runner(root, "eval", "hostile", server=server), "symbolic link that leads outside the project")
        assert not server.requests


HOSTILE_ROWS = [
    "id,text,expected,checks,cost",
    'nan,a,NaN,"[{""path"": ""score"", ""approx"": {""column"": ""expected""}}]",',
    'inf,b,-inf,"[{""path"": ""score"", ""approx"": {""column"": ""expected""}}, {""max_cost_usd"": {""column"": ""cost""}}]",abc',
    'dup,c,greeting,,',
    'dup,d,greeting,,',
    'missing,,greeting,,',
    'deep,e,greeting,"' + "[" * 500 + "]" * 500 + '",',
    'nantol,f,greeting,"[{""path"": ""label"", ""approx"": 1, ""tolerance"": NaN}]",',
    'redos,g,greeting,"[{""path"": ""summary"", ""regex"": ""^(a|aa)+$""}]",',
    'remote,h,greeting,"[{""path"": ""label"", ""json_schema"": {""$ref"": ""http://127.0.0.1:9/schema.json""}}]",',
    'notalist,i,greeting,42,',
    'template,{{ 7*7 }} {% for x in range(9999999) %}{% endfor %},greeting,,',
]


def test_hostile_rows_become_failed_cases_with_reasons(root: Path) -> None:
    (root / "data" / "rows.csv").write_bytes(("\n".join(HOSTILE_ROWS) + "\n").encode() + b"badutf8,\xff\xfe,greeting,,\n")
    write_eval(root, eval_yaml("data/rows.csv"))
    assert runner(root, "validate").returncode == 0
    reply = json.dumps({"label": "greeting", "score": 1.0, "summary": "a" * 40 + "!"})
    with ScriptedServer({"fallback": reply}) as server:
        done = runner(root, "eval", "hostile", "--json", server=server)
        sent = [json.dumps(r.body) for r in server.requests]
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    cases = {c["key"]: c for c in json.loads(done.stdout)["variants"][0]["results"]}
    assert set(cases) == {"nan", "inf", "dup", "dup (row 4)", "missing", "deep", "nantol", "redos", "remote", "notalist", "template", "row 12"}

    def why(key: str) -> str:
        return " | ".join(f"{c['label']}: {c['detail']}" for c in cases[key]["checks"] if c["passed"] is False)

    assert "is not a number" in why("nan")
    assert "assertion 2/max_cost_usd: {'column': 'cost'} is not of type 'number'" in why("inf")
    assert cases["dup"]["passed"] and "duplicate id" in why("dup (row 4)")
    assert "a value is required" in why("missing")
    assert "nested more than 64 levels deep" in why("deep")
    assert "NaN is not valid JSON" in why("nantol")
    assert "took more than 1 s" in why("redos") and "^(a|aa)+$" in why("redos")
    assert "does not point inside this schema" in why("remote")
    assert "expected a JSON list of assertions" in why("notalist")
    assert "UTF-8" in why("row 12")  # a row that cannot be read has no id: it is named by its row
    assert cases["template"]["passed"]  # its text is data: sent as written, never rendered
    assert any("Label: {{ 7*7 }} {% for x in range(9999999) %}{% endfor %}" in body for body in sent)


def test_a_changed_dataset_starts_afresh_instead_of_failing_on_the_old_journal(root: Path) -> None:
    write_eval(root, eval_yaml("data/cases.csv"))
    with ScriptedServer({"fallback": '{"label": "greeting"}'}) as server:
        first = runner(root, "eval", "hostile", server=server)
        assert first.returncode == 0, first.stderr[-2000:]
        again = runner(root, "eval", "hostile", server=server)
        calls = len(server.requests)
        assert again.returncode == 0 and calls == 1  # resumed: nothing new to run
        (root / "data" / "cases.csv").write_text("id,text,expected,checks\nc1,hello,greeting,\nc2,bye,greeting,\n")
        changed = runner(root, "eval", "hostile", server=server)
        assert changed.returncode == 0, changed.stderr[-2000:]
        assert len(server.requests) == calls + 2 and "--journal" not in changed.stderr


@pytest.mark.parametrize(
    ("baseline", "said"),
    [
        ("../../outside.json", "is outside the project"),
        ("/tmp/runner-eval-baseline.json", "is outside the project"),
        ("evals.d/out/baseline.json", "symbolic link that leads outside the project"),
    ],
)
def test_save_baseline_never_writes_outside_the_project(root: Path, baseline: str, said: str) -> None:
    (root / "evals.d" / "out").symlink_to(root.parent)
    write_eval(root, eval_yaml("data/cases.csv", extra=f"baseline: {baseline}\n"))
    refused(runner(root, "validate"), "/baseline", said)
    with ScriptedServer({"fallback": '{"label": "greeting"}'}) as server:
        refused(runner(root, "eval", "hostile", "--save-baseline", server=server), "/baseline", said)
    assert not (root.parent / "baseline.json").exists() and not Path("/tmp/runner-eval-baseline.json").exists()
    assert not (root.parent.parent / "outside.json").exists()


@pytest.mark.parametrize("kind", ["fifo", "garbage", "deep"])
def test_an_unreadable_baseline_is_a_usage_error_not_a_hang(root: Path, kind: str) -> None:
    stored = root / "evals.d" / "baseline.json"
    if kind == "fifo":
        os.mkfifo(stored)
    else:
        stored.write_text("\x00\xff not json" if kind == "garbage" else "[" * 100000 + "]" * 100000)
    write_eval(root, eval_yaml("data/cases.csv"))
    with ScriptedServer({"fallback": '{"label": "greeting"}'}) as server:
        done = runner(root, "eval", "hostile", "--baseline", str(stored), server=server)
    out = refused(done, "baseline")
    assert ("not a regular file" if kind == "fifo" else "not a readable eval result") in out


def test_a_catastrophic_regex_in_the_yaml_fails_its_check_in_bounded_time(root: Path) -> None:
    write_eval(root, eval_yaml("data/cases.csv", assertions="  - {path: summary, regex: '^(a|aa)+$'}\n"))
    reply: dict[str, Any] = {"label": "greeting", "summary": "a" * 40 + "!"}
    with ScriptedServer({"fallback": json.dumps(reply)}) as server:
        done = runner(root, "eval", "hostile", "--json", server=server)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (case,) = json.loads(done.stdout)["variants"][0]["results"]
    assert not case["passed"] and "took more than 1 s" in " ".join(c["detail"] for c in case["checks"])


@pytest.mark.parametrize(
    "stored",
    [
        {"variants": [1, "x", None]},
        {"variants": [{"name": "baseline", "results": 5, "pass_rate": "high"}]},
        {"variants": [{"name": ["baseline"], "results": [{"key": {"a": 1}}], "pass_rate": 1e308 * 10}]},
        {"variants": [{"name": "baseline", "results": [1, {"key": [], "passed": "yes"}, {"key": "c1", "passed": False}]}]},
    ],
)
def test_an_edited_baseline_is_compared_as_far_as_it_makes_sense(root: Path, stored: dict[str, Any]) -> None:
    (root / "evals.d" / "baseline.json").write_text(json.dumps(stored))
    write_eval(root, eval_yaml("data/cases.csv", extra="baseline: evals.d/baseline.json\n"))
    with ScriptedServer({"fallback": '{"label": "greeting"}'}) as server:
        done = runner(root, "eval", "hostile", "--json", server=server)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    comparisons = json.loads(done.stdout)["baseline"]["comparisons"]
    if stored["variants"][0] is not None and isinstance(stored["variants"][0], dict) and stored["variants"][0]["name"] == "baseline":
        (comparison,) = comparisons
        assert comparison["baseline_pass_rate"] is None
        results = stored["variants"][0]["results"]
        assert comparison["fixes"] == (["c1"] if isinstance(results, list) and len(results) == 3 else [])
    else:
        assert comparisons == []
