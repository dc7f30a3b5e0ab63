"""Batch progress: a tqdm bar on a terminal, plain periodic log lines otherwise.

The engine calls :meth:`BatchProgress.start` once, :meth:`BatchProgress.row_finished` after
each attempt (``retrying`` for a failure that will be retried, which does not count as
finished), and :meth:`BatchProgress.close` at the end. :func:`make_progress` picks the
bar when the stream is a TTY and log lines (one every ``interval`` seconds, and a last one
at the end) when it is not, e.g. under Airflow or in CI logs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Protocol


class BatchProgress(Protocol):
    """What the engine reports as rows finish."""

    def start(self, total: int, already_finished: int, spend_usd: float = 0.0) -> None:
        """``already_finished`` rows of ``total`` were finished by earlier runs, which spent ``spend_usd``."""

    def row_finished(self, status: str, spend_usd: float) -> None:
        """A row attempt ended with ``status``; ``spend_usd`` is the batch's total spend now."""

    def close(self) -> None: ...


class NoProgress:
    """Reports nothing (tests, ``--quiet``)."""

    def start(self, total: int, already_finished: int, spend_usd: float = 0.0) -> None:
        pass

    def row_finished(self, status: str, spend_usd: float) -> None:
        pass

    def close(self) -> None:
        pass


class _Tally:
    """Counts shared by both renderings."""

    def __init__(self) -> None:
        self.total = 0
        self.finished = 0
        self.finished_here = 0
        self.failed = 0
        self.spend_usd = 0.0

    def add(self, status: str, spend_usd: float) -> None:
        self.spend_usd = spend_usd
        if status == "failed":
            self.failed += 1
        if status in ("done", "failed"):
            self.finished += 1
            self.finished_here += 1


class BarProgress(_Tally):
    """A tqdm bar: rows done, rate, ETA; spend and failures in the postfix."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self._stream = stream
        self._bar = None

    def start(self, total: int, already_finished: int, spend_usd: float = 0.0) -> None:
        from tqdm import tqdm

        self.total, self.finished, self.spend_usd = total, already_finished, spend_usd
        self._bar = tqdm(total=total, initial=already_finished, unit="row", file=self._stream, dynamic_ncols=True)

    def row_finished(self, status: str, spend_usd: float) -> None:
        before = self.finished
        self.add(status, spend_usd)
        if self._bar is not None:
            self._bar.set_postfix(spend=f"${self.spend_usd:.4f}", failed=self.failed, refresh=False)
            self._bar.update(self.finished - before)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class LogProgress(_Tally):
    """A plain line every ``interval`` seconds (and at the end), for logs that are not a terminal."""

    def __init__(self, stream: IO[str], interval: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._stream, self._interval, self._clock = stream, interval, clock
        self._started = self._last = clock()

    def start(self, total: int, already_finished: int, spend_usd: float = 0.0) -> None:
        self.total, self.finished, self.spend_usd = total, already_finished, spend_usd
        self._started = self._last = self._clock()
        self._emit()

    def row_finished(self, status: str, spend_usd: float) -> None:
        self.add(status, spend_usd)
        if self._clock() - self._last >= self._interval:
            self._emit()

    def close(self) -> None:
        self._emit()

    def line(self) -> str:
        """``batch: 120/1000 rows (12.0%), 3 failed, $0.1234 spent, 2.50 rows/s, ETA 5m52s``."""
        elapsed = max(self._clock() - self._started, 1e-9)
        rate = self.finished_here / elapsed
        left = max(self.total - self.finished, 0)
        eta = _duration(left / rate) if rate > 0 else "unknown"
        share = 100.0 * self.finished / self.total if self.total else 100.0
        return (
            f"batch: {self.finished}/{self.total} rows ({share:.1f}%), {self.failed} failed, "
            f"${self.spend_usd:.4f} spent, {rate:.2f} rows/s, ETA {eta}"
        )

    def _emit(self) -> None:
        self._last = self._clock()
        print(self.line(), file=self._stream, flush=True)


def make_progress(stream: IO[str] | None = None, *, interval: float = 30.0) -> BatchProgress:
    """A bar on a terminal, log lines every ``interval`` seconds otherwise."""
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return BarProgress(stream)
    return LogProgress(stream, interval)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
