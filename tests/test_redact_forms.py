"""redact_secrets and redact see a secret in the forms a record may carry it in: verbatim,
hex, base64 at any alignment, behind JSON \\u escapes, and in a mapping's keys; ordinary
text (escapes included) is left as it is. redacted_json stores what redact_secrets would
have left, serialised."""

from __future__ import annotations

import base64
import json

from runner.redact import REDACTED, redact, redact_secrets, redacted_json

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


def test_a_secret_json_escapes_is_found_in_a_value() -> None:
    quoted = 'pa"ss\\word-0123'  # a quote and a backslash: JSON text spells them escaped
    assert redact_secrets({"content": f"key {quoted}"}, [quoted]) == {"content": f"key {REDACTED}"}
    assert quoted not in json.loads(redacted_json({"content": [f"key {quoted}"]}, [quoted], json.dumps))["content"][0]


def test_redacted_json_is_the_serialised_redacted_value() -> None:
    raw = KEY.encode()
    escaped = json.dumps({"q": KEY}).replace("s", "\\u0073", 1)
    for value in (
        {"content": f"token {raw.hex()} end", KEY: [KEY, 1, None]}, {"arguments": escaped}, ["caf\u00e9", {"n": 3}],
        f"plain {base64.b64encode(b'a' + raw).decode()}", None, {"ordinary": "text \\u0041"},
    ):
        for dumps in (json.dumps, lambda v: json.dumps(v, ensure_ascii=False, sort_keys=True)):
            assert redacted_json(value, [KEY], dumps) == dumps(redact_secrets(value, [KEY]))
    assert redacted_json({"a": KEY}, [], json.dumps) == json.dumps({"a": KEY})  # nothing to hide
