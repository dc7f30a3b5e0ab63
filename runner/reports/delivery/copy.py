"""Copy the report's files to a directory URL through fsspec (file://, s3://, gs://, memory://...).

Storage options (keys, an endpoint) come as JSON from the variable ``options_env`` names;
a protocol whose package is missing (s3fs for s3://) fails with the package to install.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runner.locations import bounded
from runner.reports.delivery.outcome import DeliveryFailed


def describe(url: str) -> str:
    """The URL without credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{parts.path}" if parts.scheme else url


def copy_files(
    url: str, files: Sequence[Path], environ: Mapping[str, str], options_env: str | None, seconds: float | None = None
) -> list[str]:
    """Write each file under the directory ``url``; returns the URLs written. Each storage call
    may take ``seconds`` (default ``$RUNNER_REMOTE_TIMEOUT_SECONDS``, see :func:`runner.locations.bounded`)."""
    try:
        import fsspec
    except ModuleNotFoundError:
        raise DeliveryFailed("copying reports needs fsspec: pip install 'runner[reports]'", "config") from None
    options = _options(environ, options_env)
    try:
        filesystem, root = bounded(f"opening {describe(url)}", lambda: fsspec.core.url_to_fs(url, **options), seconds)
    except ImportError as error:
        raise DeliveryFailed(f"{urlsplit(url).scheme}:// needs another package: {error}", "config") from None
    except (ValueError, TypeError) as error:
        raise DeliveryFailed(f"cannot open {describe(url)}: {error}", "config") from None
    except TimeoutError as error:  # RemoteTimedOut: the storage does not answer
        raise DeliveryFailed(str(error), "storage") from None
    written = []
    try:  # each call bounded (runner.locations.bounded): a storage that never answers is a failed delivery
        bounded(f"copy to {describe(url)}", lambda: filesystem.makedirs(root, exist_ok=True), seconds)
        for path in files:
            target, data = f"{root.rstrip('/')}/{path.name}", path.read_bytes()
            bounded(f"copy of {path.name} to {describe(url)}", lambda: filesystem.pipe_file(target, data), seconds)  # noqa: B023  # called before the next iteration
            written.append(target)
    except OSError as error:  # RemoteTimedOut is a TimeoutError
        raise DeliveryFailed(f"copy to {describe(url)} failed: {type(error).__name__}: {error}", "storage") from None
    return written


def _options(environ: Mapping[str, str], options_env: str | None) -> dict[str, Any]:
    if not options_env:
        return {}
    text = environ.get(options_env, "")
    if not text:
        raise DeliveryFailed(f"the environment variable {options_env} (storage options) is not set", "config")
    try:
        value = json.loads(text)
    except ValueError:
        raise DeliveryFailed(f"{options_env} is not JSON (storage options such as {{\"key\": ..., \"secret\": ...}})", "config") from None
    if not isinstance(value, dict):
        raise DeliveryFailed(f"{options_env} must hold a JSON object", "config")
    return value
