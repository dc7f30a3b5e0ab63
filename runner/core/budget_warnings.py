"""A budget window passing one of its ``warn_at`` shares: the one shape every layer hands on.

The settlement that takes a window past a share (:mod:`runner.caps.budget_windows`, from the
ledger's figures before and after it, in one transaction, so each crossing is told once however
many processes spend in the window) makes a :class:`BudgetWarning`. The run shows its
:attr:`~BudgetWarning.message` among its warnings and emits it as a ``budget_warning`` event;
the run store keeps it (``runner stats``), the batch journal with the row whose call crossed it
(the batch report), and a budget's ``deliver:`` targets are sent it. Serialised in one place
(:meth:`BudgetWarning.as_dict`, :meth:`BudgetWarning.from_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BudgetWarning:
    """Budget ``budget``'s window ``window`` (its ledger key; ``scope`` says it in words) spent
    past ``threshold`` (a fraction) of its ``cap`` (``max_cost_usd`` or ``max_tokens``) of
    ``limit``: ``spent`` is the window's figure once past it."""

    budget: str
    window: str
    scope: str
    cap: str
    threshold: float
    limit: float
    spent: float

    @property
    def figure(self) -> str:
        """What the cap limits: ``cost_usd`` or ``tokens``."""
        return self.cap.removeprefix("max_")

    @property
    def message(self) -> str:
        """``budget 'daily' (day window ...) passed 80% of max_cost_usd=5 (cost_usd=4.01)``."""
        return f"{self.scope} passed {self.threshold:.0%} of {self.cap}={self.limit:g} ({self.figure}={round(self.spent, 8):g})"

    def as_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "window": self.window, "scope": self.scope, "cap": self.cap,
                "threshold": self.threshold, "limit": self.limit, "spent": round(self.spent, 8), "message": self.message}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BudgetWarning:
        return cls(str(data["budget"]), str(data["window"]), str(data["scope"]), str(data["cap"]),
                   float(data["threshold"]), float(data["limit"]), float(data["spent"]))  # fmt: skip
