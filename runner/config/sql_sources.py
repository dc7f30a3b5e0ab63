"""SQL sources from configuration: ``kind: Source`` documents and a task's ``sources:``.

Both become :class:`~runner.tools.sql.source.SqlSource` values (the one type the tools
read). Checks that a schema cannot express are here too: a URL must not hold a password,
``files:`` only goes with an in-memory DuckDB, a query in a tool step is never a template.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.config.documents import Document
from runner.errors import Problem
from runner.tools.sql.source import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_SECONDS, SqlSource, airflow_variable, unencoded_at

SOURCE_KEYS = ("url", "url_env", "password_env", "airflow_conn_id")
QUERY_ARGS = {"load_table": "query", "sql_query": "sql"}


def build_source(name: str, data: Mapping[str, Any], root: Path, where: str) -> SqlSource:
    """The source a validated mapping declares (a Source document or a task's entry)."""
    return SqlSource(
        name=name,
        url=data.get("url"),
        url_env=data.get("url_env"),
        password_env=data.get("password_env"),
        airflow_conn_id=data.get("airflow_conn_id"),
        files=dict(data.get("files", {})),
        max_rows=int(data.get("max_rows", DEFAULT_MAX_ROWS)),
        timeout_seconds=float(data.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)),
        allow=tuple(data.get("allow", ())),
        description=str(data.get("description", "")),
        root=root,
        where=where,
    )


def source_document(doc: Document, root: Path) -> SqlSource:
    """The source a ``kind: Source`` document declares."""
    return build_source(doc.data["name"], doc.data, root, f"{doc.source.file}:{doc.source.locate('/name').line}")


def task_sources(doc: Document, root: Path) -> dict[str, SqlSource]:
    """The sources declared under a task's ``sources:``."""
    return {
        name: build_source(name, data, root, f"{doc.source.file}:{doc.source.locate(f'/sources/{name}').line}")
        for name, data in (doc.data.get("sources") or {}).items()
    }


def source_problems(doc: Document, pointer: str, data: Mapping[str, Any]) -> list[Problem]:
    """What is wrong with one declared source beyond its schema."""
    problems: list[Problem] = []
    url = data.get("url")
    if isinstance(url, str):
        problems += _url_problems(doc, f"{pointer}/url", url, data)
    return problems


def environment_problems(doc: Document, pointer: str, data: Mapping[str, Any], environ: Mapping[str, str]) -> list[Problem]:
    """What a run would refuse in the URL a source's variable holds now (``url_env``, or the
    variable of its ``airflow_conn_id``): an ``@`` in its user or password that is not
    percent-encoded. Read from ``environ`` by ``runner validate`` only (a project's compiled
    checks never depend on the environment); the value is never shown."""
    variables = [("url_env", data.get("url_env")), ("airflow_conn_id", airflow_variable(data["airflow_conn_id"]) if data.get("airflow_conn_id") else None)]
    return [
        doc.problem(f"{pointer}/{key}", f"the URL in {variable} has an '@' in its user or password that is not percent-encoded "
                    "(value hidden); write it as %40: a run refuses this URL, so no part of the password reaches a host name")
        for key, variable in variables
        if isinstance(variable, str) and unencoded_at(environ.get(variable, ""))
    ]  # fmt: skip


def _password_problems(doc: Document, pointer: str, url: str) -> list[Problem]:
    """The URL must not hold a password (checked with the standard library alone)."""
    from urllib.parse import urlsplit

    try:
        password = urlsplit(url).password
    except ValueError:
        return []
    if not password:
        return []
    return [doc.problem(pointer, "the URL holds a password (value hidden): remove it and name the variable "
                        "that holds it in password_env, or give the whole URL in url_env")]


_URL = re.compile(
    r"(?P<drivername>[\w+]+)://(?:(?P<username>[^:/]*)(?::(?P<password>[^@]*))?@)?"
    r"(?:(?:\[(?P<ipv6host>[^/?]+)\]|(?P<ipv4host>[^/:?]+))?(?::(?P<port>[^/?]*))?)?"
    r"(?:/(?P<database>[^?]*))?(?:\?(?P<query>.*))?",
    re.DOTALL,
)
"""SQLAlchemy's URL form (the pattern of ``sqlalchemy.engine.url._parse_url``), so validating a
project does not import SQLAlchemy (a third of ``runner validate``'s time); the connection
itself is made by SQLAlchemy when a task queries the source."""


def _url_problems(doc: Document, pointer: str, url: str, data: Mapping[str, Any]) -> list[Problem]:
    parsed = _URL.fullmatch(url)
    if parsed is None or (parsed["port"] is not None and not parsed["port"].isdigit()):
        # never echo the value: it may hold a password
        return [doc.problem(pointer, "not a SQLAlchemy URL (value hidden); write DIALECT[+DRIVER]://USER@HOST[:PORT]/DATABASE")]
    if parsed["password"]:
        return _password_problems(doc, pointer, url) or [doc.problem(pointer, "the URL holds a password (value hidden)")]
    drivername = parsed["drivername"]
    backend = drivername.split("+", 1)[0]
    if data.get("files") and not (backend == "duckdb" and (parsed["database"] or ":memory:") == ":memory:"):
        return [doc.problem(pointer, "files: are read by DuckDB in memory; use url: duckdb:///:memory:")]
    if drivername == "postgresql":
        return [doc.problem(pointer, "say which driver: postgresql+psycopg://... (psycopg 3, installed by runner[sql])")]
    return []


def query_template_problems(doc: Document, pointer: str, tool: str, args: Mapping[str, Any]) -> list[Problem]:
    """A tool step's SQL must be literal text: values from inputs go in ``params`` (bound),
    never into the query by a template (that would be string formatting, open to injection)."""
    key = QUERY_ARGS.get(tool)
    value = args.get(key) if key else None
    if not isinstance(value, str):
        return []
    if not any(mark in value for mark in ("{{", "{%", "{#")):
        return []
    return [doc.problem(f"{pointer}/{key}", f"the {key} of a {tool} step is not a template: write :name in the query "
                        "and give the value under params (e.g. params: {day: '{{ inputs.date }}'}); values are bound, "
                        "never pasted into SQL")]
