"""The batch options' table, generated from :data:`runner.batch.options.BATCH_OPTIONS`.

It is a section of the Airflow reference (``reference/airflow.md#batch-options``): the options the
operators take in ``options`` (and ``batch_fanout`` as keywords), with their type, default, how a
fan-out's shards take each, and the options they refuse, with the reason.
"""

from __future__ import annotations

from schema_pages import _cell

from runner.batch.options import BATCH_OPTIONS, DIVIDED, EACH, MERGE, SHARED, BatchOption

# How a fan-out's shards take an option (the ``fanout`` rule of the table).
FANOUT_RULES = {
    EACH: "each shard as given",
    DIVIDED: "divided evenly among the shards",
    SHARED: "one scope shared by all shards",
    MERGE: "applied to the merged output",
}


def section() -> list[str]:
    """The lines of the ``Batch options`` section."""
    lines = [
        "## Batch options",
        "",
        "What `options` takes (in every operator, and as keywords of `batch_fanout`): the options of",
        "`runner batch` by flag name, from the one table in `runner/batch/options.py`. A value may be",
        "text (a rendered template): it is typed as below, and a bad value or an unknown name fails the",
        "task without retries.",
        "",
        "| option | type | default | in a fan-out | description |",
        "|---|---|---|---|---|",
    ]
    lines += [_row(option) for option in BATCH_OPTIONS if option.fanout is not None]
    lines += ["", "Refused in `options`, each for a reason:", ""]
    refused: dict[str, list[str]] = {}
    for option in BATCH_OPTIONS:
        if option.fanout is None:
            refused.setdefault(option.elsewhere, []).append(f"`{option.name}`")
    lines += [f"- {', '.join(names)}: {reason}." for reason, names in refused.items()]
    return [*lines, ""]


def _row(option: BatchOption) -> str:
    default = "" if option.default is None or option.default is False or option.default == () else f"`{option.default!r}`"
    description = _cell(option.help.replace("<", "&lt;"))  # help is text, not HTML (``input.<name>``)
    return f"| `{option.name}` | {_cell(_kind(option))} | {default} | {FANOUT_RULES[str(option.fanout)]} | {description} |"


def _kind(option: BatchOption) -> str:
    if option.kind == "choice":
        return " or ".join(f"`{choice}`" for choice in option.choices)
    if option.kind == "cap":
        return f"cap `{option.cap}`"
    if option.kind == "caps":
        return "mapping of caps"
    if option.kind == "list":
        return f"list of `{option.metavar}`" if option.metavar else "list"
    return {"flag": "true/false", "model": "model id"}.get(option.kind, option.kind)
