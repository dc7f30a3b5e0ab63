"""A request's fingerprint: what identifies one model call of a run across processes.

A provider batch (``--via batch-api``) stores every answer it collects under its run's id
and this fingerprint, so a resumed run that sends the same request again is answered from
the store instead of paying for it twice. The hash covers the request as the wire sends it
(model, tools, parameters, messages): the same request, the same fingerprint, in any process.
"""

from __future__ import annotations

import hashlib
import json

from runner.model.base import ModelRequest
from runner.model.wire import request_body

FINGERPRINT_CHARS = 24  # 96 bits: no two requests of one run collide


def request_fingerprint(request: ModelRequest) -> str:
    """The hex SHA-256 prefix of ``request``'s canonical wire body."""
    text = json.dumps(request_body(request), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_CHARS]
