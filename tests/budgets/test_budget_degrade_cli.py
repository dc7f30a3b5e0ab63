"""``on_exceed: degrade``: once a budget's window has spent its first ``warn_at`` share, the
agents in its scope call their ``fallback_model`` for the rest of the window. Real parts: a
``runner batch`` process and then a ``runner run`` process against the loopback server
(OpenAI's protocol), the SQLite ledger of the machine. What the server was asked for (the
model of each request) shows the switch; the batch report names the rows that ran degraded,
the second process switches from its first call (it reads the window's spend from the
ledger, not from memory), and its run report says so."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import batch_inputs, chat_calls, row_of
from tests.support.project import run_cli, write_project

pytestmark = pytest.mark.timeout(300)
LIMIT = 0.05
THRESHOLD = 0.8
ROWS = 12
AGENTS = """\
apiVersion: runner/v1
kind: Agent
name: summariser
tags: [nightly]
model: {id: gpt-4o, max_tokens: 50}
fallback_model: {id: gpt-4o-mini, max_tokens: 50}
system_prompt: You summarise lists of figures in one word.
"""
TASKS = """\
apiVersion: runner/v1
kind: Task
name: summarise
inputs:
  data: {type: string}
agent: summariser
goal: "Summarise these figures: {{ inputs.data }}"
"""
BUDGET = f"""\
apiVersion: runner/v1
kind: Budget
name: daily
max_cost_usd: {LIMIT}
window: day
warn_at: [{THRESHOLD}, 0.95]
on_exceed: degrade
scope: {{tags: [nightly]}}
"""


def script() -> dict[str, Any]:
    return {"tokenizer": "o200k_base", "rules": [], "fallback": "Done."}


def figures(seed: int, chars: int = 3000) -> str:
    rnd = random.Random(seed)
    return ",".join(rnd.choice("0123456789") for _ in range(chars // 2))[:chars]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = write_project(tmp_path / "p", {"agents.d/a.yaml": AGENTS, "tasks.d/t.yaml": TASKS, "budgets.d/daily.yaml": BUDGET})
    (root / "rows.jsonl").write_text("".join(json.dumps({"id": f"r{i}", "data": figures(i)}) + "\n" for i in range(1, ROWS + 1)))
    return root


def test_degrade_at_80_percent_switches_to_the_fallback_model_for_the_rest_of_the_window(project: Path) -> None:
    out = project / "out"
    with ScriptedServer(script()) as server:
        result = run_cli(project, server, "batch", "summarise", "--input", str(project / "rows.jsonl"), "--concurrency", "1", "--id-column", "id",
                         "--progress", "none", "--output", str(out / "rows.jsonl"), "--report-dir", str(out))  # fmt: skip
        calls = server.billed_costs()
        asked = [r.body["model"] for r in server.requests]
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert asked == [model for model, _ in calls] and len(asked) == ROWS  # one call per row, in row order
    switched = asked.index("gpt-4o-mini")
    assert switched >= 2 and asked == ["gpt-4o"] * switched + ["gpt-4o-mini"] * (ROWS - switched), asked
    spent = [sum(cost for _, cost in calls[:n]) for n in range(ROWS + 1)]
    assert spent[switched - 1] < THRESHOLD * LIMIT <= spent[switched], spent  # the first call after the crossing degraded
    assert spent[-1] <= LIMIT

    report = json.loads((out / "batch_report.json").read_text())
    assert report["counts"]["done"] == ROWS
    degraded = report["degraded"]
    assert degraded["rows"] == ROWS - switched
    assert [d["id"] for d in degraded["listed"]] == [f"r{i}" for i in range(switched + 1, ROWS + 1)]
    first = degraded["listed"][0]
    assert (first["budget"], first["agent"], first["model"], first["fallback_model"], first["threshold"], first["step"],
            first["first_call"]) == ("daily", "summariser", "gpt-4o", "gpt-4o-mini", THRESHOLD, "main", 1)  # fmt: skip
    markdown = (out / "batch_report.md").read_text()
    assert f"## Rows run on a fallback model ({ROWS - switched})" in markdown
    records = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [r["degraded"] == [] for r in records] == [True] * switched + [False] * (ROWS - switched)
    (degraded_row,) = records[switched]["degraded"]  # the output file says it too
    assert (degraded_row["budget"], degraded_row["model"], degraded_row["fallback_model"], degraded_row["step"],
            degraded_row["first_call"]) == ("daily", "gpt-4o", "gpt-4o-mini", "main", 1)  # fmt: skip
    assert f"| r{switched + 1} " in markdown and f"| r{switched} " not in markdown.split("fallback model (")[1]

    with ScriptedServer(script()) as server:  # another process, the same window: degraded from its first call
        again = run_cli(project, server, "run", "summarise", "--input", f"data={figures(99)}", "--reports-dir",
                        str(project / "reports"), "--json")  # fmt: skip
        assert [r.body["model"] for r in server.requests] == ["gpt-4o-mini"]
    assert again.returncode == 0, again.stderr
    events = [json.loads(line) for line in again.stdout.splitlines()]
    manifest = events[-1]
    assert [(d["budget"], d["fallback_model"]) for d in manifest["degraded"]] == [("daily", "gpt-4o-mini")]
    assert [e["fallback_model"] for e in events if e.get("event") == "budget_degraded"] == ["gpt-4o-mini"]
    (run_report,) = (project / "reports").rglob("report.md")
    assert "**Degraded:** step 'main' (agent 'summariser') called gpt-4o-mini instead of gpt-4o from its call 1 on: budget 'daily' was past 80%" in run_report.read_text()


def test_degrade_switches_provider_batch_rounds_to_the_fallback_model(project: Path) -> None:
    """``--via batch-api``: each call is decided as it is reserved, before it waits for its round, so
    rounds made after the window passed 80% ask the provider for the fallback model (at concurrency 1,
    one row's call per round). The output file's ``degraded`` column (CSV: JSON text) names the switch."""
    half = BUDGET.replace(f"max_cost_usd: {LIMIT}", f"max_cost_usd: {LIMIT / 2}")  # batch prices are half
    write_project(project, {"budgets.d/daily.yaml": half})
    out = project / "out"
    with ScriptedServer(script(), batch=BatchBehaviour(polls=1)) as server:
        result = run_cli(project, server, "batch", "summarise", "--input", str(project / "rows.jsonl"), "--concurrency", "1",
                         "--id-column", "id", "--via", "batch-api", "--batch-poll-seconds", "0.01", "--progress", "none",
                         "--output", str(out / "rows.csv"), "--report-dir", str(out))  # fmt: skip
        asked = {row_of(line): line["body"]["model"] for lines in batch_inputs(server) for line in lines}
        live = chat_calls(server)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert live == [] and len(asked) == ROWS  # every call went through a provider batch, one per row
    models = [asked[f"r{i}"] for i in range(1, ROWS + 1)]
    switched = models.index("gpt-4o-mini")
    assert switched >= 2 and models == ["gpt-4o"] * switched + ["gpt-4o-mini"] * (ROWS - switched), models

    with (out / "rows.csv").open(newline="") as rows:
        records = list(csv.DictReader(rows))
    assert [r["id"] for r in records] == [f"r{i}" for i in range(1, ROWS + 1)]
    assert [r["degraded"] for r in records[:switched]] == [""] * switched
    for record in records[switched:]:
        (degraded,) = json.loads(record["degraded"])
        assert (degraded["budget"], degraded["model"], degraded["fallback_model"], degraded["threshold"]) == (
            "daily", "gpt-4o", "gpt-4o-mini", THRESHOLD)
    report = json.loads((out / "batch_report.json").read_text())
    assert report["counts"]["done"] == ROWS and report["degraded"]["rows"] == ROWS - switched
