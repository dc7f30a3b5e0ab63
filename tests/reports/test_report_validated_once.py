"""write_report validates the record against the report schema once, before writing anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from runner.reports import record as record_module
from runner.reports import writer


def test_the_record_is_validated_once_and_report_json_is_still_valid(
    record: dict[str, Any], workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []

    def counting(value: dict[str, Any]) -> None:
        seen.append(value)
        record_module.validate_record(value)

    monkeypatch.setattr(writer, "validate_record", counting)
    written = writer.write_report(record, tmp_path / "out", workspace)
    assert len(seen) == 1
    document = json.loads(written["json"].read_text())
    errors = Draft202012Validator(record_module.report_schema()).iter_errors(document)
    assert [e.message for e in errors] == []


def test_an_invalid_record_writes_nothing(record: dict[str, Any], workspace: Path, tmp_path: Path) -> None:
    record["status"] = "exploded"
    with pytest.raises(ValueError, match="/status"):
        writer.write_report(record, tmp_path / "out", workspace)
    assert not (tmp_path / "out").exists()
