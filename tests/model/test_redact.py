"""Credentials never survive redaction."""

from __future__ import annotations

from runner.redact import REDACTED, excerpt, redact


def test_listed_secrets_and_credential_shapes_are_removed(canary_key):
    text = f"key={canary_key} header='Authorization: Bearer abc.def' masked sk-abc***wxyz api_key: hunter22"
    cleaned = redact(text, [canary_key, None, ""])
    assert canary_key not in cleaned and "abc.def" not in cleaned and "sk-abc" not in cleaned
    assert "hunter22" not in cleaned
    assert "api_key: " + REDACTED in cleaned


def test_unlisted_secret_without_a_known_shape_is_kept_and_short_secrets_ignored():
    assert redact("token 1234-5678", []) == "token 1234-5678"
    assert redact("a b c", ["a"]) == "a b c"


def test_excerpt_is_flat_and_short(canary_key):
    text = ("error\n\n" * 100) + canary_key
    short = excerpt(text, [canary_key], limit=50)
    assert len(short) <= 50 and "\n" not in short and canary_key not in short
