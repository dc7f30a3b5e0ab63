"""The API key in forms other than its exact text, through the real CLI: spelled with JSON
``\\u`` escapes in a tool call's arguments, or base64- or hex-encoded in the endpoint's
answer. None of them may reach the run store, ``runs show --transcript --json`` or any report
format; each used to be stored as sent (and the escapes shown decoded)."""

from __future__ import annotations

import base64
import json
import re
import sqlite3
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from runner.redact import encoded_forms
from tests.support.project import MODEL_KEY, run_cli, write_project

pytestmark = pytest.mark.timeout(180)

AGENT = """\
apiVersion: runner/v1
kind: Agent
name: echo
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [calculator]
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: leak
agent: echo
goal: Say something.
report: {formats: [markdown, html, json]}
"""
ESCAPED = "".join(f"\\u{ord(c):04x}" if i % 2 == 0 else c for i, c in enumerate(MODEL_KEY))


def decoded(text: str) -> str:
    """``text`` with every ``\\uXXXX`` escape decoded, as a reader of the JSON would see it."""
    return re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)


def everything_kept(root: Path, run_id: str) -> dict[str, str]:
    """What the run left behind that a person or a program reads: the store, every report,
    ``runs show --transcript --json`` and ``runs show --json``."""
    kept: dict[str, str] = {}
    db = sqlite3.connect(root / ".runner" / "runs.sqlite3")
    try:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            rows = db.execute(f'SELECT * FROM "{table}"').fetchall()
            kept[f"table {table}"] = json.dumps(rows, default=str, ensure_ascii=False)
    finally:
        db.close()
    for path in (root / "reports").rglob("report.*"):
        kept[str(path.relative_to(root))] = path.read_text(encoding="utf-8", errors="replace")
    for flags in (("--transcript", "--json"), ("--json",)):
        shown = run_cli(root, None, "runs", "show", run_id, *flags)
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr[-2000:]
        kept[" ".join(flags)] = json.dumps(json.loads(shown.stdout), ensure_ascii=False)
    return kept


def run(root: Path, rules: list[dict[str, object]]) -> None:
    with ScriptedServer({"rules": rules}) as server:
        done = run_cli(root, server, "run", "leak", "--run-id", "leak-1")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_key_spelled_with_json_escapes_in_tool_arguments_is_never_kept(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"agents.d/echo.yaml": AGENT, "tasks.d/leak.yaml": TASK})
    arguments = '{"expression": "' + ESCAPED + '"}'
    assert json.loads(arguments)["expression"] == MODEL_KEY
    run(root, [{"times": 1, "reply": {"tool_calls": [{"name": "calculator", "arguments": arguments}]}},
               {"reply": {"content": "done"}}])  # fmt: skip
    kept = everything_kept(root, "leak-1")
    for where, text in kept.items():
        assert MODEL_KEY not in decoded(text), where
        assert ESCAPED not in text, where
    assert "[REDACTED]" in kept["--transcript --json"]


@pytest.mark.parametrize("encoding", ["base64", "base64 offset", "urlsafe base64", "hex", "HEX"])
def test_a_key_the_endpoint_encoded_is_never_kept(tmp_path: Path, encoding: str) -> None:
    raw = MODEL_KEY.encode()
    encoded = {
        "base64": base64.b64encode(raw).decode(),
        "base64 offset": base64.b64encode(b"Bearer:" + raw).decode(),
        "urlsafe base64": base64.urlsafe_b64encode(b"x" + raw + b"?>").decode(),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
    }[encoding]
    root = write_project(tmp_path / "p", {"agents.d/echo.yaml": AGENT, "tasks.d/leak.yaml": TASK})
    run(root, [{"reply": {"content": f"Here is your token: {encoded} (keep it safe)"}}])
    kept = everything_kept(root, "leak-1")
    assert {"reports/leak/leak-1/report.md", "reports/leak/leak-1/report.html", "reports/leak/leak-1/report.json"} <= set(kept)
    forms = [MODEL_KEY, *(text for _, text in encoded_forms(MODEL_KEY))]
    for where, text in kept.items():
        assert not [form for form in forms if form in text], where
    assert "Here is your token:" in kept["reports/leak/leak-1/report.md"]
