"""The documentation site builds without a broken link, and its generated references are whole.

``mkdocs build --strict`` fails on a broken link or anchor and on a page left out of the nav;
the references are generated from the code at build time (docs/gen/), so these tests check what
they must contain: every built-in tool, every configuration kind, every operator argument with
a description, every batch option, every CLI command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import import_or_missing

REPO = Path(__file__).resolve().parents[1]
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}  # the theme's notice about MkDocs 2


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import_or_missing("mkdocs", "the docs tools are not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO, env={**os.environ, **QUIET}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return out


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text("utf-8")


def test_every_builtin_tool_and_its_arguments_are_in_the_reference(site: Path) -> None:
    from runner.tools.builtins import BUILTINS

    text = page(site, "reference/tools")
    for entry in BUILTINS:
        tool = entry.build()
        assert f"<code>{tool.name}</code>" in text, tool.name
        for argument in tool.parameters.get("properties", {}):
            assert f"<code>{argument}</code>" in text, (tool.name, argument)


def test_every_configuration_kind_has_a_page_with_its_fields(site: Path) -> None:
    sys.path.insert(0, str(REPO / "docs" / "gen"))
    from schema_pages import PAGES

    from runner.config.schema import schema

    for name in PAGES:
        text = page(site, f"reference/configuration/{name}")
        for field in schema(name).get("properties", {}):
            assert f"<code>{field}</code>" in text, (name, field)


def test_every_operator_argument_is_documented(site: Path) -> None:
    import_or_missing("airflow", "apache-airflow is not installed: pip install -e '.[airflow]'")
    sys.path.insert(0, str(REPO / "docs" / "gen"))
    from airflow_pages import argument_docs, arguments, documented, public_objects

    text = page(site, "reference/airflow")
    for _, name, value in public_objects():
        docs = argument_docs(*documented(value))
        for argument, _, _ in arguments(value):
            assert f"<code>{argument}</code>" in text, (name, argument)
            assert docs.get(argument.lstrip("*")), f"{name}: argument {argument!r} has no description in an Args: section"


def test_every_batch_option_is_in_the_airflow_reference(site: Path) -> None:
    """The operators' batch options are generated from runner/batch/options.py: a new option
    appears in the reference, with how a fan-out takes it or why the operators refuse it."""
    from runner.batch.options import BATCH_OPTIONS

    text = page(site, "reference/airflow")
    options = text[text.index('id="batch-options"'):]
    for option in BATCH_OPTIONS:
        assert f"<code>{option.name}</code>" in options, option.name
        assert (option.elsewhere if option.fanout is None else option.help.split(" (")[0]) in options, option.name


def test_every_command_is_in_the_cli_reference(site: Path) -> None:
    from runner.cli import COMMANDS

    text = page(site, "reference/cli")
    for command in COMMANDS:
        assert f"runner {command}" in text, command


def test_every_schema_of_the_language_has_a_reference_page() -> None:
    """A new kind (its schema in ``SCHEMA_NAMES``) cannot be left out of the configuration reference."""
    sys.path.insert(0, str(REPO / "docs" / "gen"))
    from schema_pages import PAGES

    from runner.config.schema import SCHEMA_NAMES

    assert set(SCHEMA_NAMES) <= set(PAGES), set(SCHEMA_NAMES) - set(PAGES)
