"""A batch's fingerprint: what decides each row's answer, so a rerun under another configuration is not
mistaken for a resume.

The fingerprint is a SHA-256 over *parts*, each the canonical JSON of one piece of the resolved,
typed configuration (:mod:`runner.config.specs`), named by the file it comes from and the field:
``agents.d/extract.yaml: output_schema``, ``agents.d/extract.yaml: model.id``, ``tasks.d/x.yaml: goal``,
``tools.d/lookup.yaml: lookup``, ``built-in prompts: runner/prompts/agent.yaml`` (the framework's
prompt files, which an agent's ``prompts:`` overrides in part). Every field of a task, of each agent
it runs and of each agent's model is a part, except the few listed in :data:`NOT_DECIDING` (they
limit or place a run, they do not shape its answer), so a field added to a spec later is in the
fingerprint without anyone listing it. The command line's ``--model`` and ``--base-url`` are applied
to each agent's model first, and the endpoint is the base URL its calls go to (the standard
``$OPENAI_BASE_URL`` included), never the key.

:func:`changes` compares two sets of parts and names what differs, for the refusal a rerun gets.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runner.batch.journal import BatchJournal
from runner.config.project import Project
from runner.config.specs import ModelSpec, TaskSpec
from runner.errors import UsageError

if TYPE_CHECKING:
    from runner.batch.request import BatchRequest

NOT_DECIDING: Mapping[str, frozenset[str]] = {
    "task": frozenset({"name", "source", "root", "caps", "report", "mode", "batch_api", "description"}),
    "agent": frozenset({"name", "source", "caps", "model"}),  # the model is taken field by field
    "model": frozenset({"source", "api_key_env", "timeout_seconds", "retries"}),
}
"""Fields that limit, place or reach a run without deciding its answer (caps, where reports go,
live or provider batch, timeouts and retries, the name of the key's variable)."""
UNKNOWN = "unknown"
"""The fingerprint of answers a runner made before batches recorded one."""


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """The digest of every part, and the parts (name -> digest) to tell what changed."""

    digest: str
    parts: Mapping[str, str]

    @property
    def short(self) -> str:
        """The first 12 hex digits: what output records and messages show."""
        return self.digest[:12]

    def as_json(self) -> str:
        return json.dumps(dict(self.parts), sort_keys=True)


def fingerprint(project: Project, task: TaskSpec, *, model_override: str | None = None, base_url_override: str | None = None) -> Fingerprint:
    """The fingerprint of ``task`` as this command would run it (see the module doc)."""
    from importlib import resources

    from runner.prompts import FILES

    parts: dict[str, str] = {}
    _fields(parts, task.source or f"task {task.name}", task, NOT_DECIDING["task"])
    for name in task.agents_used():
        agent = project.agents.get(name)
        if agent is None:
            continue
        where = agent.source or f"agent {name}"
        _fields(parts, where, agent, NOT_DECIDING["agent"])
        model = _effective_model(agent.model, model_override, base_url_override)
        _fields(parts, where, model, NOT_DECIDING["model"], prefix="model.")
        for ref in agent.tools:
            tool = project.tools.get(ref.name)
            if tool is not None:
                parts[f"{tool.source.rpartition(':')[0] or tool.source}: {tool.name}"] = _digest(tool.data)
    for name in FILES:  # the files' bytes: parsing them would load YAML on a batch's path
        parts[f"built-in prompts: runner/prompts/{name}"] = _digest(resources.files("runner.prompts").joinpath(name).read_text("utf-8"))
    whole = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return Fingerprint(whole, parts)


def changes(before: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """What differs between two fingerprints' parts: ``agents.d/x.yaml: output_schema changed``, ... ."""
    found = [f"{name} changed" for name in sorted(before.keys() & now.keys()) if before[name] != now[name]]
    found += [f"{name} added" for name in sorted(now.keys() - before.keys())]
    found += [f"{name} removed" for name in sorted(before.keys() - now.keys())]
    return found


def _effective_model(model: ModelSpec, model_override: str | None, base_url_override: str | None) -> ModelSpec:
    """The model as called: ``--model`` applied, and ``base_url`` the endpoint the calls go to."""
    base_url = base_url_override or model.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    return dataclasses.replace(model, id=model_override or model.id, base_url=base_url.rstrip("/"))


def _fields(parts: dict[str, str], where: str, spec: Any, skipped: frozenset[str], prefix: str = "") -> None:
    for field in dataclasses.fields(spec):
        if field.name not in skipped:
            parts[f"{where}: {prefix}{field.name}"] = _digest(getattr(spec, field.name))


def _digest(value: Any) -> str:
    text = json.dumps(_plain(value), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    """``value`` as JSON data: dataclasses as dicts, tuples and sets as lists (sets sorted)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(_plain(v) for v in value)
    return value



def check_fingerprint(project: Project, task: TaskSpec, request: BatchRequest, journal: BatchJournal) -> tuple[str, ...]:
    """Hold ``journal`` to the configuration this command runs under; returns notes for the summary.

    A new journal takes the fingerprint; one from before fingerprints takes it too, its answers
    marked :data:`UNKNOWN`. A journal with no row done yet takes the new one (there is no answer
    to keep; a resume after a crash against a moved endpoint goes on). A journal whose rows were
    answered under another configuration is refused
    (:class:`UsageError`, naming what changed) unless ``request.keep_answers``: then the answers
    made so far keep their fingerprint and the rows still to run take the new one.
    """
    now = fingerprint(project, task, model_override=request.model_override, base_url_override=request.base_url_override)
    found = journal.fingerprint
    if found == now.digest:
        return ("--keep-answers: the configuration is unchanged, every answer is already made under it",) if request.keep_answers else ()
    if found is None:
        journal.adopt_fingerprint(now.digest, now.as_json(), earlier=UNKNOWN if journal.ingested else None)
        return ("--keep-answers: a new journal, no earlier answers to keep",) if request.keep_answers and not journal.ingested else ()
    done = journal.counts()["done"]
    changed = changes(journal.fingerprint_parts(), now.parts)
    if done == 0:  # no answer made under the earlier configuration: nothing to keep or to refuse for
        journal.adopt_fingerprint(now.digest, now.as_json(), earlier=found)
        return (f"no row was done under the earlier configuration ({'; '.join(changed[:3]) or 'changed'}): "
                f"every row runs under {now.short}",)  # fmt: skip
    if not request.keep_answers:
        shown = "; ".join(changed[:8]) + (f"; and {len(changed) - 8} more" if len(changed) > 8 else "")
        raise UsageError(
            f"{journal.path}: this batch was started under another configuration (fingerprint {found[:12]}, now "
            f"{now.short}): {shown or 'the runner computes it differently now'}. {done} row(s) hold answers made under "
            "the earlier one. Rerun with --restart to run every row again under the new configuration, or with "
            "--keep-answers to keep those answers and run only the rows still to do under the new one (each output "
            "record names the fingerprint it was made under); or give --journal PATH to keep both batches."
        )
    kept = journal.adopt_fingerprint(now.digest, now.as_json(), earlier=found)
    return (f"--keep-answers: {kept} answer(s) kept from fingerprint {found[:12]}; rows still to run use {now.short} "
            f"({'; '.join(changed[:3])}{' ...' if len(changed) > 3 else ''})",)  # fmt: skip
