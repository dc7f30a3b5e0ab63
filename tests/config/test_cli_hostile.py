"""Hostile configuration through the real CLI (``python -m runner`` as a process).

Prompt files that lead out of the project or are not text, templates that the sandbox
refuses or that fail only at run time, nesting deep enough to exhaust the recursion
limit (YAML, and JSON from batch rows, inputs and the model), and tool settings of the
wrong type. Every case: the documented exit code, a located message, no traceback,
nothing sent to the endpoint when the configuration is refused.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer

HERE = Path(__file__).parent
REPO = HERE.parent.parent
KEY = "sk-test-hostile-0123456789"


def runner(*args: str, cwd: Path, server: ScriptedServer | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    if server is not None:
        env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY)
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


AGENT = "apiVersion: runner/v1\nkind: Agent\nname: {name}\nmodel: {{id: scripted}}\n{extra}\n"
TASK = "apiVersion: runner/v1\nkind: Task\nname: {name}\n{extra}\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write(root / "agents.d" / "writer.yaml", AGENT.format(name="writer", extra="system_prompt: You write."))
    write(root / "agents.d" / "calc.yaml", AGENT.format(name="calc", extra="tools: [calculator, terminate]"))
    write(root / "tasks.d" / "ask.yaml", TASK.format(name="ask", extra="agent: writer\ngoal: Say hello."))
    return root


def agent_with_prompt(root: Path, reference: str) -> None:
    write(root / "agents.d" / "writer.yaml", AGENT.format(name="writer", extra=f"system_prompt: {{file: {reference}}}"))


# --- the golden corpus, as a process -----------------------------------------------------


def test_every_invalid_corpus_file_fails_through_the_cli_with_its_golden_messages() -> None:
    files = sorted((HERE / "invalid").glob("*.yaml"))
    result = runner("validate", "--root", str(HERE / "project"), *map(str, files), cwd=REPO)
    assert result.returncode == 2, result.stderr
    no_traceback(result)
    by_file: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        by_file.setdefault(Path(line.split(":", 1)[0]).name, []).append(line)
    for path in files:
        golden = path.with_suffix(".expected").read_text().splitlines()
        assert by_file.get(path.name) == golden, path.name


# --- 6. prompt files ------------------------------------------------------------------------


def test_host_file_as_prompt_is_refused_and_never_sent(project: Path) -> None:
    agent_with_prompt(project, "../../../../../../../../etc/passwd")
    with ScriptedServer({"fallback": "hello"}) as server:
        run = runner("run", "ask", "--no-report", cwd=project, server=server)
        assert server.requests == []
    validate = runner("validate", cwd=project)
    for result in (run, validate):
        assert result.returncode == 2
        no_traceback(result)
        assert "agents.d/writer.yaml:5:23: error: /system_prompt/file: '../../../../../../../../etc/passwd' is outside" in (
            result.stdout + result.stderr
        )
        assert "root:x:0:0" not in result.stdout + result.stderr


def test_fifo_prompt_file_does_not_hang_validate(project: Path) -> None:
    os.mkfifo(project / "prompt.md")
    agent_with_prompt(project, "../prompt.md")
    result = runner("validate", cwd=project, timeout=30)
    assert result.returncode == 2
    no_traceback(result)
    assert "/system_prompt/file: '../prompt.md' is a FIFO, not a regular file" in result.stdout


def test_device_prompt_file_is_refused_before_it_is_opened(project: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating a device node needs root")
    os.mknod(project / "zero.md", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero, inside the project
    agent_with_prompt(project, "../zero.md")
    result = runner("validate", cwd=project, timeout=30)
    assert result.returncode == 2
    assert "'../zero.md' is a character device, not a regular file" in result.stdout


def test_symlinked_prompt_files(project: Path) -> None:
    write(project / "prompts" / "real.md", "You write well.")
    (project / "prompts" / "inside.md").symlink_to("real.md")
    (project / "prompts" / "outside.md").symlink_to("/etc/passwd")
    (project / "prompts" / "dir").symlink_to("/etc")
    (project / "prompts" / "loop.md").symlink_to("loop.md")
    for reference, expected in (
        ("../prompts/inside.md", None),
        ("../prompts/outside.md", "goes through a symbolic link that leads outside the project"),
        ("../prompts/dir/passwd", "goes through a symbolic link that leads outside the project"),
        ("../prompts/loop.md", "symbolic link loop"),
    ):
        agent_with_prompt(project, reference)
        result = runner("validate", cwd=project)
        no_traceback(result)
        if expected is None:
            assert result.returncode == 0, result.stdout
        else:
            assert result.returncode == 2 and expected in result.stdout, (reference, result.stdout)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), "contains NUL bytes"),
        ("Résumé: be précis".encode("latin-1"), "is not UTF-8 text"),
        (b"x" * (256 * 1024 + 1), "prompt files are limited to 262144 bytes"),
        (b"", "is empty"),
    ],
    ids=["binary", "latin1", "too-large", "empty"],
)
def test_prompt_file_that_is_not_small_text(project: Path, content: bytes, expected: str) -> None:
    (project / "prompt.md").write_bytes(content)
    agent_with_prompt(project, "../prompt.md")
    result = runner("validate", cwd=project)
    assert result.returncode == 2
    no_traceback(result)
    assert "agents.d/writer.yaml:5:23: error: /system_prompt/file: '../prompt.md' " in result.stdout
    assert expected in result.stdout


def test_hard_linked_prompt_file_is_refused(project: Path) -> None:
    write(project / "data" / "secret.txt", "not a prompt")
    os.link(project / "data" / "secret.txt", project / "prompt.md")
    agent_with_prompt(project, "../prompt.md")
    result = runner("validate", cwd=project)
    assert result.returncode == 2 and "has 2 hard links" in result.stdout


def test_fifo_named_like_a_config_file_is_reported_not_skipped(project: Path) -> None:
    os.mkfifo(project / "agents.d" / "pipe.yaml")
    result = runner("validate", cwd=project, timeout=30)
    assert result.returncode == 2
    assert "agents.d/pipe.yaml:1:1: error: /: not a regular file (a FIFO)" in result.stdout


def test_prompt_file_inside_the_project_reaches_the_model(project: Path) -> None:
    write(project / "prompts" / "writer.md", "You are the house style editor. Ünïcode is fine.\n")
    agent_with_prompt(project, "../prompts/writer.md")
    with ScriptedServer({"fallback": "hello"}) as server:
        result = runner("run", "ask", "--no-report", cwd=project, server=server)
        system = server.requests[0].body["messages"][0]
    assert result.returncode == 0, result.stderr
    assert system["role"] == "system" and "You are the house style editor. Ünïcode is fine." in system["content"]


def test_workspace_file_outside_the_project_is_found_by_validate(project: Path) -> None:
    (project / "data").mkdir()
    (project / "data" / "passwd.csv").symlink_to("/etc/passwd")
    extra = "agent: writer\ngoal: hi\nworkspace:\n  files: [data/passwd.csv, ../../etc/hostname]"
    write(project / "tasks.d" / "ws.yaml", TASK.format(name="ws", extra=extra))
    result = runner("validate", cwd=project)
    assert result.returncode == 2
    assert "tasks.d/ws.yaml:7:11: error: /workspace/files/0: 'data/passwd.csv' goes through a symbolic link" in result.stdout
    assert "tasks.d/ws.yaml:7:28: error: /workspace/files/1: '../../etc/hostname' is outside the project" in result.stdout


# --- 7. templates ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("goal", "expected"),
    [
        ("{{ ''.__class__.__mro__ }}", "template reads the attribute '__class__' on line 1"),
        ("{{ run_id | attr('__class__') }}", "template reads the attribute '__class__' on line 1"),
        ("{{ run_id | attr('__cla' ~ 'ss__') }}", "template refused on line 1: access to attribute '__class__'"),
        ("{{ '{0.__class__}'.format(run_id) }}", "template reads the attribute 'format' on line 1"),
        ("{{ run_id['format'] }}", "template refused on line 1: access to attribute 'format' of 'str' object"),
        ("{{ run_id['format']('{0.__class__}') }}", "template reads the attribute 'format' on line 1"),
        ("{{ lipsum.__globals__ }}", "template reads the attribute '__globals__' on line 1"),
        ("{{ cycler.__init__.__globals__.os }}", "template reads the attribute '__init__' on line 1"),
        ("{% include 'tasks.d/t.yaml' %}", "template uses {% include %} on line 1"),
        ("{% include run_id %}", "template uses {% include %} on line 1"),
        ("{% import 'x.j2' as x %}{{ x.y }}", "template uses {% import %} on line 1"),
        ("{% extends 'base.j2' %}", "template uses {% extends %} on line 1"),
        ("{{ today | no_such_filter }}", "unknown filter 'no_such_filter'"),
        ("line one\n{{ 1 // 0 }}", "template error on line 2: integer division or modulo by zero"),
        ("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "recurses too deeply"),
        ("{{ 'ab' * 10 ** 8 }}", "template refused on line 1: repeating a value"),
    ],
)
def test_template_the_sandbox_refuses_is_found_by_validate_and_run_spends_nothing(
    project: Path, goal: str, expected: str
) -> None:
    write(project / "tasks.d" / "t.yaml", TASK.format(name="t", extra=f"agent: writer\ngoal: {json.dumps(goal)}"))
    result = runner("validate", cwd=project)
    assert result.returncode == 2
    no_traceback(result)
    assert "tasks.d/t.yaml:5:7: error: /goal: " in result.stdout and expected in result.stdout, result.stdout
    with ScriptedServer({"fallback": "hello"}) as server:
        run = runner("run", "t", "--no-report", cwd=project, server=server)
        assert server.requests == []
    assert run.returncode == 2 and expected in run.stderr
    no_traceback(run)


def test_template_error_at_run_time_names_file_and_line_exit_2(project: Path) -> None:
    extra = "inputs:\n  n: {type: integer}\nagent: writer\ngoal: |\n  Share 100 among {{ inputs.n }}:\n  {{ 100 // inputs.n }} each"
    write(project / "tasks.d" / "share.yaml", TASK.format(name="share", extra=extra))
    assert runner("validate", cwd=project).returncode == 0  # fine for any n but 0
    with ScriptedServer({"fallback": "hello"}) as server:
        result = runner("run", "share", "--input", "n=0", "--no-report", cwd=project, server=server)
        assert server.requests == []
    assert result.returncode == 2
    no_traceback(result)
    assert "tasks.d/share.yaml:7:7: error: /goal: template error on line 2: integer division or modulo by zero" in result.stderr


def test_template_error_in_a_tool_step_at_run_time(project: Path) -> None:
    steps = (
        "pipeline:\n  steps:\n"
        "    - {id: sum, tool: calculator, args: {expression: '2 + 2'}}\n"
        "    - id: again\n      tool: calculator\n      depends_on: [sum]\n"
        "      args: {expression: '{{ steps.sum.data.total.value }}'}"
    )
    write(project / "tasks.d" / "pipe.yaml", TASK.format(name="pipe", extra=steps))
    assert runner("validate", cwd=project).returncode == 0  # the shape of step data is known only at run time
    result = runner("run", "pipe", "--no-report", "--json", cwd=project)
    assert result.returncode == 2
    no_traceback(result)
    finished = json.loads(result.stdout.splitlines()[-1])
    assert finished["event"] == "run_finished" and finished["exit_code"] == 2 and finished["error_kind"] == "template"
    assert "tasks.d/pipe.yaml:10:26: error: /pipeline/steps/1/args/expression: template uses an undefined variable" in (
        finished["error"]
    )


def test_template_error_in_a_batch_row_fails_that_row_only(project: Path, tmp_path: Path) -> None:
    extra = "inputs:\n  n: {type: integer}\nagent: writer\ngoal: '{{ 100 // inputs.n }}'"
    write(project / "tasks.d" / "share.yaml", TASK.format(name="share", extra=extra))
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a", "n": 4}\n{"id": "b", "n": 0}\n{"id": "c", "n": 5}\n')
    out = tmp_path / "out.jsonl"
    with ScriptedServer({"fallback": "fine"}) as server:
        result = runner(
            "batch", "share", "--input", str(rows), "--output", str(out), "--id-column", "id", "--progress", "none",
            cwd=project, server=server,
        )  # fmt: skip
    no_traceback(result)
    records = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert records["a"]["status"] == records["c"]["status"] == "done"
    assert records["b"]["status"] == "failed" and records["b"]["error_kind"] == "template"
    assert "tasks.d/share.yaml:7:7: error: /goal: template error on line 1" in records["b"]["error"]


def test_sample_values_do_not_make_false_alarms(project: Path) -> None:
    steps = (
        "inputs:\n  day: {type: date, default: today}\n  n: {type: integer, default: 2}\n"
        "  mode: {type: string, enum: [short, long]}\n  loud: {type: boolean, default: false}\n"
        "  csv: {type: string}\n  k: {type: integer}\n"
        "memory: {previous_run: true}\n"
        "pipeline:\n  steps:\n"
        "    - {id: a, tool: calculator, args: {expression: '{{ inputs.n * 2 }} + 1'}}\n"
        "    - id: b\n      agent: writer\n      depends_on: [a]\n      goal: |\n"
        "        Since {{ inputs.day | add_days(-7) }} ({{ today }}, run {{ run_id }}), mode {{ inputs.mode | upper }}.\n"
        "        {{ steps.a.output }} {{ steps.a.data | tojson }} {{ steps.a.data.rows | length }}\n"
        "        {{ steps.a.data._id }} {{ steps.a.data.format }} {{ inputs.mode.upper() }}\n"
        "        {% for r in steps.a.data.rows %}{{ r.name }}: {{ r.value * 2 }}{% endfor %}\n"
        "        {% if steps.a.data.total > 3 %}big{% endif %} {{ '%.1f' | format(inputs.n / 3) }}\n"
        "        {% if previous %}{{ previous.outputs.summary }} {{ previous.tables | length }}{% endif %}\n"
        "        {% set ns = namespace(total=0) %}{% for i in range(3) %}{% set ns.total = ns.total + i %}{% endfor %}\n"
        "        {% macro bullet(x) %}- {{ x }}{% endmacro %}{{ bullet(inputs.loud) }}\n"
        "    - id: c\n      agent: writer\n"  # fails for some values only: left to the run
        "      goal: \"{{ inputs.csv.split(',')[1] }} {{ 100 // (inputs.k - 3) }}\""
    )
    write(project / "tasks.d" / "many.yaml", TASK.format(name="many", extra=steps))
    result = runner("validate", cwd=project)
    assert result.returncode == 0, result.stdout


# --- 8. nesting -----------------------------------------------------------------------------


def test_fifty_thousand_brackets_in_yaml(project: Path) -> None:
    (project / "agents.d" / "deep.yaml").write_text("apiVersion: runner/v1\nkind: Agent\nname: deep\ntools: " + "[" * 50_000)
    result = runner("validate", cwd=project)
    assert result.returncode == 2
    no_traceback(result)
    assert "agents.d/deep.yaml:4:71: error: /tools/0/0/0/" in result.stdout
    assert "nested more than 64 levels deep" in result.stdout


def test_six_hundred_nested_mappings_in_yaml(project: Path) -> None:
    nested = "".join(" " * (i + 1) + f"k{i}:\n" for i in range(600)) + " " * 601 + "leaf\n"
    (project / "tasks.d" / "deep.yaml").write_text("apiVersion: runner/v1\nkind: Task\nname: deep\nreport:\n" + nested)
    for command in (("validate",), ("run", "ask", "--no-report")):
        result = runner(*command, cwd=project)
        assert result.returncode == 2
        no_traceback(result)
        assert "tasks.d/deep.yaml:67:64: error: /report/k0/k1/" in result.stdout + result.stderr


def test_deep_but_allowed_nesting_validates(project: Path) -> None:
    schema = "{type: array, items: " * 30 + "{type: string}" + "}" * 30
    write(project / "tasks.d" / "ok.yaml", TASK.format(name="ok", extra=f"agent: writer\ngoal: hi\noutput_schema: {schema}"))
    result = runner("validate", cwd=project)
    assert result.returncode == 0, result.stdout


def scripted_run(project: Path, rules: list[dict[str, Any]], *args: str) -> subprocess.CompletedProcess[str]:
    with ScriptedServer({"rules": rules, "fallback": '{"ok": true}'}) as server:
        return runner("run", *args, "--no-report", cwd=project, server=server)


DEEP_JSON = "[" * 50_000 + "]" * 50_000


@pytest.mark.parametrize("tool", ["calculator", "terminate"])
def test_deeply_nested_tool_call_arguments_are_an_observation(project: Path, tool: str) -> None:
    write(project / "tasks.d" / "calc.yaml", TASK.format(name="calc_task", extra="agent: calc\ngoal: add"))
    rules = [{"times": 1, "reply": {"tool_calls": [{"name": tool, "arguments": DEEP_JSON}]}}]
    result = scripted_run(project, rules, "calc_task")
    assert result.returncode == 0, result.stderr
    no_traceback(result)
    assert f"arguments for tool '{tool}' are not valid JSON (nested more than 64 levels deep" in result.stderr


def test_deeply_nested_final_answer_against_an_output_schema(project: Path) -> None:
    extra = "agent: writer\ngoal: answer in JSON\noutput_schema: {type: object}"
    write(project / "tasks.d" / "js.yaml", TASK.format(name="js", extra=extra))
    rules = [{"times": 1, "reply": {"content": '{"a": ' + DEEP_JSON + "}"}}]
    result = scripted_run(project, rules, "js", "--json")
    assert result.returncode == 0, result.stderr
    no_traceback(result)
    assert json.loads(result.stdout.splitlines()[-1])["status"] == "completed"


def test_deeply_nested_input_values(project: Path, tmp_path: Path) -> None:
    extra = "inputs:\n  text: {type: string}\n  n: {type: integer, required: false}\nagent: writer\ngoal: 'Echo {{ inputs.text | length }}'"
    write(project / "tasks.d" / "echo.yaml", TASK.format(name="echo", extra=extra))
    with ScriptedServer({"fallback": "done"}) as server:
        as_text = runner("run", "echo", "--input", f"text={DEEP_JSON}", "--no-report", cwd=project, server=server)
        as_number = runner("run", "echo", "--input", "text=x", "--input", f"n={DEEP_JSON}", "--no-report", cwd=project, server=server)
        rows = tmp_path / "rows.jsonl"
        rows.write_text(f'{{"id": "deep", "text": {DEEP_JSON}}}\n{{"id": "fine", "text": "hello"}}\n')
        out = tmp_path / "out.jsonl"
        batch = runner("batch", "echo", "--input", str(rows), "--output", str(out), "--id-column", "id",
                       "--progress", "none", cwd=project, server=server)  # fmt: skip
    assert as_text.returncode == 0, as_text.stderr
    assert as_number.returncode == 2 and "input 'n'" in as_number.stderr
    for result in (as_text, as_number, batch):
        no_traceback(result)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    by_status = {r["status"] for r in records}
    assert "done" in by_status and len(records) == 2
    (bad,) = [r for r in records if r["status"] != "done"]
    assert "nested more than 64 levels deep" in bad["error"]


# --- 9. tool settings -----------------------------------------------------------------------


def test_wrong_tool_setting_type_is_refused_before_the_first_call(project: Path) -> None:
    write(project / "agents.d" / "calc.yaml", AGENT.format(
        name="calc", extra="tools: [calculator, {name: python, settings: {timeout_seconds: abc}}]"))  # fmt: skip
    write(project / "tasks.d" / "calc.yaml", TASK.format(name="calc_task", extra="agent: calc\ngoal: add"))
    validate = runner("validate", "--format", "json", cwd=project)
    assert validate.returncode == 2
    (problem,) = json.loads(validate.stdout)["problems"]
    assert problem["pointer"] == "/tools/1/settings/timeout_seconds" and (problem["line"], problem["column"]) == (5, 64)
    assert problem["message"] == "'abc' is a string; write the number without quotes"
    with ScriptedServer({"fallback": "x"}) as server:
        run = runner("run", "calc_task", "--no-report", cwd=project, server=server)
        assert server.requests == []
    assert run.returncode == 2 and "/tools/1/settings/timeout_seconds" in run.stderr
    no_traceback(run)


def test_declared_custom_tool_settings_are_accepted(project: Path) -> None:
    tool = (
        "apiVersion: runner/v1\nkind: Tool\nname: count\ntype: shell\nshell: {command: [wc, -w, '{path}']}\n"
        "parameters:\n  path: {type: string}\nsettings:\n  mode: {type: string, enum: [fast, exact]}\n"
    )
    write(project / "tools.d" / "count.yaml", tool)
    settings = "tools: [{name: count, settings: {mode: exact, timeout_seconds: 2.5}}, {name: python, settings: {timeout_seconds: 5}}]"
    write(project / "agents.d" / "calc.yaml", AGENT.format(name="calc", extra=settings))
    result = runner("validate", cwd=project)
    assert result.returncode == 0, result.stdout
