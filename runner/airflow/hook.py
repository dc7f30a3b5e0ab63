"""RunnerModelHook: an Airflow connection (type ``runner_model``) naming a model endpoint.

The connection's **host** is the OpenAI-compatible base URL (``https://host/v1``; a bare host
is completed from ``port``, ``schema`` as the path and ``extra.scheme``, default https) and
its **password** is the API key. The key is registered with Airflow's secrets masker before
it is returned, so it is redacted from task logs, and it is never put in XCom.

Define one with an environment variable, as JSON::

    AIRFLOW_CONN_RUNNER_MODEL_DEFAULT='{"conn_type": "runner_model",
                                        "host": "https://api.openai.com/v1", "password": "sk-..."}'

or as a URI, whose scheme is the type with a hyphen (``runner-model``: a URI scheme cannot hold
``_``, and Airflow then reads the whole value as garbage, which :meth:`RunnerModelHook.get_conn`
refuses), the key URL-encoded::

    AIRFLOW_CONN_RUNNER_MODEL_DEFAULT='runner-model://:sk-...@api.openai.com/v1'
    AIRFLOW_CONN_LOCAL_MODEL='runner-model://:KEY@127.0.0.1:8000/v1?scheme=http'
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret  # Airflow >= 3.1: masks in the task process and tells the supervisor

from runner.airflow.provider import CONN_TYPE, DEFAULT_CONN_ID


def base_url_from_parts(
    host: str | None, port: int | None, schema: str | None, scheme: str | None = None
) -> str | None:
    """``host`` if it already is a URL, else ``scheme://host[:port][/schema]``; None without a host."""
    if not host:
        return None
    host = host.strip()
    if "://" in host:
        return host.rstrip("/")
    url = f"{scheme or 'https'}://{host}"
    if port:
        url += f":{int(port)}"
    if schema:
        url += "/" + schema.strip("/")
    return url


class RunnerModelHook(BaseHook):
    """Reads a ``runner_model`` connection: ``(base_url, api_key)`` for :func:`runner.api.run_task`.

    Args:
        runner_model_conn_id: The connection's id (host: the base URL; password: the API key).
    """

    conn_name_attr = "runner_model_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Runner model endpoint"

    def __init__(self, runner_model_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runner_model_conn_id = runner_model_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["login", "schema", "port", "extra"],
            "relabeling": {"host": "Base URL", "password": "API key"},
            "placeholders": {"host": "https://api.openai.com/v1", "password": "sk-..."},
        }

    def get_conn(self) -> tuple[str | None, str | None]:
        """``(base_url, api_key)``; either may be None (the runner then uses the agent's or env settings).

        A connection without a type (a URI written ``runner_model://...``, which Airflow cannot
        parse) raises a :class:`~runner.errors.UsageError` saying how to write it."""
        conn = self.get_connection(self.runner_model_conn_id)
        if not conn.conn_type:
            from runner.errors import UsageError

            raise UsageError(
                f"connection {self.runner_model_conn_id!r} has no type: a URI connection must start with "
                f"'{CONN_TYPE.replace('_', '-')}://' (a URI scheme cannot hold '_'), e.g. "
                f"'{CONN_TYPE.replace('_', '-')}://:KEY@api.openai.com/v1', or use the JSON form"
            )
        api_key = conn.password or None
        if api_key:
            mask_secret(api_key)
        scheme = None
        if conn.extra:
            scheme = conn.extra_dejson.get("scheme")
        return base_url_from_parts(conn.host, conn.port, conn.schema, scheme), api_key

    def test_connection(self) -> tuple[bool, str]:
        """``GET {base_url}/models`` with the key (see :mod:`runner.airflow.probe`); False unless it lists models.

        Without a host, the endpoint a run would use is tested: ``$OPENAI_BASE_URL`` or OpenAI's.
        """
        import os

        from runner.airflow.probe import DEFAULT_BASE_URL, probe_models

        base_url, api_key = self.get_conn()
        return probe_models(base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL, api_key)
