"""Model and tool text cannot drive the terminal: the real CLI on a pseudo-terminal.

The scripted model writes escape sequences into a file, reads it back (so they come out of a
tool) and answers with them. Whatever the readable output prints on the terminal holds no
ESC, BEL, C1 control or bidi override; the same text is shown as visible escapes. ``--json``
keeps the answer exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.cli.terminal import json_for_terminal, safe_line, safe_text
from runner.model.server import ScriptedServer
from tests.support.project import runner_env, write_project

HOSTILE = (
    "title\x1b]0;pwned\x07 clear\x1b[2J\x1b[H c1\x9b31m bidi\u202eevil\u202c isolate\u2067x\u2069"
    " bs\x08 del\x7f nul\x00 osc52\x1b]52;c;ZXZpbA==\x07 sep\u2028end\ttab\r\nsecond line"
)
IN_FILE = HOSTILE.replace("\x00", "")  # read_file refuses NUL bytes as binary
RAW = [b"\x1b", b"\x07", b"\x08", b"\x7f", b"\x00", "\x9b".encode(), "\u202e".encode(), "\u2067".encode(), "\u2028".encode()]

PROJECT = {
    "agents.d/echo.yaml": (
        "apiVersion: runner/v1\nkind: Agent\nname: echo\nmodel: {id: gpt-4o-mini}\nsystem_prompt: Echo.\n"
        "tools: [write_file, read_file]\nsandbox: {mode: none}\n"
    ),
    "tasks.d/ask.yaml": "apiVersion: runner/v1\nkind: Task\nname: ask\nagent: echo\ngoal: Go.\n",
}

SCRIPT: dict[str, Any] = {
    "rules": [
        {"when": {"last_role": "user"}, "times": 1,
         "reply": {"tool_calls": [{"name": "write_file", "arguments": {"path": "note.txt", "content": IN_FILE}}]}},
        {"when": {"last_role": "tool"}, "times": 1,
         "reply": {"tool_calls": [{"name": "read_file", "arguments": {"path": "note.txt"}}]}},
    ],
    "fallback": HOSTILE,
}  # fmt: skip


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write_project(tmp_path, PROJECT)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(SCRIPT) as srv:
        yield srv


def environment(server: ScriptedServer) -> dict[str, str]:
    return runner_env(server, key="sk-test-tty")


def on_a_terminal(root: Path, server: ScriptedServer, *args: str) -> tuple[int, bytes]:
    """Run the CLI with stdout and stderr on a pseudo-terminal; everything it printed there."""
    master, slave = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "runner", *args], cwd=root, env=environment(server),
        stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return process.wait(timeout=300), b"".join(chunks)


def piped(root: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=root, env=environment(server), capture_output=True, timeout=300,
        stdin=subprocess.DEVNULL,
    )


def assert_inert(shown: bytes) -> None:
    for raw in RAW:
        assert raw not in shown, (raw, shown[-3000:])


def test_the_readable_log_and_answer_on_a_terminal_hold_no_control_characters(root: Path, server: ScriptedServer) -> None:
    code, shown = on_a_terminal(root, server, "run", "ask")
    assert code == 0, shown.decode(errors="replace")
    assert_inert(shown)
    text = shown.decode()
    (read,) = [line for line in text.splitlines() if "act read_file" in line]
    assert "\\x1b]0;pwned\\x07" in read and "\\u202e" in read  # the tool output, made visible
    assert "bidi\\u202eevil" in text and "c1\\x9b31m" in text and "nul\\x00" in text
    assert "end\ttab\r\nsecond line" in text  # the answer's tab and line break kept (the terminal adds \r)


def test_piped_readable_output_is_neutralised_too(root: Path, server: ScriptedServer) -> None:
    """The human format is always neutralised: a log file or `| less` later reaches a terminal."""
    result = piped(root, server, "run", "ask")
    assert result.returncode == 0, result.stderr
    assert_inert(result.stdout + result.stderr)
    assert result.stdout.decode().startswith("title\\x1b]0;pwned\\x07 clear\\x1b[2J")
    assert "end\ttab\nsecond line" in result.stdout.decode()  # tab and line break kept


def test_json_keeps_the_answer_exact_and_still_inert(root: Path, server: ScriptedServer) -> None:
    result = piped(root, server, "run", "ask", "--json")
    assert result.returncode == 0, result.stderr
    assert_inert(result.stdout)
    events = [json.loads(line) for line in result.stdout.decode().splitlines()]
    finished = events[-1]
    assert finished["event"] == "run_finished"
    calls = [e for e in events if e["event"] == "tool_call"]
    assert [c["name"] for c in calls] == ["write_file", "read_file"]
    assert "\x1b]0;pwned\x07" in calls[1]["output_excerpt"]  # exact, JSON-escaped on the wire
    run_id = finished["run_id"]
    shown = piped(root, server, "runs", "show", run_id, "--json")
    assert shown.returncode == 0 and b"\xe2\x80\xae" not in shown.stdout and b"\xc2\x9b" not in shown.stdout
    assert json.loads(shown.stdout)["final_output"] == HOSTILE


def test_runs_show_on_a_terminal_is_inert(root: Path, server: ScriptedServer) -> None:
    result = piped(root, server, "run", "ask", "--json")
    run_id = json.loads(result.stdout.decode().splitlines()[-1])["run_id"]
    for args in (["runs", "show", run_id], ["runs"]):
        code, shown = on_a_terminal(root, server, *args)
        assert code == 0, shown
        assert_inert(shown)
    code, shown = on_a_terminal(root, server, "runs", "show", run_id)
    assert b"read_file" in shown


def test_an_error_quoting_the_endpoints_text_is_inert(root: Path) -> None:
    fault = {"fallback": {"fault": {"status": 400, "body": {"error": {"message": HOSTILE, "type": "bad_request"}}}}}
    with ScriptedServer(fault) as failing:
        code, shown = on_a_terminal(root, failing, "run", "ask")
        assert code == 1, shown
        assert_inert(shown)
        assert b"pwned" in shown  # the message is shown, made visible
        listing = piped(root, failing, "runs", "--json")
        run_id = json.loads(listing.stdout)[0]["run_id"]
        code, shown = on_a_terminal(root, failing, "runs", "show", run_id)  # its reason quotes the same text
    assert code == 0 and b"reason:" in shown and b"pwned" in shown, shown
    assert_inert(shown)


def test_a_command_line_value_quoted_in_an_error_is_inert(root: Path, server: ScriptedServer) -> None:
    for args in (["run", "ask\x1b]0;pwned\x07"], ["batch", "ask", "--input", "in\x1b[2J.csv", "--output", "o.jsonl"]):
        code, shown = on_a_terminal(root, server, *args)
        assert code == 2, shown
        assert_inert(shown)
        assert b"Traceback" not in shown


def test_batch_readable_output_is_inert(root: Path, server: ScriptedServer) -> None:
    (root / "rows.csv").write_bytes(b"q\n\x1b]0;row\x07\n")
    (root / "tasks.d" / "rows.yaml").write_text(
        "apiVersion: runner/v1\nkind: Task\nname: rows\ninputs: {q: {type: string}}\nagent: echo\ngoal: '{{ inputs.q }}'\n"
    )
    code, shown = on_a_terminal(root, server, "batch", "rows", "--input", "rows.csv", "--output", "out.jsonl", "--progress", "log")
    assert code == 0, shown
    assert_inert(shown)


# --- the functions themselves ------------------------------------------------------------------


@pytest.mark.parametrize("code", [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x200E, 0x200F,
                                  *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029, 0xDC80])  # fmt: skip
def test_every_control_is_shown_as_an_escape(code: int) -> None:
    char = chr(code)
    line = safe_line(f"a{char}b")
    assert char not in line
    if char in "\n\t\r":
        assert line == "a b" and safe_text(f"a{char}b") == (f"a{char}b" if char != "\r" else "a\\x0db")
        assert safe_text("a\r\nb") == "a\nb" and safe_line("a\r\nb") == "a b"
    else:
        assert safe_text(f"a{char}b") == line and line.encode("utf-8")
    encoded = json.dumps({"v": f"a{char}b"}, ensure_ascii=False)
    assert json.loads(json_for_terminal(encoded)) == {"v": f"a{char}b"}
    assert char not in json_for_terminal(encoded)


def test_printable_text_is_untouched() -> None:
    text = "Grüße, 你好, emoji 🎉, math ∑, quotes “x”, backslash \\x1b stays"
    assert safe_text(text) == text == safe_line(text)
    assert json_for_terminal(json.dumps(text, ensure_ascii=False)) == json.dumps(text, ensure_ascii=False)
