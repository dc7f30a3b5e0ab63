"""The options of a batch, described once.

:data:`BATCH_OPTIONS` is the one description of what a batch takes besides its task, input
and output: ``runner batch``'s flags are made from it (:func:`runner.cli.options.batch_flags`),
:func:`runner.api.run_batch` takes its options as keywords, and the Airflow operators take them
in ``options`` (:mod:`runner.airflow.options`), all typed here by :meth:`BatchOptions.typed`
and turned into a :class:`~runner.batch.request.BatchRequest` by :meth:`BatchOptions.request_fields`.

Each option's name is the API keyword and the Airflow options key; its flag is ``--`` and the
name with dashes. Where it applies:

* ``cli``: a flag of ``runner batch`` (``caps``/``row_caps``, mappings of any cap names, are not);
* ``fanout``: how a fan-out's shards take it: :data:`EACH` shard as given, :data:`DIVIDED` evenly
  among them (a rate is per process), one :data:`SHARED` scope for all (the summed batch caps,
  :mod:`runner.caps.shared`), or at the :data:`MERGE` (the merged output's format and columns);
  ``None``: not an option of the Airflow operators at all, for the reason in ``elsewhere``;
* ``mode``: ``live`` or ``batch-api`` when it applies to one way of calling the model only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from runner.config.specs import BatchApiLimits, Caps
from runner.config.typed_values import (
    choice,
    flag,
    optional_int,
    optional_number,
    optional_text,
    text_list,
    typed_cap,
    typed_caps,
)
from runner.errors import UsageError, did_you_mean

Kind = Literal["text", "model", "choice", "list", "integer", "number", "flag", "cap", "caps"]
EACH, DIVIDED, SHARED, MERGE = "each", "divided", "shared", "merge"
FORMATS = ("csv", "jsonl", "parquet")
TRIAL = ("a trial's rows stay in its journal for the full run, and each Airflow dag run has a journal of its own; "
         "run a trial with runner batch or runner.api.run_batch")  # fmt: skip
PROVIDER_ARGUMENT = ("a provider batch is not sharded, since the provider already runs every row at once; run it as one "
                     "task with runner.airflow.batch_operator.RunnerBatchOperator(via='batch-api', deferrable=True, ...), "
                     "which takes it as an argument, not in its options")  # fmt: skip
PROVIDER_LIMIT = "the provider batch's size limits come from the task's batch_api block under Airflow"


@dataclass(frozen=True)
class BatchOption:
    """One option of a batch (see the module doc)."""

    name: str
    kind: Kind
    help: str
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    positive: bool = False  # a number more than 0
    choices: tuple[str, ...] = ()
    cap: str | None = None  # kind "cap": the cap it sets (row_max_steps sets max_steps)
    metavar: str | None = None
    item_pattern: str | None = None  # kind "list": what each item looks like (a DAG param refuses others at trigger time)
    cli: bool = True
    fanout: str | None = EACH
    elsewhere: str = ""  # fanout None: why the Airflow operators do not take it in options
    mode: str | None = None  # "live" | "batch-api": the only way of calling the model it applies to

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def integer_bounds(self) -> tuple[int | None, int | None]:
        """``minimum`` and ``maximum`` of an integer option, as integers."""
        low, high = self.minimum, self.maximum
        return (None if low is None else int(low), None if high is None else int(high))

    def typed(self, value: Any, where: str) -> Any:
        """``value`` (native, or text such as a rendered template) as this option's type; ``None``
        (or ``()``/``False``) when not given. A bad value raises :class:`UsageError` naming ``where``."""
        kind = self.kind
        if kind in ("text", "model"):
            return optional_text(value, where)
        if kind == "choice":
            return choice(value, where, self.choices)
        if kind == "list":
            return text_list(value, where)
        if kind == "flag":
            return flag(value, where)
        if kind == "integer":
            minimum, maximum = self.integer_bounds
            return optional_int(value, where, minimum=minimum, maximum=maximum)
        if kind == "number":
            return optional_number(value, where, minimum=self.minimum, positive=self.positive)
        if kind == "cap":
            assert self.cap is not None
            return typed_cap(value, where, self.cap)
        return typed_caps(value, where) if value is not None else None


def _cap(name: str, cap: str, help_: str, fanout: str = SHARED) -> BatchOption:
    return BatchOption(name, "cap", help_, cap=cap, fanout=fanout)


BATCH_OPTIONS: tuple[BatchOption, ...] = (
    BatchOption("input_format", "choice", "Input format (default: from the suffix).", choices=FORMATS),
    BatchOption("output_format", "choice", "Output format (default: from the suffix).", choices=FORMATS, fanout=MERGE),
    BatchOption("map", "list", "Take a task input from a differently named column (repeatable).", default=(), metavar="INPUT=COLUMN",
                item_pattern="^[^=]+=.+$"),
    BatchOption("id_column", "text", "Column holding each row's id (default: a hash of the row's inputs)."),
    BatchOption("concurrency", "integer", "Rows in flight at once (default: 8; with --via batch-api: every row, and N keeps "
                "each provider batch round to at most N rows' calls).", minimum=1, maximum=1024),
    BatchOption("rpm", "number", "Model requests per minute, shared by all rows (live only: refused with --via batch-api).",
                positive=True, fanout=DIVIDED, mode="live"),
    BatchOption("tpm", "number", "Model tokens per minute, shared by all rows (live only: refused with --via batch-api).",
                positive=True, fanout=DIVIDED, mode="live"),
    BatchOption("max_attempts", "integer", "Attempts per row, counting resumed ones (under Airflow: per try).", default=2,
                minimum=1, maximum=100),
    BatchOption("stop_after_failures", "integer", "Stop starting rows after this many failed rows (default: carry on).", minimum=1),
    _cap("max_cost_usd", "max_cost_usd", "Batch cap: total US dollars (0: free models only)."),
    _cap("max_tokens", "max_tokens", "Batch cap: total tokens (1 or more)."),
    _cap("max_wall_seconds", "max_wall_seconds", "Batch cap: wall-clock seconds for this invocation (more than 0).", fanout=EACH),
    BatchOption("caps", "caps", "Batch caps by cap name (a mapping); the flat caps above tighten them.", cli=False, fanout=SHARED),
    _cap("row_max_cost_usd", "max_cost_usd", "Per-row cap: US dollars (tightens the YAML).", fanout=EACH),
    _cap("row_max_steps", "max_steps", "Per-row cap: model calls (tightens the YAML).", fanout=EACH),
    BatchOption("row_caps", "caps", "Per-row caps by cap name (a mapping); the row caps above tighten them.", cli=False),
    BatchOption("keep_answers", "flag", "The configuration changed since the journal began: keep the answers made so far "
                "(each record names the fingerprint it was made under) and run the rows still to do under the new one."),
    BatchOption("limit", "integer", "Trial run: only the first N valid rows (they stay done: the full run does not pay for "
                "them again).", minimum=1, fanout=None, elsewhere=TRIAL),
    BatchOption("sample", "integer", "Trial run: N valid rows at random (--seed); with --estimate, the sample it prices from "
                "(default 20).", minimum=1, fanout=None, elsewhere=TRIAL),
    BatchOption("seed", "integer", "Which rows --sample picks (default 0; the same seed, the same rows).", fanout=None, elsewhere=TRIAL),
    BatchOption("retry_failed", "flag", "Run failed rows once more, also those whose attempts are used up or whose failure "
                "a retry would not fix."),
    BatchOption("keep_columns", "text", "Copy these input columns (or all) into each output record (JSONL: 'input'; "
                "CSV/Parquet: input.<name> columns).", metavar="A,B|all", fanout=MERGE),
    BatchOption("no_cache", "flag", "Bypass the result cache (cache: {ttl} in the YAML): every call goes to the endpoint or tool."),
    BatchOption("dedupe", "flag", "Run rows with identical inputs once; each row still gets its own output record "
                "(in a fan-out: within each shard)."),
    BatchOption("durable", "flag", "fsync every recorded row (survives power loss, slower)."),
    BatchOption("model", "model", "Use this model id for every agent."),
    BatchOption("via", "choice", "live: each model call is sent as it comes; batch-api: every row's k-th call goes out in one "
                "provider batch (OpenAI Batch API, about half price, each round answered within 24h). Default: the task's "
                "mode (live unless mode: batch_api).", choices=("live", "batch-api"), fanout=None, elsewhere=PROVIDER_ARGUMENT),
    BatchOption("batch_fallback", "choice", "With --via batch-api: a call its provider batch did not answer (expired, "
                "cancelled, a server error) is sent live at once, at the live price.", choices=("live",), fanout=None,
                elsewhere=PROVIDER_ARGUMENT, mode="batch-api"),
    BatchOption("batch_poll_seconds", "number", "With --via batch-api: first wait between status checks (grows to 10 "
                "minutes).", default=30.0, positive=True, fanout=None, elsewhere=PROVIDER_ARGUMENT),
    BatchOption("batch_max_requests", "integer", "With --via batch-api: requests per provider batch; a larger round is split "
                "(default: the task's batch_api.max_requests, else the model profile's: OpenAI 50,000, Anthropic 100,000; "
                "it may only lower it).", minimum=1, maximum=100_000, fanout=None, elsewhere=PROVIDER_LIMIT, mode="batch-api"),
    BatchOption("batch_max_file_bytes", "integer", "With --via batch-api: bytes per provider batch; a larger round is split "
                "(default: the task's batch_api.max_file_bytes, else the model profile's: OpenAI 200 MB, Anthropic 256 MB; "
                "it may only lower it).", minimum=1, maximum=256_000_000, fanout=None, elsewhere=PROVIDER_LIMIT, mode="batch-api"),
)  # fmt: skip
OPTIONS: dict[str, BatchOption] = {option.name: option for option in BATCH_OPTIONS}
AIRFLOW_OPTIONS = tuple(option.name for option in BATCH_OPTIONS if option.fanout is not None)
"""The options the Airflow operators take in ``options`` (each shard of a fan-out too)."""
LIVE_ONLY = tuple(option.name for option in BATCH_OPTIONS if option.mode == "live")
BATCH_API_ONLY = tuple(option.name for option in BATCH_OPTIONS if option.mode == "batch-api")


@dataclass(frozen=True)
class BatchOptions:
    """Typed values of the options given (an option not in ``given`` has its default)."""

    given: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def typed(cls, values: Mapping[str, Any] | None, where: str = "options", *, names: tuple[str, ...] | None = None) -> BatchOptions:
        """Type ``values`` by the table; ``names`` limits which options may be given (default:
        all). An unknown, refused or bad one raises :class:`UsageError` naming it."""
        allowed = tuple(OPTIONS) if names is None else names
        given: dict[str, Any] = {}
        for name, value in (values or {}).items():
            if name not in allowed:
                raise UsageError(not_an_option(str(name), where, allowed))
            typed = OPTIONS[name].typed(value, f"{where}.{name}")
            if typed is not None and typed is not False and typed != ():  # 0 is given (a cap of 0)
                given[name] = typed
        return cls(given)

    def __getitem__(self, name: str) -> Any:
        return self.given.get(name, OPTIONS[name].default)

    def but(self, **values: Any) -> BatchOptions:
        """These options with ``values`` in place (typed already; ``None`` drops one)."""
        merged = {**self.given, **values}
        return BatchOptions({k: v for k, v in merged.items() if v is not None})

    @property
    def batch_caps(self) -> Caps:
        """``caps`` tightened by the flat batch caps."""
        return self._caps("caps", ("max_cost_usd", "max_tokens", "max_wall_seconds"))

    @property
    def row_caps(self) -> Caps:
        """``row_caps`` tightened by the flat row caps."""
        return self._caps("row_caps", ("row_max_cost_usd", "row_max_steps"))

    def _caps(self, mapping: str, flat: tuple[str, ...]) -> Caps:
        caps = self[mapping] if self[mapping] is not None else Caps()
        flat_caps = {str(OPTIONS[n].cap): self[n] for n in flat if self[n] is not None}
        return caps.tighten(Caps(**flat_caps))

    def request_fields(self) -> dict[str, Any]:
        """The :class:`~runner.batch.request.BatchRequest` fields these options set (all but the
        provider batch's size limits, which tighten the task's: :meth:`batch_limits`)."""
        return {
            "format": self["input_format"], "output_format": self["output_format"], "mapping": tuple(self["map"]),
            "id_column": self["id_column"], "concurrency": self["concurrency"], "requests_per_minute": self["rpm"],
            "tokens_per_minute": self["tpm"], "max_attempts": self["max_attempts"],
            "stop_after_failures": self["stop_after_failures"], "batch_caps": self.batch_caps, "run_caps": self.row_caps,
            "keep_answers": self["keep_answers"], "limit": self["limit"], "sample": self["sample"],
            "seed": self["seed"] or 0, "retry_failed": self["retry_failed"], "keep_columns": self["keep_columns"],
            "use_cache": not self["no_cache"], "dedupe": self["dedupe"], "durable": self["durable"],
            "model_override": self["model"], "via": self["via"], "batch_fallback": self["batch_fallback"],
            "batch_poll_seconds": self["batch_poll_seconds"],
        }  # fmt: skip

    def batch_limits(self, task_limits: BatchApiLimits) -> BatchApiLimits:
        """The task's ``batch_api`` limits, lowered by ``batch_max_requests``/``batch_max_file_bytes``."""
        lowered = {field_name: self[name] for name, field_name in (("batch_max_requests", "max_requests"),
                                                                   ("batch_max_file_bytes", "max_file_bytes"))
                   if self[name] is not None}  # fmt: skip
        return replace(task_limits, **lowered)

    def shard_share(self, shards: int) -> BatchOptions:
        """These options for one of ``shards`` shards of a fan-out: the :data:`DIVIDED` ones (the
        rates) divided evenly; the summed batch caps are not: the shards share one scope for them."""
        if shards <= 1:
            return self
        return self.but(**{o.name: self[o.name] / shards for o in BATCH_OPTIONS if o.fanout == DIVIDED and self[o.name] is not None})

    def check_live(self) -> None:
        """Refuse the provider batch options (``batch_fallback``, ``batch_max_requests``, ...) for a
        batch that runs live: applied or refused, never ignored. (A provider batch refuses the
        rate limits itself: :func:`runner.batch.batch_api.refused_flags`.)"""
        given = [OPTIONS[name].flag for name in self.given if OPTIONS[name].mode == "batch-api"]
        if given:
            raise UsageError(f"{', '.join(given)} only applies with --via batch-api (or mode: batch_api on the task)")


def not_an_option(name: str, where: str, allowed: tuple[str, ...]) -> str:
    """Why ``name`` is refused at ``where``: an option not taken there (with the reason), or unknown."""
    option = OPTIONS.get(name)
    if option is not None and option.elsewhere:
        return f"{where}: '{name}' is not an option here: {option.elsewhere}"
    return f"{where}: unknown option '{name}'{did_you_mean(name, allowed)} (options: {', '.join(allowed)})"
