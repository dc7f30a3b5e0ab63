"""Cross-reference checks for SQL sources and report delivery, in the shape of the others.

- a Source document or a task's source: no password in the URL, ``files:`` only for an
  in-memory DuckDB (see :mod:`runner.config.documents`);
- a ``load_table`` / ``sql_query`` step names a known source (or there is exactly one), and
  its SQL is literal text (values are bound from ``params``);
- an agent's ``sql_query`` settings name sources the task has;
- delivery names are unique.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runner.config.report_options import repeated_names
from runner.config.sql_sources import environment_problems, query_template_problems, source_problems
from runner.config.yamlload import Document
from runner.errors import Problem, did_you_mean

if TYPE_CHECKING:
    from runner.config.project import Project
    from runner.config.specs import TaskSpec

SQL_TOOLS = ("load_table", "sql_query")


def source_document_problems(project: Project) -> list[Problem]:
    """Problems of every ``kind: Source`` document."""
    return [p for name in project.sources for p in source_problems(project.document("Source", name), "", project.document("Source", name).data)]


def source_environment_problems(project: Project, environ: Mapping[str, str]) -> list[Problem]:
    """What a run in ``environ`` would refuse in the URLs the sources' variables hold, for every
    ``kind: Source`` document and every task's ``sources:`` (``runner validate``)."""
    problems = [p for name in project.sources for p in environment_problems(project.document("Source", name), "", project.document("Source", name).data, environ)]
    for name in project.tasks:
        doc = project.document("Task", name)
        for source, data in (doc.data.get("sources") or {}).items():
            problems += environment_problems(doc, f"/sources/{source}", data, environ)
    return problems


def task_data_problems(project: Project, task: TaskSpec, doc: Document) -> list[Problem]:
    """Problems of a task's sources, SQL steps, SQL agents and deliveries."""
    problems: list[Problem] = []
    for name, data in (doc.data.get("sources") or {}).items():
        problems += source_problems(doc, f"/sources/{name}", data)
    known = project.sources_for(task)
    if task.pipeline is not None:
        for i, step in enumerate(task.pipeline.steps):
            if step.tool in SQL_TOOLS:
                problems += _sql_step_problems(doc, f"/pipeline/steps/{i}/args", step.tool, doc.data["pipeline"]["steps"][i].get("args") or {}, known)
    for name in task.agents_used():
        agent = project.agents.get(name)
        if agent is None:
            continue  # an unknown agent is reported by the task checks
        for ref in agent.tools:
            for j, source in enumerate(ref.settings.get("sources", ()) if ref.name == "sql_query" else ()):
                if source not in known:
                    problems.append(doc.problem("", f"agent '{name}' gives sql_query the source '{source}', which this task does not have"
                                                f"{did_you_mean(source, known)} (sources: {', '.join(sorted(known)) or 'none'}); "
                                                f"see {agent.source} {ref.pointer.removesuffix('/name')}/settings/sources/{j}"))
    for i, first in repeated_names(task.report.deliver):
        problems.append(doc.problem(f"/report/deliver/{i}", f"a second delivery named '{task.report.deliver[i].name}' (also #{first}); "
                                    "give each a distinct name: (the record tracks each one, so a resumed run re-sends only what failed)"))
    return problems


def _sql_step_problems(doc: Document, pointer: str, tool: str, args: Mapping[str, Any], known: Mapping[str, Any]) -> list[Problem]:
    problems = query_template_problems(doc, pointer, tool, args)
    query_key = "query" if tool == "load_table" else "sql"
    if args.get(query_key) is None and tool == "load_table":
        return problems  # a file load
    source = args.get("source")
    if isinstance(source, str) and source not in known:
        hint = did_you_mean(source, known) or f"; declare it (kind: Source, or sources: on the task){_listed(known)}"
        problems.append(doc.problem(f"{pointer}/source", f"unknown source '{source}'{hint}"))
    elif source is None and len(known) != 1:
        what = "no source is declared (kind: Source, or sources: on the task)" if not known else f"name one of {', '.join(sorted(known))}"
        problems.append(doc.problem(pointer, f"a {tool} query needs a source: {what}"))
    return problems


def _listed(known: Mapping[str, Any]) -> str:
    return f"; sources: {', '.join(sorted(known))}" if known else ""
