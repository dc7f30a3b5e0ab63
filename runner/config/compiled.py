"""The compiled project cache: an unchanged project loads without re-parsing or re-checking.

After a load that found no problem, :mod:`runner.config.project` keeps what it produced in
``<state dir>/project-cache.json`` (once the project's state directory exists, which its first
run creates: ``<root>/.runner``, or ``$RUNNER_STATE_DIR``, see :mod:`runner.local_state`): every document's data and node positions, and the
prices. The entry is keyed by a SHA-256 over the runner itself (its version and the size
and modification time of every file of the package: code, schemas, shipped prices), the
project root and, for every configuration file, its path, display name and the SHA-256 of
its bytes. The next load reads the files (it must, to hash them), finds the key, and builds
the specs from the cached documents without YAML parsing, schema validation or the
cross-reference and template checks.

What the cache is never trusted with:

* It is JSON (loading it runs no code), authenticated with HMAC-SHA256 under a per-user key
  kept outside the project (``$XDG_CACHE_HOME/runner/project-cache.key``, else
  ``~/.cache/runner/``, or ``$RUNNER_STATE_DIR/user-cache`` for a user without a writable
  home; a regular 0600 file owned by the user). A cache that cannot be read,
  parsed or verified, or whose key does not match (corrupted, edited, copied from another
  machine or user, written by another runner version) is ignored and rebuilt; never an error.
  Without a usable key (no writable home directory and no absolute `$RUNNER_STATE_DIR`)
  there is no cache.
* Checks that depend on the file system rather than on the bytes hashed run on every load:
  prompt files are read through the confinement checks every time (and must hash as they
  did when the entry was written), and ``workspace.files`` are checked again; a difference
  sends the load down the full path, which reports the problem.
* ``runner validate`` never reads the cache; it always checks everything (and refreshes it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import runner
from runner.config.documents import Document, Position, SourceMap
from runner.local_state import STATE_DIR_ENV

CACHE_FILE = Path(".runner") / "project-cache.json"
"""Where the cache is under a project root by default (:func:`cache_file` honours ``$RUNNER_STATE_DIR``)."""
FORMAT = 1
KEY_BYTES = 32
MAX_CACHE_BYTES = 64 * 1024 * 1024
"""A cache file larger than this is not read (configuration is at most 1 MiB a file)."""


@dataclass(frozen=True)
class ConfigFile:
    """One configuration file as read for a load: where it is, how messages name it, its bytes."""

    path: Path
    display: str
    raw: bytes


@dataclass(frozen=True)
class CachedProject:
    """What a cache entry holds: the valid documents, the prices, and the digest of the
    prompt files' texts when the entry was written."""

    documents: tuple[Document, ...]
    prices: Mapping[str, tuple[float | None, ...]]  # a Price's fields in order
    prompts_digest: str
    profiles: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)  # profiles.profile_entry of each


def cache_file(root: Path) -> Path:
    """The cache file of the project at ``root``, in its state directory."""
    from runner.local_state import state_dir

    return state_dir(root) / CACHE_FILE.name


def cache_key(root: Path, files: Iterable[ConfigFile]) -> str:
    """The key of a load of ``files`` under ``root`` by this runner."""
    digest = hashlib.sha256(f"runner-project-cache/{FORMAT}\0{runner_fingerprint()}\0{root}\0".encode())
    for item in files:
        digest.update(f"{item.path}\0{item.display}\0{hashlib.sha256(item.raw).hexdigest()}\0".encode())
    return digest.hexdigest()


def prompts_digest(texts: Iterable[str]) -> str:
    """A digest of the prompt texts a load read from files (in load order)."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
    return digest.hexdigest()


def read_cache(root: Path, key: str) -> CachedProject | None:
    """The entry for ``key`` under ``root``, or ``None`` when there is none that verifies."""
    secret = user_key(create=False)
    if secret is None:
        return None
    try:
        wrapper = json.loads(read_own_file(cache_file(root), MAX_CACHE_BYTES))
        body = wrapper["body"]
        if wrapper["format"] != FORMAT or not hmac.compare_digest(wrapper["mac"], _mac(secret, body)):
            return None
        payload = json.loads(body, parse_constant=_refuse_constant)
        if payload["key"] != key:
            return None
        return _decode(payload)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None  # missing, unreadable, corrupted or of another shape: rebuilt by the caller


def write_cache(
    root: Path, key: str, documents: Sequence[Document], prices: Mapping[str, Any], prompts: str,
    profiles: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Store the entry for ``key`` (best effort: a project the runner cannot write to, or no
    usable user key, just goes without a cache). The cache goes into an existing state directory
    only (the first run makes it): loading alone, as ``runner validate`` and ``runner list``
    do, never adds a directory to a project."""
    if not cache_file(root).parent.is_dir():
        return
    secret = user_key(create=True)
    if secret is None:
        return
    payload = {
        "key": key,
        "documents": [_encode_document(doc) for doc in documents],
        "prices": {model: list(dataclasses.astuple(p)) for model, p in prices.items()},
        "prompts": prompts,
        "profiles": dict(profiles or {}),
    }
    try:
        body = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        text = json.dumps({"format": FORMAT, "mac": _mac(secret, body), "body": body}, ensure_ascii=False)
        write_private(cache_file(root), text.encode("utf-8"))
    except (OSError, ValueError, TypeError):
        return


@cache
def runner_fingerprint() -> str:
    """The runner's version and the size and modification time of every file of the package
    (a changed schema, price list or checker is a different runner)."""
    package = Path(runner.__file__).parent
    digest = hashlib.sha256(getattr(runner, "__version__", "").encode())
    for directory, subdirectories, names in os.walk(package):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        for name in sorted(names):
            with contextlib.suppress(OSError):
                info = os.stat(os.path.join(directory, name))
                relative = os.path.relpath(os.path.join(directory, name), package)
                digest.update(f"{relative}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def user_key(*, create: bool) -> bytes | None:
    """The per-user HMAC key (made on first use when ``create``), or ``None`` when there is
    no usable one: not a regular file owned by this user, readable or writable by others."""
    try:
        path = _key_path()
        if create and not path.exists():
            _create_key(path)
        key = read_own_file(path, KEY_BYTES + 1)
    except (OSError, RuntimeError, ValueError):
        return None
    return key if len(key) == KEY_BYTES else None


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/runner`` (else ``~/.cache/runner``): the key and other per-user caches.

    A service account often has no home directory, or one it cannot write (an Airflow worker
    started as a system user, or with root's ``HOME`` kept by ``sudo``): then, when
    ``$RUNNER_STATE_DIR`` is an absolute path (the writable local directory such a deployment
    gives the runner), ``$RUNNER_STATE_DIR/user-cache``. ``RuntimeError`` when there is neither.
    """
    home = _home_cache_dir()
    if home is not None and _can_hold(home):
        return home
    configured = os.environ.get(STATE_DIR_ENV, "").strip()
    if os.path.isabs(configured):
        return Path(configured) / "user-cache"
    if home is None:
        raise RuntimeError("no home directory and no absolute $RUNNER_STATE_DIR for the per-user cache")
    return home


def _home_cache_dir() -> Path | None:
    base = os.environ.get("XDG_CACHE_HOME") or ""
    try:
        root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    except RuntimeError:  # no $HOME and no passwd entry (a container's arbitrary uid)
        return None
    return root / "runner"


def _can_hold(directory: Path) -> bool:
    """Whether ``directory`` is, or can be made, a directory this user writes."""
    for candidate in (directory, *directory.parents):
        try:
            if candidate.exists():
                return candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK)
        except OSError:  # an ancestor this user cannot search
            return False
    return False


def _key_path() -> Path:
    return user_cache_dir() / "project-cache.key"


def _create_key(path: Path) -> None:
    """Write a new random key, atomically (a key another process made first wins)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".key.")  # mode 0600
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(secrets.token_bytes(KEY_BYTES))
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        os.unlink(temporary)


def read_own_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path``: a regular file (not a link), owned by this user, that no one else
    may write; ``OSError``/``ValueError`` otherwise."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb") as stream:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise ValueError(f"{path} is not a private file of this user")
        if info.st_size > limit:
            raise ValueError(f"{path} is larger than {limit} bytes")
        return stream.read(limit + 1)


def write_private(path: Path, data: bytes) -> None:
    """Write ``path`` (mode 0600) through a temporary file and a rename."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _mac(secret: bytes, body: str) -> str:
    return hmac.new(secret, body.encode("utf-8"), hashlib.sha256).hexdigest()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _encode_document(doc: Document) -> dict[str, Any]:
    return {
        "path": str(doc.path),
        "file": doc.source.file,
        "data": doc.data,
        "values": {pointer: [p.line, p.column] for pointer, p in doc.source.values.items()},
        "keys": {pointer: [p.line, p.column] for pointer, p in doc.source.keys.items()},
    }


def _decode(payload: Mapping[str, Any]) -> CachedProject:
    documents = tuple(_decode_document(item) for item in payload["documents"])
    prices = {str(model): tuple(None if v is None else float(v) for v in values) for model, values in payload["prices"].items()}
    prompts, profiles = payload["prompts"], payload["profiles"]
    if not isinstance(prompts, str) or not isinstance(profiles, dict):
        raise TypeError("prompts digest or profiles")
    return CachedProject(documents, prices, prompts, profiles)


def _decode_document(item: Mapping[str, Any]) -> Document:
    data = item["data"]
    if not isinstance(data, dict):
        raise TypeError("document data")
    source = SourceMap(str(item["file"]), _positions(item["values"]), _positions(item["keys"]))
    return Document(Path(str(item["path"])), data, source)


def _positions(table: Mapping[str, Any]) -> dict[str, Position]:
    return {str(pointer): Position(int(line), int(column)) for pointer, (line, column) in table.items()}
