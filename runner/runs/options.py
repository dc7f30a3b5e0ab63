"""What a caller hands to a run (:class:`RunOptions`); what it gets back is a
:class:`runner.core.results.RunResult`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from runner.config.specs import Caps
from runner.core.ports import EventSink, RateGate
from runner.locations import Location

if TYPE_CHECKING:
    from runner.caps.budget import Budget


@dataclass
class RunOptions:
    """How to run one task. Everything optional has a sensible default."""

    run_id: str | None = None
    caps: Caps = field(default_factory=Caps)  # tightens the task's caps for this run
    parent_budget: Budget | None = None  # e.g. the batch's budget
    store_path: Path | None = None  # SQLite run store; default $RUNNER_STORE_URL, else <state dir>/runs.sqlite3
    store_url: str | None = None  # a shared run store (postgresql://...); wins over store_path and the environment
    reports_dir: Location | None = None  # a directory or a URL (runner.locations); default <root>/reports
    write_report: bool = True
    workspace_dir: Path | None = None  # default <state dir>/workspaces/<run_id> (runner.local_state)
    model_override: str | None = None  # --model
    base_url_override: str | None = None  # --base-url
    api_key: str | None = None  # given by the caller (e.g. Airflow connection), never logged
    rate_gate: RateGate | None = None
    events: EventSink | None = None
    resume: bool = True  # a run id seen before resumes: completed steps are not re-run
    use_cache: bool = True  # False (--no-cache): the result cache is neither read nor written
    replay_answers: bool = False  # a request answered for this run before (a provider batch's line, a kept live answer) is not sent again
    store_live_answers: bool = False  # keep each live answer and tool result, for an attempt that resumes this run to replay
    source_urls: dict[str, str] = field(default_factory=dict, repr=False)  # SQL source -> URL with secrets (Airflow connections)
