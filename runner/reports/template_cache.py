"""Compiled report templates kept between runs, so a run does not compile report.html.j2 again.

Compiling the HTML report's template costs every run about 2.5 MiB of peak memory and a few
milliseconds; loading Jinja's compiled code for it costs a fraction of that. The compiled
code is Python bytecode, and loading bytecode runs it, so the cache is held to the rules of
the compiled project cache (:mod:`runner.config.compiled`):

* it lives in the per-user cache directory (``$XDG_CACHE_HOME/runner/templates/``, else
  ``~/.cache/runner/templates/``), never in a project;
* every entry is authenticated with HMAC-SHA256 under the per-user key; an entry is read
  only from a regular file owned by this user that no one else may write;
* an entry is named after the environment, the Jinja version and the template, and Jinja
  itself checks that the source checksum and the Python version match;
* anything wrong (no key, an unreadable, foreign or forged entry, a full disk) means the
  template is compiled as before; never an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
from pathlib import Path

import jinja2
from jinja2.bccache import Bucket, BytecodeCache

from runner.config.compiled import read_own_file, user_cache_dir, user_key, write_private

MAX_ENTRY_BYTES = 16 * 1024 * 1024
MAC_BYTES = hashlib.sha256().digest_size


class SignedBytecodeCache(BytecodeCache):
    """A Jinja bytecode cache whose entries carry an HMAC under the per-user key.

    ``namespace`` names the environment (its options shape the compiled code)."""

    def __init__(self, namespace: str, secret: bytes, directory: Path) -> None:
        self.namespace = namespace
        self.secret = secret
        self.directory = directory

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            data = read_own_file(self._path(bucket), MAX_ENTRY_BYTES)
        except (OSError, ValueError):
            return
        mac, payload = data[:MAC_BYTES], data[MAC_BYTES:]
        if hmac.compare_digest(mac, self._mac(payload)):
            bucket.bytecode_from_string(payload)  # Jinja checks its magic and the source checksum

    def dump_bytecode(self, bucket: Bucket) -> None:
        payload = bucket.bytecode_to_string()
        with contextlib.suppress(OSError):
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_private(self._path(bucket), self._mac(payload) + payload)

    def _path(self, bucket: Bucket) -> Path:
        name = f"{self.namespace}\0{jinja2.__version__}\0{bucket.key}".encode()
        return self.directory / f"{hashlib.sha256(name).hexdigest()}.jinja"

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self.secret, payload, hashlib.sha256).digest()


def signed_bytecode_cache(namespace: str) -> SignedBytecodeCache | None:
    """The cache for the environment ``namespace``, or ``None`` without a usable per-user key."""
    secret = user_key(create=True)
    if secret is None:
        return None
    return SignedBytecodeCache(namespace, secret, user_cache_dir() / "templates")
