"""write_report with artifacts of every kind: nothing a tool may write stops the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from runner.reports.artifacts import OCTET_STREAM, media_type_of, report_path_of
from runner.reports.record import report_schema
from runner.reports.writer import write_report

KEY = "sk-report-key-0123456789abcdef"


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "reports" / "daily_sales" / "run-1"


def add(record: dict[str, Any], *paths: str) -> None:
    step = record["steps"][0]
    step["artifacts"] = [*(step.get("artifacts") or []), *paths]
    record["artifacts"] += [{"path": p, "media_type": media_type_of(p), "step": step["id"]} for p in paths]


@pytest.mark.parametrize(
    ("path", "media_type"),
    [
        ("analysis.py", "text/x-python"),
        ("page.HTML", "text/html"),
        ("sheet.xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
        ("paper.pdf", "application/pdf"),
        ("README", OCTET_STREAM),
        ("archive.tar.gz", "application/gzip"),
        ("odd.x-y+z", OCTET_STREAM),
        (".bashrc", OCTET_STREAM),
    ],
)
def test_every_suffix_has_a_valid_media_type(path: str, media_type: str) -> None:
    assert media_type_of(path) == media_type
    schema = report_schema()["$defs"]["media_type"]
    assert not list(Draft202012Validator(schema).iter_errors(media_type))


def test_files_of_any_kind_are_copied(record: dict[str, Any], workspace: Path, out: Path) -> None:
    files = {
        "analysis.py": b"print(1)\n",
        "README": b"read me\n",
        "page.html": b"<script>x</script>",
        "a b/(c) [d].md": b"#",
    }
    for path, data in files.items():
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / path).write_bytes(data)
    add(record, *files)
    written = write_report(record, out, workspace)
    document = json.loads(written["json"].read_text())
    copied = {a["source_path"]: a for a in document["artifacts"]}
    for path, data in files.items():
        assert (out / copied[path]["path"]).read_bytes() == data
    assert "artifact_problems" not in document
    assert "<script>" not in written["html"].read_text()  # files are listed, never inlined


def test_paths_a_report_cannot_name_become_problems(record: dict[str, Any], workspace: Path, out: Path) -> None:
    """A record stored by an older version, or built by hand, with hostile paths."""
    add(record, "../outside.txt", "/etc/passwd", "a\nb.txt", "bad\udcff.txt", "./canonical.txt")
    (workspace / "canonical.txt").write_text("fine")
    written = write_report(record, out, workspace)
    document = json.loads(written["json"].read_text())
    problems = [p["reason"] for p in document["artifact_problems"]]
    assert len(problems) == 4 and all(r.startswith("cannot be reported: refused") for r in problems)
    assert "canonical.txt" in {a["source_path"] for a in document["artifacts"]}
    assert not (out.parent / "outside.txt").exists()


def test_a_long_path_gets_a_short_copy(record: dict[str, Any], workspace: Path, out: Path) -> None:
    long = "/".join(["x" * 250] * 6) + "/end.txt"
    (workspace / long).parent.mkdir(parents=True)
    (workspace / long).write_text("deep")
    add(record, long)
    document = json.loads(write_report(record, out, workspace)["json"].read_text())
    (copy,) = [a for a in document["artifacts"] if a["source_path"] == long]
    assert copy["path"].startswith("artifacts/_long/") and copy["path"].endswith("-end.txt")
    assert (out / copy["path"]).read_text() == "deep"
    assert report_path_of("short/name.txt", out) == "artifacts/short/name.txt"


def test_a_file_and_a_directory_of_the_same_name(record: dict[str, Any], workspace: Path, out: Path) -> None:
    """Two steps: one wrote ``data``, a later one replaced it by ``data/inner.txt``."""
    (workspace / "data").mkdir(exist_ok=True)
    (workspace / "data" / "inner.txt").write_text("inner")
    add(record, "data", "data/inner.txt")
    document = json.loads(write_report(record, out, workspace)["json"].read_text())
    reasons = {p["path"]: p["reason"] for p in document["artifact_problems"]}
    assert reasons["data"] == "is not a regular file"
    assert "data/inner.txt" in {a["source_path"] for a in document["artifacts"]}


def test_secrets_are_redacted_from_text_and_binaries_withheld(
    record: dict[str, Any], workspace: Path, out: Path
) -> None:
    (workspace / "notes.txt").write_text(f"key: {KEY}\n")
    (workspace / "dump.bin").write_bytes(b"\x00" + KEY.encode())
    add(record, "notes.txt", "dump.bin")
    written = write_report(record, out, workspace, secrets=[KEY])
    document = json.loads(written["json"].read_text())
    copied = {a["source_path"]: a for a in document["artifacts"]}
    assert (out / copied["notes.txt"]["path"]).read_text() == "key: [REDACTED]\n"
    assert copied["notes.txt"]["redactions"] == 1
    (problem,) = [p for p in document["artifact_problems"] if p["path"] == "dump.bin"]
    assert problem["reason"].startswith("was withheld: it contains a secret (verbatim, in the file)")
    assert "dump.bin: was withheld" in written["markdown"].read_text()
    assert "dump.bin: was withheld" in written["html"].read_text()
    for path in out.rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes()


def test_a_withheld_reason_never_quotes_the_key(record: dict[str, Any], workspace: Path, out: Path) -> None:
    """Reasons may name a zip member; one named after the key must not carry it into the report."""
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{KEY}.txt", KEY)
    (workspace / "named.zip").write_bytes(buffer.getvalue())
    add(record, "named.zip")
    written = write_report(record, out, workspace, secrets=[KEY])
    for path in out.rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path
    assert "named.zip: was withheld" in written["markdown"].read_text()
