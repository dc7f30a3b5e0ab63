"""redact_secrets and redact see a secret in the forms a record may carry it in: verbatim,
hex, base64 at any alignment, behind JSON \\u escapes, and in a mapping's keys; ordinary
text (escapes included) is left as it is."""

from __future__ import annotations

import base64
import json

from runner.redact import REDACTED, redact, redact_secrets

KEY = "sk-proj-Zx81-secret-0123456789"


def test_every_encoded_form_is_replaced() -> None:
    raw = KEY.encode()
    for text in (
        raw.hex(), raw.hex().upper(), base64.b64encode(raw).decode(), base64.b64encode(b"a" + raw).decode(),
        base64.b64encode(b"ab" + raw).decode(), base64.urlsafe_b64encode(b"\xff" + raw).decode(),
    ):
        assert KEY not in (kept := redact_secrets({"content": f"token {text} end"}, [KEY])["content"])
        assert REDACTED in kept and text not in kept
        assert REDACTED in redact(f"error: {text}", [KEY])


def test_json_escapes_are_decoded_where_they_spell_a_secret() -> None:
    escaped = json.dumps({"q": KEY}).replace("s", "\\u0073", 1).replace("k", "\\u006B", 1)
    assert json.loads(escaped)["q"] == KEY
    assert redact_secrets(escaped, [KEY]) == '{"q": "[REDACTED]"}'
    kept = redact_secrets({"arguments": escaped, KEY: 1}, [KEY])
    assert kept == {"arguments": '{"q": "[REDACTED]"}', REDACTED: 1}


def test_ordinary_text_with_escapes_is_unchanged() -> None:
    text = '{"q": "caf\\u00e9 \\u0022quoted\\u0022 \\ud83d\\ude00"}'
    assert redact_secrets(text, [KEY]) == text
    assert redact_secrets({"a": [text]}, [KEY]) == {"a": [text]}
    assert redact_secrets("0123456789abcdef" * 4, [KEY]) == "0123456789abcdef" * 4
