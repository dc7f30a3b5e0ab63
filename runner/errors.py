"""Exception hierarchy. Every exception a user can cause carries its exit code.

One place (``runner.cli.main``) turns these into process exits; nothing else calls
``sys.exit``. Messages say what went wrong, where, and how to fix it.

Exit codes (documented in the README):

=====  =========================================================
 0     completed
 1     failed (model, tool or runtime failure; batch with failed rows)
 2     configuration or usage error (invalid YAML, bad flag, bad input)
 3     stopped by a cap (steps, tool calls, tokens, USD, wall time)
 4     stuck (the agent repeated itself without progress)
 130   interrupted (Ctrl-C)
=====  =========================================================
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_CAPPED = 3
EXIT_STUCK = 4
EXIT_INTERRUPTED = 130


class RunnerError(Exception):
    """Base class: an error with a message for a person and a process exit code."""

    exit_code: int = EXIT_FAILED


class ConfigError(RunnerError):
    """The configuration (YAML, schema, cross references) is invalid.

    ``problems`` holds every problem found, so they can be reported all at once.
    """

    exit_code = EXIT_CONFIG

    def __init__(self, problems: list[Problem] | str):
        if isinstance(problems, str):
            problems = [Problem(file="", line=0, column=0, pointer="", message=problems)]
        self.problems = problems
        super().__init__("\n".join(p.render() for p in problems))


class UsageError(RunnerError):
    """A command-line flag or input value is invalid."""

    exit_code = EXIT_CONFIG


class OutputLockLost(UsageError):
    """A batch lost its lock on its output while it ran (its store session was ended, its lock
    object was taken over) and another batch held the output meanwhile, or it can no longer
    tell. The batch stops before writing the output; its completed rows stay in its journal.
    Exit 2, as for the refusal of a second batch at the start."""


class JournalLockLost(UsageError):
    """A batch lost its journal's lock while it ran (its PostgreSQL session was ended or its
    connection dropped) and another batch process took the journal meanwhile. The batch stops
    instead of writing a journal another batch writes; the rows it recorded stay in it. Exit 2,
    as for the refusal of a second batch at the start."""


class InputError(RunnerError):
    """A task input (CLI ``--input`` or a batch row) is missing or of the wrong type."""

    exit_code = EXIT_CONFIG


class StoreUnavailable(RunnerError):
    """The shared database (``RUNNER_STORE_URL``) cannot be reached; a later try may succeed."""

    exit_code = EXIT_FAILED


class StoreDamaged(RunnerError):
    """A local store file (run store, batch journal) cannot be used as it is: damaged, not a
    database, a directory, read-only, or written by a newer runner. Retrying cannot help; the
    message names the file and what to do, and nothing deletes it."""

    exit_code = EXIT_CONFIG


class CapReached(RunnerError):
    """A cap would be exceeded by the next model call; the run stops before making it."""

    exit_code = EXIT_CAPPED

    def __init__(self, cap: str, limit: float, observed: float, scope: str = "run", *, next_call: float | None = None,
                 held: float = 0.0, budget: str | None = None, reopens: datetime | None = None):
        """``observed`` is what the scope has spent; ``next_call`` (when the cap is not reached yet) the worst
        case of the call that would pass it, and ``held`` what calls in flight hold meanwhile. ``budget``
        names the budget over time (``kind: Budget``) whose window ``scope`` is, when it is one: such a
        stop spans every run and batch until the window rolls over (``reopens``, the window's end in the
        budget's time zone, which the message states) or the limit is raised."""
        self.cap, self.limit, self.observed, self.scope = cap, limit, observed, scope
        self.next_call, self.held, self.budget, self.reopens = next_call, held, budget, reopens
        figure = cap.removeprefix("max_")
        if next_call is None:
            message = f"{scope} cap {cap}={_fmt(limit)} reached ({figure}={_fmt(observed)})"
        else:
            over = round(observed + held + next_call - limit, 8)
            in_flight = f", {_fmt(round(held, 8))} held by calls in flight" if held else ""
            message = (f"{scope} cap {cap}={_fmt(limit)}: the next call's worst case ({figure}={_fmt(next_call)}) "
                       f"would pass it by {_fmt(over)} ({figure}={_fmt(observed)} spent{in_flight})")
        if reopens is not None:
            message += f"; the window reopens at {reopens.isoformat()}"
        super().__init__(message)


class ModelError(RunnerError):
    """The model endpoint failed in a way retries could not fix.

    ``kind`` classifies the failure: ``rate_limited``, ``server_error``, ``timeout``,
    ``connection``, ``invalid_response``, ``auth``, ``bad_request``, ``not_found``.
    """

    exit_code = EXIT_FAILED

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(f"model endpoint error ({kind}): {message}")


class ToolFailure(RunnerError):
    """A tool could not do what was asked. Inside the loop this becomes an observation."""

    exit_code = EXIT_FAILED


class InvalidToolCall(ToolFailure):
    """The model's call itself was malformed: an unknown tool, arguments that are not a JSON
    object, or arguments that do not match the tool's schema. Counts toward
    ``max_invalid_calls``."""


class ArgumentsRefused(InvalidToolCall):
    """Arguments that do not match the tool's schema. The message (for a model) repeats the
    schema; :attr:`short` names only the arguments, the values and what was expected (for a
    person reading why a declared tool step failed)."""

    def __init__(self, message: str, short: str):
        super().__init__(message)
        self.short = short


class WorkspaceTampered(RunnerError):
    """An entry of the workspace is not what the runner put there (a link, FIFO, device,
    directory or hard-linked file in place of a task file), or the workspace cannot be
    wiped safely. The run stops; nothing is followed. Retrying the same run cannot help."""

    exit_code = EXIT_FAILED


class SandboxUnavailable(RunnerError):
    """No OS sandbox works on this host and the configuration did not opt out."""

    exit_code = EXIT_CONFIG


@dataclass(frozen=True)
class Problem:
    """One configuration problem, located in a file."""

    file: str
    line: int
    column: int
    pointer: str
    message: str
    severity: str = "error"

    def render(self) -> str:
        """``FILE:LINE:COL: error: /pointer: message``; just the message when no file is known
        (the CLI prefixes ``error:`` itself)."""
        if not self.file:
            return self.message
        return f"{self.file}:{self.line}:{self.column}: {self.severity}: {self.pointer or '/'}: {self.message}"

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "pointer": self.pointer,
            "severity": self.severity,
            "message": self.message,
        }


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``". Did you mean 'x'?"`` for the closest of ``choices``, or ``""``."""
    import difflib  # only when a name was not found

    matches = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f". Did you mean '{matches[0]}'?" if matches else ""


def _fmt(value: float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.6g}"
    return str(int(value)) if isinstance(value, float) else str(value)
