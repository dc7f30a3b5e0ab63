"""``runner batch --estimate``: what the whole file will cost and take, before it runs.

Two ways to know:

* **A paid sample** (the default): ``--sample N`` rows (20 unless given, picked by ``--seed``) run
  as a trial (:mod:`runner.batch.trial`), within the batch caps given (``--max-cost-usd`` caps the
  sample too). Their rows stay done, so the full run does not pay for them again. The forecast is
  the sample's mean cost per row times the rows still to run, plus what the journal has spent
  already; the range is a 90% interval of that mean (``mean +- 1.645 * sd / sqrt(n)``).
* **No calls** (``--no-calls``): every row's first prompt is rendered and counted exactly
  (:mod:`runner.model.tokens`), priced with no output (the low end) and with the model's
  ``max_tokens`` of output (the worst case of one call; a row that calls tools or repairs its
  answer makes more calls).

Both give tokens, the expected time at the request's concurrency and rate limits, and the price at
the provider's Batch API rates (``prices.yaml``'s ``batch_*``, else half the live price) and at flex
rates. Flex processing is billed at Batch API rates (OpenAI's pricing), and this runner's prices
have no flex column of their own, so the flex figure is the Batch API one.
With ``--max-cost-usd`` the forecast says whether the file fits: exit 3 when even the low end does not.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from runner.config.prices import batch_price, cost_usd, find_price
from runner.config.project import Project
from runner.config.specs import Price, TaskSpec
from runner.errors import EXIT_CAPPED, EXIT_OK, UsageError

if TYPE_CHECKING:
    from runner.batch.journal import JournalRow
    from runner.batch.request import BatchRequest

DEFAULT_SAMPLE = 20
Z_90 = 1.645


@dataclass(frozen=True)
class Forecast:
    """What the whole file is expected to cost and take (USD, tokens, seconds), with a range."""

    method: str  # "sample" | "no-calls"
    rows: int  # valid rows in the file
    rows_to_run: int  # of them, not done yet
    priced_rows: int  # rows the figures per row come from
    cost_per_row: tuple[float, float, float]  # low, expected, high
    total: tuple[float, float, float]  # the whole file: spent so far + the rows still to run
    spent: float  # what the journal has spent already (the sample's rows included)
    input_tokens_per_row: float
    output_tokens_per_row: float
    seconds: float | None  # expected wall time of the rows still to run (None: unknown)
    batch_api_total: float | None  # the rows still to run at Batch API rates, plus spent
    flex_total: float | None
    max_cost_usd: float | None
    model: str

    @property
    def fits(self) -> bool | None:
        """Whether the file fits ``max_cost_usd`` (None: no cap given; False only when even the low end passes it)."""
        return None if self.max_cost_usd is None else self.total[0] <= self.max_cost_usd

    @property
    def exit_code(self) -> int:
        return EXIT_CAPPED if self.fits is False else EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fits": self.fits, "exit_code": self.exit_code}


async def estimate_batch(project: Project, task: TaskSpec, request: BatchRequest, *, no_calls: bool = False) -> Forecast:
    """The forecast for ``request``'s whole file (see the module doc)."""
    if request.limit is not None:
        raise UsageError("--estimate prices the whole file; --limit does not apply (--sample N sets its sample size)")
    if request.mode(task) == "batch-api":
        raise UsageError("--estimate runs its sample live; give --via live (the forecast shows the Batch API price)")
    if no_calls:
        return _without_calls(project, task, request)
    from runner.batch.file_batch import open_journal, run_batch_file
    from runner.batch.trial import trial_rows

    sampled = replace(request, sample=request.sample or DEFAULT_SAMPLE)
    await run_batch_file(project, task, sampled)
    journal, _ = open_journal(project, task, replace(sampled, restart=False))
    try:
        chosen = trial_rows(journal, sampled) or frozenset()
        rows = list(journal.records())
    finally:
        journal.close()
    priced = [row for row in rows if row.number in chosen and row.attempts]
    if not priced:
        raise UsageError("--estimate: no sampled row ran (a cap stopped the sample?); nothing to price from")
    return _from_sample(project, task, request, rows, priced)


def _from_sample(project: Project, task: TaskSpec, request: BatchRequest, rows: list[JournalRow], priced: list[JournalRow]) -> Forecast:
    costs = [row.usage.cost_usd for row in priced]
    mean = statistics.fmean(costs)
    spread = Z_90 * statistics.stdev(costs) / math.sqrt(len(costs)) if len(costs) > 1 else 0.0
    valid = [row for row in rows if row.status != "invalid"]
    to_run = sum(row.status != "done" for row in valid)
    spent = sum(row.usage.cost_usd for row in rows)
    per_row = (max(mean - spread, 0.0), mean, mean + spread)
    tokens_in = statistics.fmean(row.usage.input_tokens for row in priced)
    tokens_out = statistics.fmean(row.usage.output_tokens for row in priced)
    cached = statistics.fmean(row.usage.cached_input_tokens for row in priced)
    calls = statistics.fmean(row.usage.model_calls for row in priced)
    durations = [row.duration_seconds for row in priced if row.duration_seconds is not None]
    model, price = _model_price(project, task, request)
    seconds = _seconds(request, to_run, statistics.fmean(durations) if durations else None, calls, tokens_in + tokens_out)
    discounted = None if price is None else spent + to_run * cost_usd(batch_price(price), round(tokens_in), round(tokens_out), round(cached))
    return Forecast(
        "sample", len(valid), to_run, len(priced), _rounded(per_row), _rounded(tuple(spent + to_run * c for c in per_row)),
        round(spent, 8), round(tokens_in, 1), round(tokens_out, 1), seconds, _round(discounted), _round(discounted),
        request.batch_caps.max_cost_usd, model,
    )


def _without_calls(project: Project, task: TaskSpec, request: BatchRequest) -> Forecast:
    """Every row's first prompt counted exactly; no output (low) to ``max_tokens`` of it (the worst case)."""
    from runner.batch.file_batch import open_journal
    from runner.batch.inputs import read_rows
    from runner.config.templates import render
    from runner.model.tokens import counter_for_model

    if task.agent is None or task.goal is None or task.agent not in project.agents:
        raise UsageError(f"--estimate --no-calls prices a task with one agent and a goal; '{task.name}' has steps: "
                         "drop --no-calls to price it from a paid sample")  # fmt: skip
    agent = project.agents[task.agent]
    model, price = _model_price(project, task, request)
    if price is None:
        raise UsageError(f"--estimate: no price for model '{model}' (add it to prices.yaml)")
    counter = counter_for_model(model)
    journal, source = open_journal(project, task, request)
    try:
        done = {row.number for row in journal.records() if row.status == "done"}
        spent = journal.spent().cost_usd
    finally:
        journal.close()
    prompts: list[int] = []
    valid = 0
    for row in read_rows(source, task.inputs):
        if not row.valid:
            continue
        valid += 1
        if row.number in done:
            continue
        goal = render(task.goal, {"inputs": row.inputs})
        body = {"model": model, "messages": [{"role": "system", "content": agent.system_prompt}, {"role": "user", "content": goal}]}
        prompts.append(counter.prompt_tokens(body))
    to_run = len(prompts)
    prompt_mean = statistics.fmean(prompts) if prompts else 0.0
    worst = agent.model.max_tokens
    low = sum(cost_usd(price, p, 0) for p in prompts)
    high = sum(cost_usd(price, p, worst) for p in prompts)
    discounted = batch_price(price)
    batch_high = spent + sum(cost_usd(discounted, p, worst) for p in prompts)
    per_row = (low / to_run, (low + high) / 2 / to_run, high / to_run) if to_run else (0.0, 0.0, 0.0)
    seconds = _seconds(request, to_run, None, 1.0, prompt_mean + worst)
    return Forecast(
        "no-calls", valid, to_run, to_run, _rounded(per_row), _rounded((spent + low, spent + (low + high) / 2, spent + high)),
        round(spent, 8), round(prompt_mean, 1), float(worst), seconds, _round(batch_high), _round(batch_high),
        request.batch_caps.max_cost_usd, model,
    )


def _model_price(project: Project, task: TaskSpec, request: BatchRequest) -> tuple[str, Price | None]:
    """The model of the task's (first) agent as called, and its price."""
    names = task.agents_used()
    agent = project.agents.get(names[0]) if names else None
    model = request.model_override or (agent.model.id if agent else "")
    return model, find_price(project.prices, model)


def _seconds(request: BatchRequest, rows: int, row_seconds: float | None, calls_per_row: float, tokens_per_row: float) -> float | None:
    """The longest of: rows at the concurrency, calls at ``--rpm``, tokens at ``--tpm`` (None when none is known)."""
    from runner.batch.request import DEFAULT_CONCURRENCY

    bounds = []
    if row_seconds is not None:
        bounds.append(rows * row_seconds / (request.concurrency or DEFAULT_CONCURRENCY))
    if request.requests_per_minute:
        bounds.append(60 * rows * calls_per_row / request.requests_per_minute)
    if request.tokens_per_minute:
        bounds.append(60 * rows * tokens_per_row / request.tokens_per_minute)
    return round(max(bounds), 1) if bounds else None


def render_estimate(forecast: Forecast) -> list[str]:
    """The forecast as lines for a terminal."""
    low, mid, high = forecast.total
    row_low, row_mid, row_high = forecast.cost_per_row
    how = (f"from {forecast.priced_rows} sampled row(s) (paid; they count toward the full run)" if forecast.method == "sample"
           else f"from the prompts of {forecast.priced_rows} row(s), no calls made (output: none to max_tokens)")  # fmt: skip
    lines = [
        f"estimate for {forecast.rows} row(s), {forecast.rows_to_run} still to run, model {forecast.model}, {how}:",
        f"  cost per row: ${row_mid:.6f} (${row_low:.6f} to ${row_high:.6f})",
        f"  total: ${mid:.4f} (${low:.4f} to ${high:.4f}), ${forecast.spent:.4f} of it spent already",
        f"  tokens per row: {forecast.input_tokens_per_row:,.0f} in, {forecast.output_tokens_per_row:,.0f} out",
    ]
    if forecast.seconds is not None:
        lines.append(f"  expected time: {_duration(forecast.seconds)} at the given concurrency and rate limits")
    else:
        lines.append("  expected time: unknown without calls (give --rpm/--tpm, or drop --no-calls)")
    if forecast.batch_api_total is not None:
        lines.append(f"  at Batch API rates (--via batch-api): ${forecast.batch_api_total:.4f}; at flex rates: "
                     f"${forecast.flex_total:.4f} (flex is billed at Batch API rates)")  # fmt: skip
    if forecast.fits is not None:
        verdict = ("fits" if high <= (forecast.max_cost_usd or 0) else "may not fit (the high end passes it)") if forecast.fits \
            else "does not fit, even at the low end"  # fmt: skip
        lines.append(f"  --max-cost-usd {forecast.max_cost_usd}: the file {verdict}")
    return lines


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 8)


def _rounded(values: tuple[float, ...]) -> tuple[float, float, float]:
    low, mid, high = (round(v, 8) for v in values)
    return low, mid, high
