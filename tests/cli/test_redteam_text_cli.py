"""Red-team text that is not Unicode: a model answer or tool call holding a lone UTF-16
surrogate (JSON spells one as ``"\\ud800"``), and a file name that is not UTF-8 listed back to
the model. Each used to end the run with a ``UnicodeEncodeError`` traceback (in the stuck
detector's hash or the report writer); now the run completes, its reports are written and
``runner runs show`` reads it back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import run_cli, sandbox_project, tool_call

pytestmark = pytest.mark.timeout(180)

AGENT = """\
apiVersion: runner/v1
kind: Agent
name: writer
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [shell, read_file, write_file, list_files, calculator]
sandbox: {mode: bwrap, wall_seconds: 20}
stuck: {max_repeats: 20, max_invalid_calls: 20}
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: text
agent: writer
goal: Write some text.
report: {formats: [markdown, html, json]}
"""
LONE = "\ud800"


@pytest.fixture
def project() -> Iterator[Path]:
    with sandbox_project("redteam-text", {"agents.d/writer.yaml": AGENT, "tasks.d/text.yaml": TASK}) as root:
        yield root


def finish(project: Path, replies: list[dict[str, object]], answer: str) -> tuple[list[str], str]:
    rules = [{"times": 1, "reply": reply} for reply in replies] + [{"reply": {"content": answer}}]
    with ScriptedServer({"rules": rules}) as server:
        done = run_cli(project, server, "run", "text", "--run-id", "text-1")
        seen = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-2000:]
    report = project / "reports" / "text" / "text-1"
    for name in ("report.md", "report.html", "report.json"):
        (report / name).read_text(encoding="utf-8")  # valid UTF-8
    json.loads((report / "report.json").read_text())
    shown = run_cli(project, None, "runs", "show", "text-1", "--transcript")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr[-2000:]
    return seen, done.stdout


def test_lone_surrogates_in_tool_arguments_and_the_answer(project: Path) -> None:
    replies = [
        tool_call("write_file", path=f"{LONE}.txt", content="x"),
        tool_call("write_file", path="note.txt", content=f"text {LONE}"),
        tool_call("read_file", path="\udcff"),
        tool_call("calculator", expression=f"1 + {LONE}"),
        {"tool_calls": [{"name": f"shell{LONE}", "arguments": {"command": "true"}}]},
    ]
    seen, stdout = finish(project, replies, f"the answer {LONE} ends")
    assert all("lone UTF-16 surrogate" in s for s in seen[:4]), seen
    assert "unknown tool" in seen[4] and "\\ud800" in seen[4], seen[4]
    assert stdout.strip() == "the answer \\ud800 ends"
    workspace = project / ".runner" / "workspaces" / "text-1"
    assert not (workspace / "note.txt").exists()


def test_a_file_name_that_is_not_utf8_is_listed_back_as_an_escape(project: Path) -> None:
    replies = [
        tool_call("shell", command="touch \"$(printf 'bad\\377name')\" plain.txt"),
        tool_call("list_files"),
    ]
    seen, stdout = finish(project, replies, "listed")
    assert stdout.strip() == "listed"
    assert "bad\\udcffname (0 bytes)" in seen[1] and "plain.txt" in seen[1], seen[1]


def test_a_table_file_sandboxed_code_corrupted_is_an_observation(project: Path) -> None:
    """``.tables/NAME.parquet`` lives in the workspace, so sandboxed code can overwrite it; the
    host read it with pyarrow, whose ArrowInvalid ended the run with a traceback."""
    (project / "agents.d" / "writer.yaml").write_text(AGENT.replace("calculator]", "calculator, describe_table, query_table]"))
    replies = [
        tool_call("shell", command="mkdir -p .tables && printf 'PAR1garbagePAR1' > .tables/t.parquet"),
        tool_call("describe_table", table="t"),
        tool_call("query_table", table="t"),
    ]
    seen, stdout = finish(project, replies, "tables checked")
    assert stdout.strip() == "tables checked"
    for observation in seen[1:]:
        assert observation.startswith("error: table 't' cannot be read"), observation


def test_a_parquet_file_declaring_more_rows_than_a_table_may_hold_is_not_decoded(project: Path) -> None:
    """Run-length encoding packs 60 million rows into a few hundred kilobytes; decoding them
    (or the 200 million rows the same trick allows) would take gigabytes of the runner's
    memory, whether the file is loaded by path or planted as a saved table."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": pa.array(np.zeros(60_000_000, dtype=np.int8))}), project / "bomb.parquet", compression="zstd")
    assert (project / "bomb.parquet").stat().st_size < 1_000_000
    (project / "tasks.d" / "text.yaml").write_text(TASK + "workspace: {files: [bomb.parquet]}\n")
    (project / "agents.d" / "writer.yaml").write_text(AGENT.replace("calculator]", "calculator, load_table, describe_table]"))
    replies = [
        tool_call("load_table", path="bomb.parquet", name="b"),
        tool_call("shell", command="mkdir -p .tables && cp bomb.parquet .tables/t.parquet"),
        tool_call("describe_table", table="t"),
    ]
    seen, stdout = finish(project, replies, "refused")
    assert stdout.strip() == "refused"
    for observation in (seen[0], seen[2]):
        assert "holds 60,000,000 rows x 1 columns" in observation and "limited to 50,000,000 cells" in observation, observation
