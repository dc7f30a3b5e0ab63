"""The options of a batch under Airflow: which of :data:`runner.batch.options.BATCH_OPTIONS` the
operators take in ``options``, typed, and how a fan-out's shards share them.

``RunnerBatchOperator`` and a fan-out (:func:`runner.airflow.fanout.batch_fanout`) take the
batch options under the names of ``runner batch``'s flags (``id_column`` for ``--id-column``,
``map`` for ``--map``, ``keep_columns`` for ``--keep-columns``, ...) plus ``caps``/``row_caps``
mappings: :data:`OPTION_NAMES`, the options whose ``fanout`` is set in the table. The others
are refused with the reason the table gives: a trial's rows (``limit``, ``sample``, ``seed``:
each dag run has its own journal, so a trial would not count toward a later full run), and
provider batch mode (``via``, ``batch_fallback``, ``batch_poll_seconds``: arguments of
``RunnerBatchOperator``; a provider batch already runs every row at once, on the provider's
side, so there is nothing to shard; and its rows are reserved at batch prices before it is
submitted, in its own journal, not in a fan-out's shared cap scope). Nor are the CLI's
``--journal`` (each shard keeps its own journal in the dag run's work directory),
``--restart`` (a cleared task after a success starts over; a retry always resumes) and
``--progress`` (progress lines go to the task log).

With ``via="batch-api"`` the provider batch uses every option as the live engine does but the
rate limits (:data:`RATE_OPTIONS`), which are refused: a provider batch has no per-minute
rate to keep, and they would be ignored. ``max_wall_seconds`` is counted from the batch's
start, across tries: when a deferrable task reaches it, the trigger cancels what is still out;
``concurrency`` (rows in flight) keeps each provider batch round to that many rows' calls
(default: every row).

In a fan-out, each option's ``fanout`` in the table says how the shards take it. Caps that
add up over a whole batch (``max_cost_usd``, ``max_tokens``, the other summed caps) hold across
every shard on every worker: they are one shared scope in the cap ledger
(:mod:`runner.caps.shared`), where each model call reserves its worst case before it is sent,
so a shard may use what another leaves unspent and the total never passes the cap. The rate
limits ``rpm`` and ``tpm`` are divided evenly among the shards (a rate is per process).
``output_format`` and ``keep_columns`` apply to the merged output. ``max_wall_seconds`` and
``stop_after_failures`` apply to each shard as given. ``max_attempts`` is per Airflow try: try
*n* of a shard lets a row reach ``n * max_attempts`` attempts, so a retry re-runs rows whose
attempts an earlier try used up.

No Airflow imports here.
"""


from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.batch.options import AIRFLOW_OPTIONS, LIVE_ONLY, BatchOptions, not_an_option
from runner.errors import UsageError

OPTION_NAMES = AIRFLOW_OPTIONS
"""The batch options the operators take in ``options`` (see the module doc)."""
RATE_OPTIONS = LIVE_ONLY
"""Options only live calls use: refused with ``via="batch-api"`` (see the module doc)."""


def typed_options(values: Mapping[str, Any] | None, where: str = "options") -> BatchOptions:
    """The operators' options, typed (rendered text or native); a bad or refused one raises
    :class:`UsageError` naming it."""
    return BatchOptions.typed(values, where, names=OPTION_NAMES)


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
    """Refuse names that are not the operators' options (a typo would otherwise be ignored)."""
    for name in values:
        if name not in OPTION_NAMES:
            raise UsageError(not_an_option(str(name), where, OPTION_NAMES))


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
