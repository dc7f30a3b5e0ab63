"""Custom ``http`` tools: call a declared endpoint with the model's arguments.

Arguments fill ``{param}`` placeholders in the URL (percent-encoded) and the rest go as
the query string (GET, DELETE) or a JSON body (POST, PUT, PATCH). The request is made
under the agent's network policy, exactly like ``fetch_url``. ``api_key_env`` names an
environment variable sent as ``Authorization: Bearer …``; its value is redacted from
everything the tool returns. A key goes only where the YAML says: a URL with a parameter in
its scheme or host cannot carry one (the model would choose where it goes), and a standard
variable (``OPENAI_API_KEY``) goes only to URLs under the standard model endpoint.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from runner.endpoints import STANDARD_KEY_VARIABLES, safe_url, standard_endpoint, under_endpoint
from runner.errors import ConfigError, ToolFailure
from runner.redact import redact_secrets
from runner.tools.arguments import PydanticArguments
from runner.tools.base import Tool, ToolContext, ToolResult, redact_result
from runner.tools.net import HttpResponse, fetch

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_BODY_METHODS = {"POST", "PUT", "PATCH"}
_MAX_CHARS = 20_000


def build_http_tool(data: Mapping[str, Any], source: str) -> Tool:
    """The tool a ``type: http`` document declares."""
    name = data["name"]
    spec = data["http"]
    url_template: str = spec["url"]
    method = spec.get("method", "GET").upper()
    parameters: Mapping[str, Mapping[str, Any]] = data.get("parameters", {})
    in_url = set(PLACEHOLDER.findall(url_template))
    unknown = in_url - set(parameters)
    if unknown:
        raise ConfigError(f"{source}: http.url uses {{{sorted(unknown)[0]}}} but no such parameter is declared")
    key_env = spec.get("api_key_env")
    if key_env:
        _check_key_destination(url_template, key_env, source)
    timeout = spec.get("timeout_seconds")

    async def run(ctx: ToolContext, arguments: dict[str, Any]) -> ToolResult:
        key = _api_key(key_env, source)
        headers = dict(spec.get("headers", {}))
        if key:
            headers["Authorization"] = f"Bearer {key}"
        url = PLACEHOLDER.sub(lambda m: quote(str(arguments[m.group(1)]), safe=""), url_template)
        rest = {k: v for k, v in arguments.items() if k not in in_url}
        policy = ctx.network if timeout is None else replace(ctx.network, timeout_seconds=timeout)
        try:
            response = await fetch(
                url, policy, method=method, headers=headers,
                params=None if method in _BODY_METHODS else rest,
                json_body=rest if method in _BODY_METHODS else None,
            )  # fmt: skip
        except ToolFailure as failure:
            raise ToolFailure(redact_secrets(str(failure), [key] if key else [])) from None
        return redact_result(_result(response), [key] if key else [])

    description = data.get("description") or f"{method} {url_template}"
    return Tool(
        name=name,
        description=description,
        arguments=PydanticArguments.from_parameters(name, parameters, description),
        run=run,
        kind="http",
        source=source,
    )


def _check_key_destination(url_template: str, variable: str, source: str) -> None:
    """Refuse, when the tool is built (before the run calls a model), a key that could leave its host."""
    scheme, sep, rest = url_template.partition("://")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0] if sep else url_template
    if PLACEHOLDER.search(scheme) or PLACEHOLDER.search(authority):
        raise ConfigError(
            f"{source}: http.url has a parameter in its scheme or host while http.api_key_env sends {variable}: "
            "the model would choose where the key goes. Write the scheme and host literally"
        )
    standard = standard_endpoint(None, os.environ)
    if variable in STANDARD_KEY_VARIABLES and not under_endpoint(url_template, standard):
        raise ConfigError(
            f"{source}: http.api_key_env names {variable}, a standard variable sent only to the standard model "
            f"endpoint ({safe_url(standard)}), not to {safe_url(url_template)}; name the variable holding that "
            "service's own key"
        )


def _api_key(variable: str | None, source: str) -> str | None:
    if variable is None:
        return None
    value = os.environ.get(variable)
    if not value:
        raise ConfigError(f"{source}: environment variable {variable} (http.api_key_env) is not set")
    return value


def _result(response: HttpResponse) -> ToolResult:
    text = response.text()
    data: Any = text
    if response.content_type.endswith("json"):
        try:
            data = json.loads(text)
        except ValueError:
            data = text
    shown = text[:_MAX_CHARS]
    note = "\n[truncated]" if response.truncated or len(text) > _MAX_CHARS else ""
    if not 200 <= response.status < 300:
        raise ToolFailure(f"HTTP {response.status} from {response.url}: {shown[:2000]}{note}")
    return ToolResult(content=f"HTTP {response.status}\n\n{shown}{note}", data=data)
