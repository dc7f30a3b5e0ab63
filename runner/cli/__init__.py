"""The ``runner`` command line. Commands are thin: parse, call, render, exit.

Subcommands are imported lazily so ``runner --help`` stays fast; one place
(:func:`main`) turns exceptions into exit codes (see ``runner.errors``).
"""

from __future__ import annotations

import importlib
import sys
from typing import IO, Any, cast

import click

from runner.cli.terminal import SafeStream, safe_text
from runner.core.status import exit_codes_text
from runner.errors import EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED, RunnerError

COMMANDS = {
    "validate": ("runner.cli.validate", "validate", "Validate agents, tasks and tools; report every problem."),
    "schema": ("runner.cli.inspect", "schema", "Write the JSON Schemas of the configuration language."),
    "list": ("runner.cli.inspect", "list_", "List agents, tasks and tools."),
    "run": ("runner.cli.run", "run", "Run one task headlessly."),
    "batch": ("runner.cli.batch", "batch", "Run a task over every row of a CSV, JSONL or Parquet file."),
    "runs": ("runner.cli.runs", "runs", "List recorded runs, or show one."),
    "report": ("runner.cli.report", "report", "Re-render a run's report from the run store."),
    "caps": ("runner.cli.caps", "caps", "Show the shared cap ledger: caps, spend and reservations per scope."),
    "budgets": ("runner.cli.budgets", "budgets", "Budgets over time: spent, reserved and left in the current and last windows."),
    "stats": ("runner.cli.stats", "stats", "Runs, success, duration, cost and tokens across runs over time."),
    "eval": ("runner.cli.eval", "eval_", "Run an eval: variants of a task over labelled cases, gated on pass rate."),
    "index": ("runner.cli.index", "index", "Build or refresh knowledge base indexes."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, attr, _ = COMMANDS[cmd_name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(module_name):
                return None
            raise
        command: click.Command = getattr(module, attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_) for name, (_, _, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


EPILOG = f"Exit codes: {exit_codes_text()}."


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="runner")
def cli() -> None:
    """runner: declarative, headless batch runs of LLM agents configured in YAML."""


def main(argv: list[str] | None = None) -> Any:
    """Entry point: run the CLI and map every error to its documented exit code."""
    try:
        code = cli.main(args=argv, prog_name="runner", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show(file=cast(IO[Any], SafeStream(sys.stderr)))  # click types ``file`` as IO
        sys.exit(EXIT_CONFIG)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except RunnerError as exc:
        click.echo(f"error: {safe_text(exc)}", err=True)
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(EXIT_FAILED)
    except OSError as exc:  # a path given on the command line that cannot be read or written
        where = f" {exc.filename}" if exc.filename else ""
        click.echo(safe_text(f"error: cannot use{where}: {exc.strerror or exc}; check the path and its permissions"), err=True)
        sys.exit(EXIT_CONFIG)
    sys.exit(code if isinstance(code, int) else 0)
