"""A SQL source as the tools see it: where the data is, how to get its secret, its limits."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runner.errors import ToolFailure

DEFAULT_MAX_ROWS = 100_000
DEFAULT_TIMEOUT_SECONDS = 30.0
AIRFLOW_SCHEMES = {"postgres": "postgresql+psycopg", "postgresql": "postgresql+psycopg", "sqlite": "sqlite", "duckdb": "duckdb"}


@dataclass(frozen=True)
class SqlSource:
    """One declared source (a ``kind: Source`` document or an entry of a task's ``sources:``).

    ``url`` never holds a password: that comes from the variable ``password_env`` names, or
    the whole URL from ``url_env``, or from the Airflow connection ``airflow_conn_id``.
    ``root`` is the project root, against which relative database files are resolved.
    ``files`` (DuckDB in memory only) maps table names to workspace files.
    """

    name: str
    url: str | None = None
    url_env: str | None = None
    password_env: str | None = None
    airflow_conn_id: str | None = None
    files: Mapping[str, str] = field(default_factory=dict)
    max_rows: int = DEFAULT_MAX_ROWS
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    allow: tuple[str, ...] = ()
    description: str = ""
    root: Path = field(default_factory=Path)
    where: str = ""  # FILE:LINE of the declaration, for messages

    def secret_names(self) -> list[str]:
        """The environment variables this source reads secrets from."""
        names = [self.url_env, self.password_env]
        if self.airflow_conn_id:
            names.append(airflow_variable(self.airflow_conn_id))
        return [n for n in names if n]

    def secrets(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The secret values this source would use (for redaction), as set now."""
        env = os.environ if environ is None else environ
        values = [env.get(name, "") for name in self.secret_names()]
        return [v for v in values if v]


def airflow_variable(conn_id: str) -> str:
    """The variable Airflow reads a connection from: ``AIRFLOW_CONN_`` + the id in capitals."""
    return "AIRFLOW_CONN_" + re.sub(r"[^A-Za-z0-9_]", "_", conn_id).upper()


def resolved_url(source: SqlSource, overrides: Mapping[str, str], environ: Mapping[str, str] | None = None) -> str:
    """The URL to connect with, secrets included: never log or record it.

    ``overrides`` maps source names to URLs a caller resolved itself (the Airflow operator,
    from the connection). Raises :class:`ToolFailure` naming the missing variable.
    """
    env = os.environ if environ is None else environ
    if source.name in overrides:
        return _unambiguous(_sqlalchemy_scheme(overrides[source.name]), source, "the URL its caller gave")
    if source.url_env:
        return _unambiguous(_required(env, source.url_env, source, "the URL"), source, f"the URL in {source.url_env}")
    if source.airflow_conn_id:
        variable = airflow_variable(source.airflow_conn_id)
        uri = _sqlalchemy_scheme(_required(env, variable, source, "the connection URI"))
        return _unambiguous(uri, source, f"the connection URI in {variable}")
    assert source.url is not None  # the schema requires one of the three
    if not source.password_env:
        return source.url
    from sqlalchemy.engine import make_url

    password = _required(env, source.password_env, source, "the password")
    return make_url(source.url).set(password=password).render_as_string(hide_password=False)


def unencoded_at(url: str) -> bool:
    """Whether ``url`` holds an ``@`` besides the one ending its user part: a user or password
    with an ``@`` that is not percent-encoded. SQLAlchemy ends the password at the first
    ``@``, so the password's tail would become the host name (sent to the resolver, shown
    in every message that names the host). A URL without a host (``sqlite:///a@b.db``) is
    not affected."""
    _, sep, rest = url.partition("://")
    if not sep or rest.startswith("/"):
        return False
    return rest.split("?", 1)[0].count("@") > 1


def _unambiguous(url: str, source: SqlSource, what: str) -> str:
    if unencoded_at(url):
        raise ToolFailure(
            f"source '{source.name}' ({source.where}): {what} has an '@' in its user or password that is not "
            "percent-encoded; write it as %40 (the URL is refused, so no part of the password reaches a host name or a message)"
        )
    return url


def _required(env: Mapping[str, str], name: str, source: SqlSource, what: str) -> str:
    value = env.get(name, "")
    if not value:
        raise ToolFailure(f"source '{source.name}' ({source.where}): the environment variable {name} ({what}) is not set")
    return value


def _sqlalchemy_scheme(uri: str) -> str:
    """An Airflow connection URI (``postgres://...``) as a SQLAlchemy URL."""
    scheme, sep, rest = uri.partition("://")
    if not sep or "+" in scheme:
        return uri
    return f"{AIRFLOW_SCHEMES.get(scheme, scheme)}://{rest}"


@dataclass(frozen=True)
class SqlSources:
    """The sources a run's tools may query, and URLs a caller resolved for some of them.

    ``overrides`` hold secrets (an Airflow connection's password): never shown.
    """

    sources: Mapping[str, SqlSource] = field(default_factory=dict)
    overrides: Mapping[str, str] = field(default_factory=dict, repr=False)

    def get(self, name: str | None) -> SqlSource:
        """The source called ``name``; with no name, the only source there is."""
        from runner.errors import did_you_mean

        if not self.sources:
            raise ToolFailure("no SQL source is declared for this task (kind: Source, or sources: on the task)")
        if name is None:
            if len(self.sources) > 1:
                raise ToolFailure(f"several sources are declared; name one: {', '.join(sorted(self.sources))}")
            return next(iter(self.sources.values()))
        if name not in self.sources:
            raise ToolFailure(f"unknown source '{name}'{did_you_mean(name, self.sources)}; sources: {', '.join(sorted(self.sources))}")
        return self.sources[name]

    def url(self, source: SqlSource) -> str:
        """The URL to connect to ``source`` with (secrets included)."""
        return resolved_url(source, self.overrides)

    def only(self, names: tuple[str, ...] | list[str] | None) -> SqlSources:
        """These sources only (``None``: all)."""
        if names is None:
            return self
        return SqlSources({n: s for n, s in self.sources.items() if n in names}, self.overrides)
