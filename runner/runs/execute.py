"""Executing one task: inputs -> workspace -> steps (one agent, or a pipeline) -> record -> report.

:func:`execute_task` never raises for what happens *during* a run (a cap, a stuck agent, a
model fault, a failed step): it returns a :class:`RunResult` with a status. It raises
:class:`~runner.errors.ConfigError` / :class:`~runner.errors.InputError` for problems found
before anything is spent.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import secrets
import sqlite3
import tempfile
import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from runner.agent.embedding_meter import LedgerEmbeddingMeter, embedding_pricer
from runner.caps.budget import Budget, Owner, within_deadline
from runner.config.coerce import resolve_inputs
from runner.config.project import Project
from runner.config.specs import TaskSpec
from runner.config.template_types import TemplateError
from runner.config.templates import render
from runner.core.budget_warnings import BudgetWarning
from runner.core.report_formats import DOCUMENTS, FILE_NAMES
from runner.core.results import RunResult
from runner.errors import CapReached, StoreDamaged, StoreUnavailable, UsageError
from runner.local_state import confined_tree, state_path
from runner.locations import Location, upload_tree
from runner.model.factory import ModelPool
from runner.pipelines.declared import PipelineOutcome, run_pipeline
from runner.redact import redact_secrets
from runner.runs.context import RunContext
from runner.runs.local_dirs import REPORTS_FIX, check_local_dirs
from runner.runs.options import RunOptions
from runner.runs.record import build_record
from runner.runs.secrets import known_secrets
from runner.runs.services import RunServices, open_services
from runner.runs.steps import StepRunner, preflight_prices, run_agent_step
from runner.runs.tracing import traced_run
from runner.runs.workspace import default_workspace as default_workspace  # re-exported for callers
from runner.runs.workspace import reusable_steps, run_workspace
from runner.store.database import resolve_store
from runner.store.recorder import RunRecorder
from runner.store.runstore import RunStore, now_iso
from runner.tools.base import Tool
from runner.tools.registry import ToolRegistry


def default_store_path(root: Path) -> Path:
    return state_path(root, "runs.sqlite3", holds="the run store", sqlite=True)


def new_run_id(task: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{task}-{stamp}-{secrets.token_hex(3)}"


def config_hash(project: Project, task: TaskSpec) -> str:
    """A hash of the resolved configuration this run used (task + every agent + tools);
    computed once per project and task (a batch asks for it on every row)."""
    cached = project.hashes.get(task.name)
    if cached is None:
        cached = project.hashes[task.name] = _config_hash(project, task)
    return cached


def _config_hash(project: Project, task: TaskSpec) -> str:
    agents = {n: repr(a) for n, a in sorted(project.agents.items())}
    tools = {n: t.data for n, t in sorted(project.tools.items())}
    payload = json.dumps({"task": repr(task), "agents": agents, "tools": tools}, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(payload.encode()).hexdigest()


async def execute_task(
    project: Project,
    task: TaskSpec,
    raw_inputs: dict[str, Any],
    options: RunOptions,
    *,
    store: RunStore | None = None,
    pool: ModelPool | None = None,
) -> RunResult:
    """Run ``task`` once (or resume the run ``options.run_id``)."""
    today = date.today()
    inputs = resolve_inputs(task, raw_inputs, today)
    run_id = options.run_id or new_run_id(task.name)
    if not RUN_ID.fullmatch(run_id):
        raise UsageError(f"run id {run_id!r}: use letters, digits, '.', '_' and '-' only (at most 128)")
    check_local_dirs(project, task, options, store_given=store is not None, run_id=run_id)  # before anything is spent
    own_store = store is None
    store = store or open_run_store(project.root, path=options.store_path, url=options.store_url)
    own_pool = pool is None
    pool = pool or ModelPool(notice=_notice(options))
    try:
        async with contextlib.AsyncExitStack() as stack:
            registry = await _registry(project, task, stack)
            options = stack.enter_context(traced_run(project, options, pool))  # unchanged when tracing is off
            services = await open_services(project, task, options, stack)
            return await _execute(project, task, inputs, run_id, options, store, pool, today, registry, services)
    finally:
        if own_pool:
            await pool.aclose()
        if own_store:
            store.close()


async def _execute(
    project: Project, task: TaskSpec, inputs: dict[str, Any], run_id: str, options: RunOptions,
    store: RunStore, pool: ModelPool, today: date, registry: ToolRegistry, services: RunServices,
) -> RunResult:
    caps = task.caps.tighten(options.caps)
    chash = config_hash(project, task)
    secrets = known_secrets(project, options)  # an input may hold a key: the store keeps it redacted, like everything else
    attempt = store.start_run(run_id, task.name, redact_secrets(inputs, secrets), chash, caps.as_dict())
    recorder = RunRecorder(store, run_id, attempt, options.events, secrets)
    try:
        owner = Owner(run_id, attempt, task.name)  # a shared scope records whose calls it holds
        parent = options.parent_budget
        run_warnings: list[str] = []  # the run's warnings, budget warnings included as they come
        if project.budgets:
            from runner.runs.budget_scopes import budget_notice, task_budgets, with_budgets

            notice = budget_notice(run_warnings, recorder)
            parent = with_budgets(task_budgets(project, task), parent, project.root, options.store_url, notice)
        budget = parent.child(caps, "task", owner=owner) if parent else Budget(caps, "task", owner=owner)
        warnings = _carry_over(store, run_id, budget) if attempt > 1 else []
        completed = store.completed_steps(run_id) if options.resume and attempt > 1 else {}
        resumed, moved = reusable_steps(project, task, run_id, options, completed)
        warnings += [moved] if moved else []
        replayed = False
        if attempt > 1 and not resumed:  # a retried attempt: its saved tool results may be replayed
            from runner.runs.replayed_workspace import replayed_workspace

            replayed = replayed_workspace(project, run_id, options, store, warnings)
        run_warnings[:0] = warnings + services.warnings
        ctx = RunContext(
            project, task, inputs, run_id, attempt, options, store, recorder, budget, pool, registry,
            workspace=run_workspace(project, task, run_id, options, fresh=attempt > 1 and not resumed and not replayed),
            today=today, previous=_previous(store, task, run_id, inputs), config_hash=chash, resumed=resumed,
            warnings=run_warnings, services=services,
        )
        return await _attempt(ctx)
    except BaseException as exc:  # record why the run stopped, then let the error reach the caller
        try:
            store.abort_run(run_id, redact_secrets(f"{type(exc).__name__}: {exc}", recorder.secrets))
        except (StoreUnavailable, StoreDamaged):  # the store is down or locked: its next open records the run as interrupted
            raise exc from None
        raise


def _carry_over(store: RunStore, run_id: str, budget: Budget) -> list[str]:
    """A resumed run's caps carry over: its wall clock counts from the first attempt, and what
    earlier attempts spent counts here (the parents, a batch, counted it when it happened, or
    re-read it from the run store after a crash). Calls a crash left in flight count at their
    worst case, and the run says so."""
    row = store.run(run_id)
    if row is not None:
        first = datetime.fromisoformat(row["started_at"])
        budget.count_from((datetime.now(UTC) - first).total_seconds())
    unsettled = store.unsettled_calls(run_id)
    budget.add_spend(store.spent(run_id), local=True)
    if not unsettled.model_calls:
        return []
    return [
        f"{unsettled.model_calls} model call(s) were in flight when an earlier attempt of this run ended; "
        f"they are counted at their worst case (${unsettled.cost_usd:.6f}, {unsettled.total_tokens} tokens): "
        "this spend is an estimate"
    ]


async def _attempt(ctx: RunContext) -> RunResult:
    """The run proper: its steps, then the record, the report and the store's final word."""
    task, recorder, budget = ctx.task, ctx.recorder, ctx.budget
    recorder.emit(
        "run_started", task=task.name, attempt=ctx.attempt, inputs=ctx.inputs, caps=budget.caps.as_dict(),
        resumed_steps=sorted(ctx.resumed),
    )
    started_at, started = now_iso(), time.monotonic()
    preflight_prices(ctx, task.agents_used())
    outcome = await _refresh_knowledge(ctx) or await _run_steps(ctx)
    met = await _budget_warnings(ctx)
    duration = time.monotonic() - started
    output, error = redact_secrets(outcome.output, recorder.secrets), redact_secrets(outcome.error, recorder.secrets)
    record = redact_secrets(
        build_record(
            ctx, status=outcome.status, error=error, error_kind=outcome.error_kind, output=output, plan=outcome.plan,
            started_at=started_at,
            duration=duration, title=_title(ctx),
        ),
        recorder.secrets,
    )
    report_dir, deliveries = await _write_report(ctx, record)
    if deliveries:
        record = {**record, "deliveries": list(deliveries)}
    result = RunResult(
        run_id=ctx.run_id, task=task.name, status=outcome.status, output=output, error=error,
        error_kind=outcome.error_kind, error_scope=outcome.error_scope, error_budget=outcome.error_budget, usage=budget.spent,
        duration_seconds=duration, report_dir=report_dir, warnings=tuple(record["warnings"]), deliveries=deliveries,
        budget_warnings=met,
        degraded=tuple(d for step in ctx.done.values() for d in step.degraded),
    )
    ctx.store.finish_run(result, record)
    recorder.emit("run_finished", **result.manifest())
    return result


async def _budget_warnings(ctx: RunContext) -> tuple[BudgetWarning, ...]:
    """The budget warnings the run met, delivered where their budgets say (:mod:`runner.runs.budget_delivery`)."""
    if not ctx.project.budgets:
        return ()
    from runner.runs.budget_delivery import deliver_budget_warnings

    return await deliver_budget_warnings(ctx)


async def _refresh_knowledge(ctx: RunContext) -> PipelineOutcome | None:
    """Build or refresh the run's knowledge bases, their embeddings requests paid from the run's
    caps and recorded; ``capped`` when a request would pass a cap (it is not sent), or when the
    run's wall-clock cap passes while a file is being read (its parser's process is killed)."""
    def meter_for(name: str) -> LedgerEmbeddingMeter:
        return LedgerEmbeddingMeter(ctx.budget, ctx.recorder, embedding_pricer(ctx.project.prices, _embedding_model(ctx, name)), name)

    try:
        async with within_deadline(ctx.budget):
            await ctx.services.refresh_knowledge(meter_for)
    except CapReached as cap:
        return PipelineOutcome("capped", None, str(cap), cap.cap, cap.scope, error_budget=cap.budget)
    ctx.warnings += [w for w in ctx.services.warnings if w not in ctx.warnings]
    return None


def _embedding_model(ctx: RunContext, name: str) -> str:
    embedder = ctx.services.knowledge[name].embedder
    return embedder.model if embedder is not None else ""


async def _run_steps(ctx: RunContext) -> PipelineOutcome:
    """One agent on the task's goal, or the task's pipeline."""
    task = ctx.task
    if task.pipeline is not None:
        return await run_pipeline(StepRunner(ctx), task)
    assert task.agent is not None and task.goal is not None
    record = await run_agent_step(ctx, "main", "agent", task.agent, task.goal, visible=set(), output_schema=task.output_schema)
    if not record.completed:
        return PipelineOutcome(
            record.status, record.output, record.error, record.error_kind, record.error_scope,
            error_budget=record.error_budget,
        )  # fmt: skip
    return PipelineOutcome("completed", record.output)


async def _registry(project: Project, task: TaskSpec, stack: contextlib.AsyncExitStack) -> ToolRegistry:
    """Built-in and custom tools for this run; MCP servers the task's agents use are started
    here and stopped when the run ends. Fails closed when a sandboxed tool has no sandbox."""
    from runner.tools.registry import default_registry
    from runner.tools.settings import custom_settings_schema

    registry = default_registry()
    for spec in project.tools.values():
        if spec.type != "mcp":  # built when first looked up: a run builds only the tools it uses
            build = functools.partial(_build_custom_tool, spec.data, spec.source)
            registry.register_lazy(spec.name, spec.source, custom_settings_schema(spec.data), build)
    used = _tools_used(project, task)
    for spec in project.tools.values():
        if spec.type == "mcp" and any(name == spec.name or name.startswith(spec.name + "__") for name in used):
            from runner.tools.custom.mcp_server import McpToolset  # the mcp package is heavy: only when used

            registry.extend(await stack.enter_async_context(McpToolset(spec.data, spec.source)))
    sandboxed = [name for name, mode in used.items() if name in registry and registry.get(name).needs_sandbox and mode != "none"]
    if sandboxed:
        from runner.tools.sandbox import ensure_sandbox

        ensure_sandbox()
    return registry


def _build_custom_tool(data: dict[str, Any], source: str) -> Tool:
    from runner.tools.custom import build_custom_tool  # its modules load only when a run uses one

    return build_custom_tool(data, source)


def _tools_used(project: Project, task: TaskSpec) -> dict[str, str]:
    """Tool name -> sandbox mode of the agent using it, over every agent and step of the task."""
    used: dict[str, str] = {}
    for name in task.agents_used():
        agent = project.agents[name]
        for ref in agent.tools:
            used.setdefault(ref.name, agent.sandbox_mode)
    if task.pipeline:
        for step in task.pipeline.steps:
            if step.tool:
                used.setdefault(step.tool, "bwrap")
            for ref in step.tools or ():
                used.setdefault(ref.name, project.agents[step.agent].sandbox_mode if step.agent else "bwrap")
    return used


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def open_run_store(root: Path, *, path: Path | None = None, url: str | None = None, read_only: bool = False) -> RunStore:
    """The run store: ``url`` (PostgreSQL), else the SQLite file ``path``, else ``$RUNNER_STORE_URL``,
    else ``<state dir>/runs.sqlite3`` (``<root>/.runner``, or ``$RUNNER_STATE_DIR``) (see :func:`runner.store.database.resolve_store`).
    ``read_only``: for a command that only reads (see :class:`RunStore`)."""
    target = resolve_store(url=url, path=path, default=default_store_path(root))
    try:
        return RunStore(target, read_only=read_only)
    except (OSError, sqlite3.Error) as exc:
        raise UsageError(f"cannot open the run store {target}: {exc}; pass --store PATH") from None


def _previous(store: RunStore, task: TaskSpec, run_id: str, inputs: dict[str, Any]) -> dict[str, Any] | None:
    if not task.previous_run:
        return None
    row = store.previous_completed(task.name, run_id, inputs)
    if row is None:
        return None
    return {
        "run_id": row["run_id"],
        "finished_at": row["finished_at"],
        "date": json.loads(row["inputs_json"]).get("date"),
        "inputs": json.loads(row["inputs_json"]),
        "outputs": json.loads(row["output_json"] or "null"),
        "tables": json.loads(row["record_json"] or "{}").get("tables", {}),
    }


def _title(ctx: RunContext) -> str:
    if ctx.task.report.title:
        try:
            return render(ctx.task.report.title, ctx.template_context())
        except TemplateError:
            pass
    return ctx.task.description.split("\n")[0] if ctx.task.description else ctx.task.name


async def _write_report(ctx: RunContext, record: dict[str, Any]) -> tuple[Location | None, tuple[dict[str, Any], ...]]:
    """Write the report, then deliver it (``report.deliver``); where it is, and the deliveries."""
    if not ctx.options.write_report:
        return None, ()
    from runner.reports.writer import write_report

    base = ctx.options.reports_dir or ctx.project.root / "reports"
    out_dir = base / ctx.task.name / ctx.run_id
    if ctx.options.reports_dir is None and isinstance(out_dir, Path):  # a default place, perhaps a resumed run's: no link in it leads out
        confined_tree(out_dir, ctx.project.root, "run reports", REPORTS_FIX)
    workspace = ctx.workspace if ctx.workspace.is_dir() else None
    transcript = ctx.recorder.store.transcripts.read(ctx.run_id) if "html" in ctx.task.report.formats else []
    write = functools.partial(
        write_report, formats=ctx.task.report.formats, secrets=ctx.recorder.secrets, transcript=transcript
    )
    if isinstance(out_dir, Path):
        write(record, out_dir, workspace)
        return out_dir, await _deliver(ctx, record, out_dir)
    with tempfile.TemporaryDirectory(prefix="runner-report-") as staging:  # a URL: written here, then uploaded
        write(record, Path(staging), workspace)
        deliveries = await _deliver(ctx, record, Path(staging))
        upload_tree(Path(staging), out_dir)
    return out_dir, deliveries


async def _deliver(ctx: RunContext, record: dict[str, Any], report_dir: Path) -> tuple[dict[str, Any], ...]:
    """Send the written report (in the local directory ``report_dir``) where ``report.deliver``
    says (see :mod:`runner.reports.delivery`). A resumed run sends only what an earlier attempt
    did not deliver."""
    if not ctx.task.report.deliver:
        return ()
    import asyncio
    import os

    from runner.reports.delivery.deliver import deliver_all, earlier_outcomes, record_deliveries
    from runner.reports.delivery.outcome import Package

    stored = ctx.store.run(ctx.run_id) if ctx.attempt > 1 else None
    written = {fmt: report_dir / name for fmt, name in FILE_NAMES.items() if (report_dir / name).is_file()}
    package = Package(
        report_dir=report_dir, files=written, charts=sorted((report_dir / "artifacts").rglob("*.png")),
        title=str(record.get("title") or ctx.task.name), status=str(record["status"]),
        summary=redact_secrets(_summary_text(record.get("final_output")), ctx.recorder.secrets),
        run_id=ctx.run_id, task=ctx.task.name, exit_code=int(record["exit_code"]), environ=dict(os.environ),
    )
    context = ctx.template_context() | {"status": package.status, "exit_code": package.exit_code}
    targets = [target for target in ctx.task.report.deliver if target.wanted(package.status)]
    for target in ctx.task.report.deliver:
        if target not in targets:
            ctx.recorder.emit("notice", message=f"delivery '{target.name}' not sent: it is for when: {target.when}, "
                              f"and the run is {package.status}")  # fmt: skip
    outcomes = await asyncio.to_thread(
        deliver_all, targets, package, lambda template: render(template, context),
        earlier=earlier_outcomes(stored["record_json"] if stored else None), secrets=ctx.recorder.secrets,
        root=ctx.project.root, now=now_iso,
    )  # fmt: skip
    record_deliveries(report_dir, outcomes)
    _show_deliveries(ctx, record, outcomes, report_dir)
    for outcome in outcomes:
        ctx.recorder.emit("delivery", **{k: v for k, v in outcome.as_dict().items() if k != "files"})
    return tuple(o.as_dict() for o in outcomes)


def _show_deliveries(ctx: RunContext, record: dict[str, Any], outcomes: list[Any], report_dir: Path) -> None:
    """report.md and report.html on disk say where the report went (what was sent is unchanged)."""
    from runner.reports.writer import write_report

    shown = [fmt for fmt in DOCUMENTS if fmt in ctx.task.report.formats]
    if shown:
        final = {**record, "deliveries": [o.as_dict() for o in outcomes]}
        workspace = ctx.workspace if ctx.workspace.is_dir() else None
        write_report(final, report_dir, workspace, formats=shown, secrets=ctx.recorder.secrets)



def _summary_text(output: Any) -> str:
    if isinstance(output, str):
        return output.strip()
    return "" if output is None else json.dumps(output, ensure_ascii=False, default=str)[:2000]


def _notice(options: RunOptions) -> Any:
    def notice(text: str) -> None:
        if options.events is not None:
            options.events({"event": "notice", "message": text})

    return notice

