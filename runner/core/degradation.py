"""A step that ran degraded: its agent's calls went to its ``fallback_model`` because a budget
with ``on_exceed: degrade`` was past its threshold (:mod:`runner.caps.budget_windows`).

One type from the loop to the step record, the run's report and result, and a batch row
(its journal column and the batch report); :meth:`Degradation.as_dict` and
:meth:`Degradation.from_dict` are its only (de)serialisation
(``report.schema.json#/$defs/degradation``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Degradation:
    """From call ``first_call`` of step ``step`` on, agent ``agent`` called ``fallback_model``
    instead of ``model``: budget ``budget``'s window ``window`` had spent ``threshold`` of its limit or more."""

    step: str
    agent: str
    model: str
    fallback_model: str
    budget: str
    window: str  # the window's span (``2026-12-02T00:00:00+01:00 .. 2026-12-03T00:00:00+01:00``)
    threshold: float  # the share of the limit the window had reached (the budget's first warn_at)
    first_call: int  # the step's model call (1-based) that went to the fallback first

    def describe(self) -> str:
        """One line for a person: which step ran on which model, since when and why."""
        return (
            f"step '{self.step}' (agent '{self.agent}') called {self.fallback_model} instead of {self.model} from its "
            f"call {self.first_call} on: budget '{self.budget}' was past {self.threshold:.0%} of its limit "
            f"(window {self.window})"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Degradation:
        return cls(
            step=str(data["step"]), agent=str(data["agent"]), model=str(data["model"]),
            fallback_model=str(data["fallback_model"]), budget=str(data["budget"]), window=str(data["window"]),
            threshold=float(data["threshold"]), first_call=int(data["first_call"]),
        )  # fmt: skip
