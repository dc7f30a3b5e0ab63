"""A real, cheap request to a model endpoint: what ``airflow connections test`` runs. No Airflow here.

``GET {base_url}/models`` with the connection's key and a short timeout: it costs nothing,
needs the same base URL and key a run needs, and tells a closed port, a wrong path (404:
the base URL usually ends in ``/v1``), a refused key (401/403) and a page that is not an
OpenAI-compatible endpoint apart. The key is sent only to that URL and never appears in
the message.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from runner.airflow.failures import short

DEFAULT_BASE_URL = "https://api.openai.com/v1"
TIMEOUT_SECONDS = 5.0


def probe_models(base_url: str, api_key: str | None, *, timeout: float = TIMEOUT_SECONDS) -> tuple[bool, str]:
    """``(ok, message)`` for ``GET {base_url}/models``; ok only for a 2xx model list."""
    url = base_url.rstrip("/") + "/models"
    if urlsplit(url).scheme not in ("http", "https"):
        return False, f"{base_url}: the base URL must start with http:// or https://"
    httpx = _httpx()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(trust_env=False, follow_redirects=False, timeout=timeout) as client:
            response = client.get(url, headers=headers)
    except httpx.TimeoutException:
        return False, f"GET {url}: no answer within {timeout:g} s"
    except httpx.HTTPError as exc:
        return False, f"GET {url}: cannot connect ({type(exc).__name__}: {short(exc, [api_key], 200)})"
    return _verdict(url, response.status_code, _json(response), bool(api_key))


def _verdict(url: str, status: int, body: Any, key_sent: bool) -> tuple[bool, str]:
    if status in (401, 403):
        why = "the endpoint refused the API key" if key_sent else "the endpoint wants an API key (set the password)"
        return False, f"GET {url}: HTTP {status}: {why}"
    if status == 404:
        return False, f"GET {url}: HTTP 404: no model list here; check the base URL (it usually ends in /v1)"
    if not 200 <= status < 300:
        return False, f"GET {url}: HTTP {status}"
    models = body.get("data") if isinstance(body, dict) else None
    if not isinstance(models, list):
        return False, f"GET {url}: HTTP {status}, but the answer is not an OpenAI-compatible model list"
    return True, f"GET {url}: HTTP {status}, {len(models)} model(s) listed; API key {'sent' if key_sent else 'not set'}"


def _json(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _httpx() -> Any:
    """The HTTP client module (httpx2, or httpx with the same API), imported on first use."""
    try:
        import httpx2 as httpx
    except ImportError:  # pragma: no cover - depends on the environment
        import httpx  # type: ignore[no-redef]
    return httpx
