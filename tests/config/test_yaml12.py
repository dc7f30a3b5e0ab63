"""runner reads YAML scalars by the YAML 1.2 core schema and JSON Schema patterns as ECMA-262
does, as editors and JSON Schema tools do; where YAML 1.1 read a value otherwise, it says so."""

from __future__ import annotations

import re

import pytest

from runner.config.schema import validate_value
from runner.config.yamlload import YamlError, load_text
from runner.untrusted_regex import ecma_ends


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("yes", "yes"), ("No", "No"), ("on", "on"), ("OFF", "OFF"), ("y", "y"),  # booleans in YAML 1.1 only
        ("true", True), ("False", False), ("TRUE", True),
        ("1_000", "1_000"), ("1:30", "1:30"), ("0b101", "0b101"), ("1_000.5", "1_000.5"),  # numbers in 1.1 only
        ("0o20", 16), ("0x1F", 31), ("1e-2", 0.01), ("1.5e3", 1500.0), ("+12", 12), ("-0", 0), (".5", 0.5),
        ("007", 7), ("~", None), ("null", None), ("", None), ("2026-11-30", "2026-11-30"), ("<<", "<<"),
    ],
)  # fmt: skip
def test_plain_scalars_read_as_the_yaml_1_2_core_schema_reads_them(written: str, read: object) -> None:
    (document,) = load_text(f"a: {written}\n", "f.yaml")
    value = document.data["a"]
    assert value == read and type(value) is type(read)


def test_a_quoted_scalar_has_no_yaml_1_1_reading() -> None:
    (document,) = load_text("a: 'yes'\nb: yes\n", "f.yaml")
    assert "/a" not in document.source.yaml11 and document.source.yaml11["/b"].meaning == "the boolean true"


@pytest.mark.parametrize(("written", "said"), [("017", "017 is the number 17 in YAML 1.2"), ("-0012", "-0012 is the number -12")])
def test_a_number_both_versions_read_with_different_values_is_an_error(written: str, said: str) -> None:
    with pytest.raises(YamlError, match=re.escape(said)):
        load_text(f"a: {written}\n", "f.yaml")


@pytest.mark.parametrize(
    ("pattern", "ecma"),
    [("^[a-z]+$", "^[a-z]+\\Z"), ("^a\\$b$", "^a\\$b\\Z"), ("^[$]$", "^[$]\\Z"), ("^[]$]$", "^[]$]\\Z"),
     ("^[^]$]$", "^[^]$]\\Z"), ("^[\\]$]$", "^[\\]$]\\Z"), ("^(a|b$)", "^(a|b\\Z)")],
)  # fmt: skip
def test_dollar_outside_a_class_means_the_end_of_the_text(pattern: str, ecma: str) -> None:
    assert ecma_ends(pattern) == ecma


def test_a_user_schema_pattern_does_not_match_before_a_final_newline() -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}}}
    assert validate_value({"code": "ABC"}, schema) == []
    assert validate_value({"code": "ABC\n"}, schema) != []
