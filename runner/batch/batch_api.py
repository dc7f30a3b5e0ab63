"""``runner batch --via batch-api`` (or ``mode: batch_api`` on the task): the batch engine as
usual, its model calls sent in provider batch rounds (:mod:`runner.batch.rounds`).

Every row runs through the live path (the agent loop with its tools, checks and repairs,
caps reserved at batch prices before each call, the write-ahead call ledger); each model
call waits for its round, and every row's k-th call goes out in the same provider batch.
All pending rows are in flight at once, so each round holds every row that has a call to
make; ``--concurrency N`` keeps at most N rows in flight, so a round holds at most N rows'
calls (a row that ends makes room for the next, whose first call joins the next round). A
provider batch has no per-minute rate, so ``--rpm`` and ``--tpm`` are refused
(:func:`refused_flags`). A resumed command first collects what the last one left out, then replays the
stored answers (:mod:`runner.agent.replay`), so no round is submitted or paid for twice.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import IO, TYPE_CHECKING

from runner.batch.dedupe import DedupingExecutor
from runner.batch.engine import FailurePolicy, run_batch
from runner.batch.executor import RowExecutor, TaskExecutor
from runner.batch.inputs import Row
from runner.batch.journal import BatchJournal
from runner.batch.provider_api import PollPolicy
from runner.batch.round_model import RoundRows, RoundTransport
from runner.batch.rounds import RoundCollector, endpoint_key
from runner.batch.summary import BatchSummary
from runner.caps.budget import Budget
from runner.caps.pricing import Pricer
from runner.config.prices import find_price
from runner.config.profiles import find_profile
from runner.config.project import Project
from runner.config.specs import AgentSpec, TaskSpec
from runner.core.providers import Provider, no_batch_api_message
from runner.errors import UsageError
from runner.model.endpoint import Endpoint
from runner.model.factory import resolve_endpoint
from runner.runs.options import RunOptions
from runner.runs.secrets import known_secrets

if TYPE_CHECKING:
    from runner.batch.batch_flavours import BatchTarget
    from runner.batch.request import BatchRequest

TODO_STATUSES = ("pending", "running", "failed", "not_run")


def check_batch_api(
    project: Project, task: TaskSpec, model_override: str | None, base_url_override: str | None, api_key: str | None
) -> list[BatchTarget]:
    """The endpoints the task's agents call, each with its Batch API (flavour and limits,
    :mod:`runner.batch.batch_flavours`), or :class:`UsageError` (exit 2, before any call) when
    one of them has none: the embedded local model, a provider runner does not batch through,
    or a model whose profile says ``batch_api: null``; or when two agents calling one endpoint
    differ in ``model.extra_headers`` (:func:`_one_header_set`)."""
    from runner.batch.batch_flavours import batch_target

    targets: list[BatchTarget] = []
    callers: dict[str, tuple[AgentSpec, Endpoint, str]] = {}
    for agent in _agents(project, task):
        endpoint = resolve_endpoint(agent.model, model_override=model_override, base_url_override=base_url_override, api_key=api_key)
        if endpoint.provider is Provider.LOCAL:
            raise UsageError(
                f"task '{task.name}' cannot run with --via batch-api: its agent '{agent.name}' uses the embedded local "
                "model, which has no Batch API. Configure an OpenAI-compatible endpoint (OPENAI_API_KEY, OPENAI_BASE_URL "
                "or --base-url), or run it live (--via live)"
            )
        _one_header_set(task, callers, agent, endpoint)
        profile = find_profile(project.profiles, endpoint.model_id, named=agent.model.profile)
        if profile.batch_api is None:
            raise UsageError(f"task '{task.name}' cannot run with --via batch-api: " + no_batch_api_message(
                f"its agent '{agent.name}' calls model '{endpoint.model_id}' (profile '{profile.name}', batch_api: null)"
            ))  # fmt: skip
        target = batch_target(endpoint, profile)
        if target is None:
            what = f"its agent '{agent.name}' calls {endpoint.model_id} through provider {endpoint.provider.value}"
            raise UsageError(f"task '{task.name}' cannot run with --via batch-api: {no_batch_api_message(what)}")
        targets.append(target)
    for degraded in _degraded(_agents(project, task)):  # a budget's degrade sends these calls through the same rounds
        endpoint = resolve_endpoint(degraded.model, model_override=model_override, base_url_override=base_url_override, api_key=api_key)
        if endpoint.provider.has_batch_api:
            _one_header_set(task, callers, degraded, endpoint, "/fallback_model/extra_headers")
    return targets


def _one_header_set(
    task: TaskSpec, callers: dict[str, tuple[AgentSpec, Endpoint, str]], agent: AgentSpec, endpoint: Endpoint,
    pointer: str = "/model/extra_headers",
) -> None:
    """Refuse (exit 2, before any call) a second agent calling ``endpoint`` with other
    ``model.extra_headers`` than the first (``pointer``: where the agent's file sets them): headers
    go with each HTTP request, and the Batch API carries every agent's calls to one endpoint in
    the same requests (one upload, one create, the same polls), so one set of headers must do for all of them."""
    key = endpoint_key(endpoint)
    first = callers.setdefault(key, (agent, endpoint, pointer))
    if first[1].headers == endpoint.headers:
        return
    other, where = first[0], first[2]
    raise UsageError(
        f"task '{task.name}' cannot run with --via batch-api: its agents '{other.name}' ({other.source}: {where}) "
        f"and '{agent.name}' ({agent.source}: {pointer}) both call {key} but with different extra_headers, and a "
        "provider batch sends all their calls in the same requests; give them the same extra_headers, or run it live (--via live)"
    )


def provider_endpoints(project: Project, task: TaskSpec, request: BatchRequest) -> list[Endpoint]:
    """The OpenAI-compatible endpoints the task's agents call now (the embedded model left out)."""
    endpoints = [
        resolve_endpoint(agent.model, model_override=request.model_override, base_url_override=request.base_url_override,
                         api_key=request.api_key)
        for agent in _agents(project, task)
    ]  # fmt: skip
    return [endpoint for endpoint in endpoints if endpoint.provider.has_batch_api]


def batch_api_agent(project: Project, task: TaskSpec) -> AgentSpec:
    """The agent whose model the task's provider batches are for (the first the task runs),
    or :class:`UsageError` (exit 2) when the task has none, or one of its agents is on the
    embedded local model, which has no Batch API."""
    agents = _agents(project, task)
    local = [agent.name for agent in agents if agent.model.provider is Provider.LOCAL]
    if not agents or local:
        why = f"its agent '{local[0]}' uses the embedded local model, which has no Batch API" if local else "it runs no agent"
        raise UsageError(f"task '{task.name}' cannot run with --via batch-api: {why}; run it live (--via live)")
    return agents[0]


def _agents(project: Project, task: TaskSpec) -> list[AgentSpec]:
    """Every agent whose model a row may call: the task's, and their judges."""
    names = list(task.agents_used())
    names += [judge.agent for name in list(names) if (judge := project.agents[name].judge) is not None]
    return [project.agents[name] for name in dict.fromkeys(names) if name in project.agents]


def _degraded(agents: list[AgentSpec]) -> list[AgentSpec]:
    """Those agents on their ``fallback_model`` (where a budget's ``degrade`` sends their calls)."""
    return [agent.on_fallback() for agent in agents if agent.fallback_model is not None]


async def run_batch_api(
    project: Project, task: TaskSpec, request: BatchRequest, journal: BatchJournal, rows: Iterable[Row],
    executor: TaskExecutor, budget: Budget, base: RunOptions,
) -> BatchSummary:
    """Run the journal's pending rows with their model calls in provider batch rounds; see the module doc."""
    from runner.batch.trial import trial_rows

    started = time.monotonic()
    if not journal.ingested:
        journal.ingest(rows)
    select = trial_rows(journal, request)  # a trial's rows (--limit, --sample): only they go into the rounds
    budget.count_from(journal.age_seconds())  # the rounds' polls stop at the batch's deadline, as the rows do
    endpoints = check_batch_api(project, task, request.model_override, request.base_url_override, request.api_key)
    collector = RoundCollector(
        journal, executor.store, endpoints=endpoints, prices=lambda model: Pricer(model, find_price(project.prices, model)),
        deadline=budget, limits=request.batch_limits or task.batch_api, poll=PollPolicy(first_seconds=request.batch_poll_seconds),
        wait=request.provider_wait, fallback_live=request.batch_fallback == "live", secrets=known_secrets(project, base),
        log=None if request.progress == "none" else sys.stderr, notices=sys.stderr,  # the stream of now, not of import time
    )
    executor.send_through(RoundTransport(collector))
    if request.watch is not None:
        request.watch.attach(collector.state, collector.endpoints, journal.batch_id)
    try:
        summary = await _rounds(journal, executor, collector, request, budget, base, started, select)
    except asyncio.CancelledError:  # interrupted (Ctrl-C, SIGTERM): what is out stays out, for a rerun
        _kept(collector, sys.stderr)
        raise
    return replace(summary, selection=None if select is None else tuple(sorted(select)))


async def _rounds(
    journal: BatchJournal, executor: TaskExecutor, collector: RoundCollector, request: BatchRequest, budget: Budget,
    base: RunOptions, started: float, select: frozenset[int] | None,
) -> BatchSummary:
    """The rows through the engine, their calls in rounds (after what an earlier run left is collected)."""
    from runner.batch.request import progress_for

    async with collector:
        if not await collector.resume():
            return BatchSummary(
                batch_id=journal.batch_id, counts=journal.counts(), usage=journal.spent(),
                elapsed_seconds=round(time.monotonic() - started, 3), pending=collector.pending,
            )
        rounds: RowExecutor = RoundRows(executor, collector)
        summary = await run_batch(
            (), DedupingExecutor(rounds) if request.dedupe else rounds, journal=journal, budget=budget,
            concurrency=_rows_to_run(journal, request.concurrency, select), max_attempts=request.max_attempts,
            failure_policy=FailurePolicy(stop_after=request.stop_after_failures), progress=progress_for(request),
            base_options=base, ledger=executor, select=select, retry_failed=request.retry_failed,
        )
    # calls settled after their rows ended (cut off at a cap) corrected the journal since
    return replace(summary, counts=journal.counts(), usage=journal.spent(), pending=collector.pending)


def _kept(collector: RoundCollector, stream: IO[str]) -> None:
    """Tell an interrupted user which provider batches are still out, and what to do about them."""
    pending = collector.pending
    if not pending:
        return
    names = ", ".join(pending)
    print(
        f"interrupted: provider batch(es) {names} keep running at the provider (kept, not cancelled). Rerun the same "
        "command to re-attach and collect them: nothing is submitted or paid for twice. To stop paying for them "
        "instead, rerun it with --restart (cancels them and starts over), or cancel them at the provider "
        "(POST /v1/batches/<id>/cancel).", file=stream, flush=True,
    )  # fmt: skip


def _rows_to_run(journal: BatchJournal, concurrency: int | None, select: frozenset[int] | None = None) -> int:
    """How many rows may be in flight: every row that may run (of a trial: its rows), so each
    round holds them all, or at most ``concurrency`` when the request names it."""
    if select is None:
        counts = journal.counts()
        every = max(1, sum(counts[status] for status in TODO_STATUSES))
    else:
        every = max(1, len(select))
    return every if concurrency is None else min(every, concurrency)


RATE_FLAGS = (("--rpm", "requests_per_minute"), ("--tpm", "tokens_per_minute"))


def refused_flags(request: BatchRequest) -> list[str]:
    """The flags of ``request`` a provider batch cannot honour (the rate limits): each round goes
    out as one upload, with no per-minute rate to keep, and the few calls ``--batch-fallback
    live`` sends are not rate limited either. Refused rather than ignored."""
    return [flag for flag, field_name in RATE_FLAGS if getattr(request, field_name) is not None]
