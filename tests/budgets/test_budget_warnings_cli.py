"""``warn_at`` crossings beyond the run's own report, through real ``runner`` processes against
the loopback server: in the batch report (each with the row whose call made it), in ``runner
stats`` (text and JSON, with what their deliveries did), exactly once per window however many
processes spend in it, and delivered to a budget's ``deliver:`` targets: a real SMTP server
(STARTTLS, login), a loopback webhook receiver, a file:// copy; a failed delivery is a warning of
the run, and the run's next attempt sends only what did not arrive. On the SQLite stores of the
machine and on the shared PostgreSQL store."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.budgets.test_budget_resume_cli import AGENTS, SCRIPT, TASKS, row_data
from tests.budgets.test_budget_runs_cli import AGENTS as LOOPING_AGENTS
from tests.budgets.test_budget_runs_cli import TASKS as LOOPING_TASKS
from tests.budgets.test_budget_runs_cli import env_for, goal, script
from tests.reports.test_delivery import HOOK_SECRET, SMTP_PASSWORD, SMTP_USER, Hooks, Inbox  # servers: conftest.py
from tests.support.project import run_cli, write_project

pytestmark = pytest.mark.timeout(300)
ROWS = 6  # about $0.00026 each: $0.0016 in all, 39% of the limit
LIMIT = 0.004


def budget(limit: float, warn_at: str, deliver: str = "") -> str:
    return (f"apiVersion: runner/v1\nkind: Budget\nname: daily\nmax_cost_usd: {limit}\nwindow: day\n"
            f"timezone: Europe/Berlin\nwarn_at: {warn_at}\n{deliver}")  # fmt: skip


def batch_project(root: Path, deliver: str = "") -> Path:
    write_project(root, {"agents.d/a.yaml": AGENTS, "tasks.d/t.yaml": TASKS,
                         "budgets.d/daily.yaml": budget(LIMIT, "[0.1, 0.2]", deliver)})  # fmt: skip
    with (root / "rows.csv").open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "data"])
        writer.writerows([f"r{i}", row_data(i)] for i in range(ROWS))
    return root


def run_batch(root: Path, server: ScriptedServer, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, "batch", "add", "--input", "rows.csv", "--id-column", "id", "--output", "out.jsonl",
                   "--concurrency", "3", "--progress", "none", "--json", env=env, drop=("RUNNER_STORE",))  # fmt: skip


def stats(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, None, "stats", "--since", "1d", *args, env=env, drop=("RUNNER_STORE",))


def test_warnings_are_in_the_batch_report_and_runner_stats(tmp_path: Path, store_target: str | Path) -> None:
    root = batch_project(tmp_path / "p")
    env = env_for(store_target)
    with ScriptedServer(SCRIPT) as server:
        done = run_batch(root, server, env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads(done.stdout)
    report = json.loads((Path(summary["report_path"]).parent / "batch_report.json").read_text())
    warnings = report["budget_warnings"]
    assert [(w["threshold"], w["cap"], w["limit"]) for w in warnings] == [(0.1, "max_cost_usd", LIMIT), (0.2, "max_cost_usd", LIMIT)]
    assert all(w["scope"].startswith("budget 'daily' (day window ") and w["spent"] >= w["threshold"] * LIMIT for w in warnings)
    records = {r["id"]: r for r in map(json.loads, (root / "out.jsonl").read_text().splitlines())}
    for warning in warnings:  # the row whose call crossed it says so too
        assert warning["message"] in records[warning["row_id"]]["warnings"]
    markdown = Path(summary["report_path"]).read_text()
    assert "## Budget warnings" in markdown and f"10% of max_cost_usd={LIMIT:g}" in markdown and f"20% of max_cost_usd={LIMIT:g}" in markdown

    shown = stats(root, env, "--json")
    assert shown.returncode == 0, shown.stderr
    listed = json.loads(shown.stdout)["budget_warnings"]
    assert [w["message"] for w in listed] == [w["message"] for w in warnings]
    assert [w["run_id"] for w in listed] == [records[w["row_id"]]["run_id"] for w in warnings]
    assert {w["task"] for w in listed} == {"add"} and all(w["deliveries"] == [] for w in listed)
    text = stats(root, env)
    assert text.returncode == 0, text.stderr
    assert "BUDGET WARNINGS (2)" in text.stdout and f"passed 20% of max_cost_usd={LIMIT:g}" in text.stdout
    assert stats(root, env, "--task", "other", "--json").stdout.count("passed") == 0  # the task filter applies


def test_each_threshold_is_warned_once_however_many_processes_spend_in_the_window(
    tmp_path: Path, store_target: str | Path
) -> None:
    files = {"agents.d/a.yaml": LOOPING_AGENTS, "tasks.d/t.yaml": LOOPING_TASKS,
             "budgets.d/daily.yaml": budget(LIMIT, "[0.25, 0.5, 0.75]") + "scope: {tags: [nightly]}\n"}  # fmt: skip
    root = write_project(tmp_path / "p", files)
    results: list[subprocess.CompletedProcess[str]] = []
    with ScriptedServer(script()) as server:

        def run(seed: int) -> None:
            args = ("run", "add", "--input", f"data={goal(seed=seed)}", "--no-report", "--json")
            results.append(run_cli(root, server, *args, env=env_for(store_target), drop=("RUNNER_STORE",)))

        threads = [threading.Thread(target=run, args=(seed,)) for seed in (1, 2, 3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [r.returncode for r in results] == [3, 3, 3], [r.stderr[-1000:] for r in results]
    events = [json.loads(line) for r in results for line in r.stdout.splitlines()]
    told = sorted(e["threshold"] for e in events if e.get("event") == "budget_warning")
    assert told == [0.25, 0.5, 0.75]  # every share once: none twice, none missed


def smtp_delivery(root: Path, port: int, cert: Path) -> str:
    (root / "certs").mkdir(parents=True)
    shutil.copy(cert, root / "certs" / "smtp.pem")
    return f"""\
deliver:
  - email:
      to: [finance@example.com]
      from: {SMTP_USER}
      smtp: {{host: 127.0.0.1, port: {port}, username_env: SMTP_USER, password_env: SMTP_PASSWORD, ca_file: certs/smtp.pem}}
  - webhook: {{url_env: BUDGET_WEBHOOK_URL, retries: 0}}
  - copy: {{to: "file://{root / 'shared'}/{{{{ budget }}}}/{{{{ (warning.threshold * 100) | int }}}}"}}
"""


def attachments(message: Any) -> dict[str, bytes]:
    return {p.get_filename(): p.get_payload(decode=True) for p in message.walk() if p.get_filename()}


def test_batch_warnings_are_delivered_by_email_webhook_and_copy(
    tmp_path: Path, store_target: str | Path, smtp: tuple[Inbox, int], hooks: tuple[Hooks, str],
    certificate: tuple[Path, Path],
) -> None:
    inbox, port = smtp
    receiver, hook_url = hooks
    root = tmp_path / "p"
    root = batch_project(root, smtp_delivery(root, port, certificate[0]))
    env = {**env_for(store_target), "SMTP_USER": SMTP_USER, "SMTP_PASSWORD": SMTP_PASSWORD, "BUDGET_WEBHOOK_URL": hook_url}
    with ScriptedServer(SCRIPT) as server:
        done = run_batch(root, server, env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = {r["run_id"]: r for r in map(json.loads, (root / "out.jsonl").read_text().splitlines())}

    assert sorted(m["Subject"] for m in inbox.messages) == [
        "Budget 'daily' passed 10% of max_cost_usd [warning]", "Budget 'daily' passed 20% of max_cost_usd [warning]",
    ]
    for message in inbox.messages:
        assert message["To"] == "finance@example.com" and message["From"] == SMTP_USER
        files = attachments(message)
        assert set(files) == {"budget_warning.md", "budget_warning.json"}
        sent = json.loads(files["budget_warning.json"])
        assert sent["budget"] == "daily" and sent["cap"] == "max_cost_usd" and sent["limit"] == LIMIT
        assert sent["run_id"] in records and sent["task"] == "add"
        text = next(p for p in message.walk() if p.get_content_type() == "text/plain").get_payload(decode=True).decode()
        assert sent["message"] in text

    assert sorted(b["budget_warning"]["threshold"] for b in receiver.bodies) == [0.1, 0.2]
    for body in receiver.bodies:
        assert body["status"] == "warning" and body["title"].startswith("Budget 'daily' passed ")
        assert body["budget_warning"]["message"] in body["summary"] and body["run_id"] in records
    for percent in ("10", "20"):
        copied = root / "shared" / "daily" / percent
        assert {p.name for p in copied.iterdir()} == {"budget_warning.md", "budget_warning.json"}
        assert json.loads((copied / "budget_warning.json").read_text())["threshold"] == int(percent) / 100

    listed = json.loads(stats(root, env, "--json").stdout)["budget_warnings"]
    assert [[(d["name"], d["status"]) for d in w["deliveries"]] for w in listed] == [
        [("email", "delivered"), ("webhook", "delivered"), ("copy", "delivered")]
    ] * 2
    assert "delivered: email, webhook, copy" in stats(root, env).stdout
    for path in root.rglob("*"):  # the password and the webhook's secret path are never kept
        if path.is_file():
            assert SMTP_PASSWORD.encode() not in path.read_bytes() and HOOK_SECRET.encode() not in path.read_bytes(), path


def test_a_failed_delivery_is_a_warning_and_the_next_attempt_sends_only_it(
    tmp_path: Path, smtp: tuple[Inbox, int], hooks: tuple[Hooks, str], certificate: tuple[Path, Path]
) -> None:
    inbox, port = smtp
    receiver, hook_url = hooks
    root = tmp_path / "p"
    deliver = smtp_delivery(root, port, certificate[0])
    rules = [{"times": 1, "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + 1"}}]}}
             for i in range(4)]  # fmt: skip
    write_project(root, {"agents.d/a.yaml": AGENTS, "tasks.d/t.yaml": TASKS,
                         "budgets.d/daily.yaml": budget(0.002, "[0.1, 0.2]", deliver)})  # fmt: skip
    env = {"SMTP_USER": SMTP_USER, "SMTP_PASSWORD": SMTP_PASSWORD, "BUDGET_WEBHOOK_URL": hook_url}
    receiver.statuses = [500, 500]  # the webhook refuses both warnings of the first attempt
    args = ("run", "add", "--input", f"data={row_data(1)}", "--run-id", "add-1", "--no-report", "--json")
    with ScriptedServer({"tokenizer": "o200k_base", "rules": rules, "fallback": "Done."}) as server:
        first = run_cli(root, server, *args, env=env, drop=("RUNNER_",))
    assert first.returncode == 0, first.stderr[-2000:]  # an undelivered warning does not change the run's result
    finished = json.loads(first.stdout.splitlines()[-1])
    assert finished["status"] == "completed"
    undelivered = [w for w in finished["warnings"] if w.startswith("budget warning not delivered to 'webhook'")]
    assert len(undelivered) == 2 and "answered HTTP 500" in undelivered[0], finished["warnings"]
    assert len(inbox.messages) == 2 and len(receiver.bodies) == 2

    with ScriptedServer({"fallback": "Done."}) as server:
        second = run_cli(root, server, *args, env=env, drop=("RUNNER_",))
    assert second.returncode == 0, second.stderr[-2000:]
    assert len(inbox.messages) == 2  # the email is not sent again
    assert len(receiver.bodies) == 4 and sorted(b["budget_warning"]["threshold"] for b in receiver.bodies[2:]) == [0.1, 0.2]
    assert not [w for w in json.loads(second.stdout.splitlines()[-1])["warnings"] if "not delivered" in w]
