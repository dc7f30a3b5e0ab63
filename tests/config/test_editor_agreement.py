"""Editors and ``runner validate`` agree: the real check-jsonschema (YAML 1.2 through ruamel.yaml,
ECMA-262 patterns through regress), given the schemas ``runner schema --out`` writes, accepts
every shipped configuration file and rejects exactly the corpus cases a schema can express.

The other corpus cases are runner's own: cross-references (an unknown agent or tool, templates,
prompt files, prices), and what runner's strict loader refuses before any schema applies
(anchors, tags, duplicate keys, NaN, depth, ``017``). Those are listed in ``RUNNER_ONLY`` with
the reason; a case in neither list fails this test, so each new case is classified.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli
from runner.config.project import load_project
from runner.config.schema import KINDS, validate_document
from runner.config.yamlload import YamlError, load_documents

REPO = Path(__file__).resolve().parents[2]
INVALID = REPO / "tests/config/invalid"
SHIPPED = sorted([*REPO.glob("agents.d/*.yaml"), *REPO.glob("tasks.d/*.yaml"), *REPO.glob("evals.d/*.yaml"),
                  *REPO.glob("tests/config/project/*/*.yaml")])  # fmt: skip
CROSS_REFERENCE = "a cross-reference or file check (runner only)"
STRICT_LOADER = "refused by runner's strict YAML loader, before the schema"
MULTI_KIND = "several kinds in one file (a schema checks one kind)"
RUNNER_ONLY = {
    "04-nan-cap": STRICT_LOADER, "05-inf-cap": STRICT_LOADER, "08-duplicate-key": STRICT_LOADER,
    "09-anchor-alias": STRICT_LOADER, "10-python-tag": STRICT_LOADER, "11-syntax-error": STRICT_LOADER,
    "14-unknown-kind": "no schema for an unknown kind", "39-not-a-mapping": "no kind", "40-empty": "no document",
    "44-merge-key": STRICT_LOADER, "46-invalid-utf8": STRICT_LOADER, "67-deep-yaml-flow": STRICT_LOADER,
    "68-deep-yaml-mappings": STRICT_LOADER, "84-yaml11-octal": STRICT_LOADER,
    "38-task-money-cap-unpriced-agent": MULTI_KIND, "73-custom-tool-declared-settings": MULTI_KIND,
    "78-batch-api-mode": MULTI_KIND,
    **{name: CROSS_REFERENCE for name in (
        "15-unknown-tool", "17-money-cap-unpriced", "18-task-unknown-agent", "19-task-undefined-input",
        "20-task-no-agent-no-pipeline", "22-dependency-cycle", "23-unknown-dependency", "24-duplicate-step-id",
        "25-step-output-not-dependency", "26-step-unknown-tool", "29-template-syntax", "30-undefined-root-variable",
        "31-previous-without-memory", "32-planner-unknown-executor", "36-duplicate-agent-name",
        "37-invalid-output-schema", "43-bad-report-table", "45-both-agent-and-tool-step", "47-workspace-file-clash",
        "48-prompt-file-outside-project", "49-prompt-file-absolute", "50-prompt-file-binary",
        "51-prompt-file-not-utf8", "52-prompt-file-missing", "53-prompt-file-directory", "54-prompt-file-blank-and-nul",
        "55-prompt-file-device", "56-template-dunder", "57-template-attr-filter", "58-template-str-format",
        "59-template-include", "60-template-import-extends", "61-template-unknown-filter-test",
        "62-template-fails-with-sample-values", "63-template-macro-recursion", "64-template-size-bombs",
        "65-template-previous-unguarded", "66-template-in-nested-tool-args", "69-tool-settings-wrong-type",
        "70-tool-settings-unknown-key", "71-custom-tool-settings", "72-workspace-file-outside",
        "74-template-type-error", "75-eval-problems", "78-telemetry-port", "87-output-schema-enum-type",
    )},
}  # fmt: skip
READERS_DIFFER = {
    "83-yaml11-underscore-number": "ruamel.yaml reads 1_000 as 1000 in YAML 1.2 mode; the 1.2 core schema (and "
    "yaml-language-server) reads a string, as runner does",
}
"""Cases where check-jsonschema's YAML reader departs from the YAML 1.2 core schema: it accepts them."""


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The schemas as a user gets them: ``runner schema --out DIR``."""
    out = tmp_path_factory.mktemp("schemas")
    result = CliRunner().invoke(cli, ["schema", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


def check_jsonschema(schemas: Path, kind: str, files: list[Path]) -> set[str]:
    """The names of ``files`` that check-jsonschema rejects against ``kind``'s exported schema."""
    executable = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    assert executable, "check-jsonschema is in the dev extra (pip install -e '.[dev]')"
    result = subprocess.run(
        [executable, "--no-cache", "-o", "json", "--schemafile", str(schemas / f"{kind}.schema.json"), *map(str, files)],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert result.returncode in (0, 1), result.stderr
    return {Path(e["filename"]).name for e in [*report.get("errors", []), *report.get("parse_errors", [])]}


def kind_of(path: Path) -> str:
    (document,) = load_documents(path)
    return KINDS[document.data["kind"]]


def by_kind(paths: list[Path]) -> dict[str, list[Path]]:
    grouped: dict[str, list[Path]] = {}
    for path in paths:
        grouped.setdefault(kind_of(path), []).append(path)
    return grouped


def test_the_exported_schemas_reach_each_other_by_relative_paths(schemas: Path) -> None:
    for path in schemas.glob("*.schema.json"):
        exported = json.loads(path.read_text())
        assert "$id" not in exported, path.name  # an $id would make the references below resolve at its host
        for ref in _refs(exported):
            target = ref.split("#", 1)[0]
            assert not target or (schemas / target).is_file(), f"{path.name}: $ref {ref!r}"


def test_check_jsonschema_accepts_every_shipped_file(schemas: Path) -> None:
    _, problems = load_project(REPO)
    assert [p.render() for p in problems] == []
    for kind, files in by_kind(SHIPPED).items():
        assert check_jsonschema(schemas, kind, files) == set(), kind


def test_every_corpus_case_is_classified() -> None:
    names = {path.stem for path in INVALID.glob("*.yaml")}
    assert set(RUNNER_ONLY) | set(READERS_DIFFER) <= names
    for name in sorted(names - set(RUNNER_ONLY)):
        problems = [p for d in load_documents(INVALID / f"{name}.yaml") for p in validate_document(d)]
        assert problems, f"{name}: not in RUNNER_ONLY, so runner's schema step must reject it"
    for name, reason in RUNNER_ONLY.items():
        if reason == CROSS_REFERENCE:
            problems = [p for d in load_documents(INVALID / f"{name}.yaml") for p in validate_document(d)]
            assert problems == [], f"{name}: the schema rejects it; remove it from RUNNER_ONLY"
        elif reason == STRICT_LOADER:
            with pytest.raises(YamlError):
                load_documents(INVALID / f"{name}.yaml")


def test_check_jsonschema_gives_runner_s_verdict_on_the_corpus(schemas: Path) -> None:
    expressible = sorted(p for p in INVALID.glob("*.yaml") if p.stem not in RUNNER_ONLY)
    cross_reference = sorted(p for p in INVALID.glob("*.yaml") if RUNNER_ONLY.get(p.stem) == CROSS_REFERENCE)
    assert len(expressible) >= 25
    for kind, files in by_kind(expressible + cross_reference).items():
        rejected = check_jsonschema(schemas, kind, files)
        for path in files:
            schema_says = path.name in rejected
            runner_s_schema_says = path.stem not in RUNNER_ONLY and path.stem not in READERS_DIFFER
            assert schema_says == runner_s_schema_says, f"{path.name}: check-jsonschema {'rejects' if schema_says else 'accepts'} it"


def test_yaml11_only_values_read_as_yaml_1_2_does(tmp_path: Path) -> None:
    """``enum: [yes, no]`` on a string input is two strings to runner and to the editor."""
    task = tmp_path / "t.yaml"
    task.write_text("apiVersion: runner/v1\nkind: Task\nname: t\nagent: analyst\ngoal: 'Go {{ inputs.mode }}'\n"
                    "inputs:\n  mode: {type: string, enum: [yes, no, on], default: no}\n")  # fmt: skip
    (document,) = load_documents(task)
    assert document.data["inputs"]["mode"] == {"type": "string", "enum": ["yes", "no", "on"], "default": "no"}
    assert validate_document(document) == []


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        return [*([node["$ref"]] if isinstance(node.get("$ref"), str) else []), *(r for v in node.values() for r in _refs(v))]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []



def test_the_guide_s_editor_line_resolves_in_a_project_after_runner_schema_out(tmp_path: Path) -> None:
    """The guide tells a user to run ``runner schema --out schemas/`` in the project, then start
    ``agents.d/*.yaml`` with its ``# yaml-language-server: $schema=...`` line: the path must reach it."""
    guide = (REPO / "docs" / "guides" / "configuration.md").read_text()
    (line,) = [ln for ln in guide.splitlines() if ln.startswith("# yaml-language-server: $schema=")]
    assert "runner schema --out schemas/" in guide
    result = CliRunner().invoke(cli, ["schema", "--out", str(tmp_path / "schemas")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    target = (tmp_path / "agents.d" / line.split("$schema=", 1)[1]).resolve()
    assert target == (tmp_path / "schemas" / "agent.schema.json").resolve() and target.is_file()
