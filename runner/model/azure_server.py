"""A strict loopback server speaking Azure OpenAI's data-plane paths, from a script.

The scripted Chat Completions server (:class:`~runner.model.server.ScriptedServer`) under
Azure's rules, as Azure documents them: calls go to
``POST /openai/deployments/{deployment}/chat/completions?api-version=YYYY-MM-DD[-preview]``;
the ``api-version`` query parameter is required (400 ``MissingApiVersionParameter``) and must
be one the resource serves; the key comes in the ``api-key`` header (401 without it, or with
a wrong one; an ``Authorization: Bearer`` key is not an api-key); a deployment the resource
does not have is 404 ``DeploymentNotFound``. OpenAI's own paths (``/v1/chat/completions``)
are not served (404). The answer is the script's, as for the OpenAI server::

    with AzureServer(script, deployments={"triage-mini": "gpt-4o-mini"}, api_key="az-test") as srv:
        srv.endpoint  # http://127.0.0.1:PORT, the resource URL (AZURE_OPENAI_ENDPOINT)
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from runner.model.script_rules import Script
from runner.model.server import ScriptedServer, _Handler, _HTTPServer

API_VERSIONS = frozenset({"2024-06-01", "2024-10-21", "2025-01-01-preview", "2025-03-01-preview", "2025-04-01-preview"})
"""The data-plane API versions the server serves (Azure lists those it supports)."""
_PATH = re.compile(r"^/openai/deployments/([^/]+)/chat/completions$")


class AzureServer(ScriptedServer):
    """The Azure OpenAI resource on ``127.0.0.1``; ``deployments`` maps each deployment name to
    the model it serves (the completion names that model)."""

    def __init__(
        self, script: Script | dict[str, Any] | list[Any] | None = None, *, deployments: Mapping[str, str],
        api_key: str = "az-test-key", host: str = "127.0.0.1", port: int = 0, strict: bool = True,
    ) -> None:
        """``strict``: refuse what the deployment's model refuses (as :class:`ScriptedServer`'s, by that model)."""
        super().__init__(script, host=host, port=port, api_key=api_key, strict=strict)
        self.deployments = dict(deployments)

    @property
    def endpoint(self) -> str:
        """The resource URL (``AZURE_OPENAI_ENDPOINT``)."""
        return self.base_url.removesuffix("/v1")

    def start(self) -> AzureServer:
        import threading

        self._httpd = _HTTPServer(self._address, self)
        self._httpd.RequestHandlerClass = _AzureHandler
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> AzureServer:
        return self.start()


class _AzureHandler(_Handler):
    def do_GET(self) -> None:
        self._refuse(404, "404", "Resource not found")

    def do_DELETE(self) -> None:
        self._refuse(404, "404", "Resource not found")

    def do_POST(self) -> None:
        owner: AzureServer = self.server.owner  # type: ignore[assignment]
        path, _, query = self.path.partition("?")
        found = _PATH.match(path.rstrip("/"))
        version = dict(urllib.parse.parse_qsl(query)).get("api-version")
        if found is None:
            return self._refuse(404, "404", "Resource not found")
        if self.headers.get("api-key") != owner.api_key:
            return self._refuse(401, "401", "Access denied due to invalid subscription key or wrong API endpoint. Make sure "
                                "to provide a valid key for an active subscription and use a correct regional API endpoint "
                                "for your resource.")  # fmt: skip
        if not version:
            return self._refuse(400, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests.")
        if version not in API_VERSIONS:
            return self._refuse(404, "404", f"Resource not found (api-version {version} is not supported)")
        deployment = urllib.parse.unquote(found.group(1))
        if deployment not in owner.deployments:
            return self._refuse(404, "DeploymentNotFound", f"The API deployment for this resource does not exist: {deployment}")
        self._deployment_model = owner.deployments[deployment]
        super().do_POST()

    def _route(self) -> str:
        """The checked Azure path is served as the Chat Completions route (recorded as sent)."""
        return "/v1/chat/completions" if getattr(self, "_deployment_model", None) else "/none"

    def _unauthorized(self) -> bool:
        return False  # checked in do_POST (the api-key header, not a bearer token)

    def _as_served(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "model": self._deployment_model}

    def _answer(self, body: dict[str, Any], match: Any) -> None:
        super()._answer(self._as_served(body), match)

    def _refuse(self, status: int, code: str, message: str) -> None:
        if self.command == "POST":
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.owner.record(self, None, "refused")
        self._send_json(status, {"error": {"code": code, "message": message}})
