"""The options of a fan-out batch: what ``runner batch`` takes, typed, and each shard's share.

A fan-out takes the options of ``runner batch`` under the names of its flags (``id_column``
for ``--id-column``, ``map`` for ``--map``, ``rpm`` for ``--rpm``, ...); see
:data:`OPTION_NAMES`. Three do not carry over, by design: ``--journal`` (each shard keeps
its own journal in the dag run's work directory), ``--restart`` (a new dag run starts
over; a retry always resumes) and ``--progress`` (progress lines go to the task log).
Nor do a trial's rows (``--limit``, ``--sample``, ``--seed``), ``--estimate`` and ``--keep-columns``:
a fan-out runs the whole file and merges shard outputs (run a trial or a forecast with
``runner batch`` or :func:`runner.api.run_batch`); they are refused as unknown options. Nor does provider batch mode (``via``, ``batch_fallback``, ``batch_poll_seconds``): a fan-out
refuses them with a clear error. A provider batch already runs every row at once, on the
provider's side, so there is nothing to shard; and its rows are reserved at batch prices
before it is submitted, in its own journal, not in a fan-out's shared cap scope. Run it as
one task: :class:`runner.airflow.batch_operator.RunnerBatchOperator` with ``via="batch-api"``
and ``deferrable=True`` waits for it in the triggerer.

That operator takes these same options (``options={...}``). With ``via="batch-api"`` the
provider batch uses ``input_format``, ``output_format``, ``map``, ``id_column``,
``max_attempts``, ``durable``, ``model``, the batch caps (``max_cost_usd`` and ``max_tokens``
reserved at batch prices; ``max_wall_seconds`` counted from the batch's start, across tries:
when a deferrable task reaches it, the trigger cancels what is still out) and the row caps, and
``concurrency`` (rows in flight, so at most that many rows' calls per provider batch round; default:
every row), ``stop_after_failures``, ``no_cache`` and ``dedupe`` as the live engine does. The rate
limits (:data:`RATE_OPTIONS`) are refused: a provider batch has no per-minute rate to keep, and
they would be ignored.

Caps that add up over a whole batch (``max_cost_usd``, ``max_tokens``, the other summed
caps) hold across every shard on every worker: they are one shared scope in the cap ledger
(:mod:`runner.caps.shared`), where each model call reserves its worst case before it is
sent, so a shard may use what another leaves unspent and the total never passes the cap.
The rate limits ``rpm`` and ``tpm`` are divided evenly among the shards (a rate is per
process). ``max_wall_seconds`` and ``stop_after_failures`` apply to each shard as given. ``max_attempts`` is per Airflow try:
try *n* of a shard lets a row reach ``n * max_attempts`` attempts, so a retry re-runs rows
whose attempts an earlier try used up.

No Airflow imports here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from runner.airflow.typed import (
    choice,
    flag,
    optional_int,
    optional_number,
    optional_text,
    text_list,
    typed_cap,
    typed_caps,
)
from runner.config.specs import Caps
from runner.errors import UsageError, did_you_mean

FORMATS = ("csv", "jsonl", "parquet")
OPTION_NAMES = (
    "input_format", "output_format", "map", "id_column", "concurrency", "rpm", "tpm", "max_attempts",
    "stop_after_failures", "max_cost_usd", "max_tokens", "max_wall_seconds", "row_max_cost_usd", "row_max_steps",
    "durable", "model", "no_cache", "dedupe", "caps", "row_caps", "keep_answers", "retry_failed",
)  # fmt: skip
"""The ``runner batch`` flags a fan-out takes, plus ``caps``/``row_caps`` mappings of any cap names."""
PROVIDER_BATCH_OPTIONS = ("via", "batch_fallback", "batch_poll_seconds")
"""Provider batch mode: not in a fan-out (see the module doc); arguments of ``RunnerBatchOperator``."""
RATE_OPTIONS = ("rpm", "tpm")
"""Options only live calls use: refused with ``via="batch-api"`` (see the module doc)."""



@dataclass(frozen=True)
class FanoutOptions:
    """Every ``runner batch`` option that applies to a shard, typed (see the module doc)."""

    input_format: str | None = None
    output_format: str | None = None
    mapping: tuple[str, ...] = ()
    id_column: str | None = None
    concurrency: int | None = None  # None: 8 rows live; every row with a provider batch
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    max_attempts: int = 2
    stop_after_failures: int | None = None
    batch_caps: Caps = field(default_factory=Caps)
    row_caps: Caps = field(default_factory=Caps)
    durable: bool = False
    model: str | None = None
    no_cache: bool = False  # --no-cache: the result cache is neither read nor written
    dedupe: bool = False  # --dedupe: rows with identical inputs run once, within each shard
    keep_answers: bool = False  # --keep-answers: a changed configuration keeps the answers made so far
    retry_failed: bool = False  # --retry-failed: failed rows run once more on this try

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None, where: str = "options") -> FanoutOptions:
        """Type rendered values (text or native); a bad one raises :class:`UsageError` naming it."""
        values = dict(values or {})
        check_option_names(values, where)

        def at(name: str) -> str:
            return f"{where}.{name}"

        batch_caps = typed_caps(values.get("caps"), at("caps")).tighten(
            Caps(**_flag_caps(values, {"max_cost_usd": "max_cost_usd", "max_tokens": "max_tokens",
                                       "max_wall_seconds": "max_wall_seconds"}, where))
        )  # fmt: skip
        row_caps = typed_caps(values.get("row_caps"), at("row_caps")).tighten(
            Caps(**_flag_caps(values, {"row_max_cost_usd": "max_cost_usd", "row_max_steps": "max_steps"}, where))
        )
        return cls(
            input_format=choice(values.get("input_format"), at("input_format"), FORMATS),
            output_format=choice(values.get("output_format"), at("output_format"), FORMATS),
            mapping=text_list(values.get("map"), at("map")),
            id_column=optional_text(values.get("id_column"), at("id_column")),
            concurrency=optional_int(values.get("concurrency"), at("concurrency"), minimum=1, maximum=1024),
            requests_per_minute=optional_number(values.get("rpm"), at("rpm"), positive=True),
            tokens_per_minute=optional_number(values.get("tpm"), at("tpm"), positive=True),
            max_attempts=optional_int(values.get("max_attempts"), at("max_attempts"), minimum=1, maximum=100) or 2,
            stop_after_failures=optional_int(values.get("stop_after_failures"), at("stop_after_failures"), minimum=1),
            batch_caps=batch_caps,
            row_caps=row_caps,
            durable=flag(values.get("durable"), at("durable")),
            model=optional_text(values.get("model"), at("model")),
            no_cache=flag(values.get("no_cache"), at("no_cache")),
            dedupe=flag(values.get("dedupe"), at("dedupe")),
            keep_answers=flag(values.get("keep_answers"), at("keep_answers")),
            retry_failed=flag(values.get("retry_failed"), at("retry_failed")),
        )

    def shard_share(self, shards: int) -> FanoutOptions:
        """These options for one of ``shards`` shards: the rate limits divided evenly (the batch
        caps are not divided: the shards share one scope for them)."""
        if shards <= 1:
            return self
        return replace(
            self,
            requests_per_minute=_share(self.requests_per_minute, shards),
            tokens_per_minute=_share(self.tokens_per_minute, shards),
        )


def options_mapping(value: Mapping[str, Any] | str | None, where: str = "options") -> dict[str, Any]:
    """The options as a mapping: given as one, or rendered from a template (``options="{{
    params.options }}"``) as its JSON text or Python literal (what Airflow renders a dict
    param to, unless the DAG renders native objects). Anything else raises :class:`UsageError`."""
    if value is None or value == "":
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        import ast
        import json

        try:
            parsed = json.loads(value)
        except ValueError:
            try:
                parsed = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                parsed = None
        if isinstance(parsed, Mapping):
            return dict(parsed)
    raise UsageError(
        f"{where}: expected a mapping of runner batch options (or a template rendering to its JSON), "
        f"got {short_repr(value)}"
    )


def short_repr(value: Any, limit: int = 120) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def literal_options(value: Mapping[str, Any] | str | None, where: str = "options") -> Mapping[str, Any] | str:
    """What an operator keeps of its ``options`` argument: a template string as it is (checked
    once rendered), a mapping copied and its names checked now, so a misspelt option fails
    when the DAG is parsed."""
    if isinstance(value, str):
        return value
    values = dict(value or {})
    check_option_names(values, where)
    return values


def check_option_names(values: Mapping[str, Any], where: str = "options") -> None:
    """Refuse names that are not fan-out options (a typo would otherwise be ignored)."""
    for name in values:
        if name in PROVIDER_BATCH_OPTIONS:
            raise UsageError(
                f"{where}: '{name}' is not an option here: a provider batch (via='batch-api') is not sharded, since "
                "the provider already runs every row at once; run it as one task with "
                "runner.airflow.batch_operator.RunnerBatchOperator(via='batch-api', deferrable=True, ...), which takes "
                f"'{name}' as an argument"
            )
        if name not in OPTION_NAMES:
            raise UsageError(
                f"{where}: unknown option '{name}'{did_you_mean(str(name), OPTION_NAMES)} "
                f"(options: {', '.join(OPTION_NAMES)})"
            )


def check_provider_batch_options(values: Mapping[str, Any], where: str = "options") -> None:
    """Refuse the rate limits for a provider batch (they would do nothing, also for the calls
    ``batch_fallback='live'`` sends live); ``None`` counts as not given."""
    for name in RATE_OPTIONS:
        if values.get(name) is not None:
            raise UsageError(
                f"{where}.{name}: a provider batch (via='batch-api') has no per-minute rate to keep: each round goes "
                "out as one upload, and the calls batch_fallback='live' sends are not rate limited; drop the option, "
                "or give via='live'"
            )


def _flag_caps(values: Mapping[str, Any], flags: Mapping[str, str], where: str) -> dict[str, Any]:
    """The caps given as flags (``{flag: cap name}``), typed; flags not given are left out."""
    caps = {cap: typed_cap(values.get(flag), f"{where}.{flag}", cap) for flag, cap in flags.items()}
    return {cap: value for cap, value in caps.items() if value is not None}


def _share(total: float | None, shards: int) -> float | None:
    return None if total is None else total / shards
