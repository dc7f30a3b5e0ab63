"""What a task's ``report:`` says beyond its title: column labels and formats, and where
the finished report is delivered (``deliver:``). Built from validated documents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

ColumnKind = Literal["number", "integer", "currency", "percent", "date", "text"]
DeliveryKind = Literal["email", "webhook", "copy"]
DELIVERY_KINDS: tuple[DeliveryKind, ...] = ("email", "webhook", "copy")
DeliveryWhen = Literal["always", "success", "failure"]
DELIVERY_TEMPLATE_ROOTS = ("status", "exit_code")
"""What a delivery's templates (subject, link, copy target) read besides a goal's variables:
the run's status and exit code, known once the report is written."""
WARNING_TEMPLATE_ROOTS = ("budget", "warning", "run_id", "task", "today")
"""What the templates of a budget's delivery read: the budget's name, the warning
(:meth:`~runner.core.budget_warnings.BudgetWarning.as_dict`), the run that met it, its task, the date."""


@dataclass(frozen=True)
class ColumnFormat:
    """How a table column is shown: its header and how its numbers are written."""

    label: str | None = None
    format: ColumnKind | None = None
    decimals: int | None = None
    currency: str = "USD"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ColumnFormat:
        return cls(data.get("label"), data.get("format"), data.get("decimals"), data.get("currency", "USD"))


@dataclass(frozen=True)
class Delivery:
    """One delivery target of a report: ``kind`` and its settings (the YAML mapping, as
    validated by ``task.schema.json#/$defs/<kind>``). ``name`` identifies it in the record,
    so a resumed run knows what was already delivered."""

    name: str
    kind: DeliveryKind
    settings: Mapping[str, Any] = field(default_factory=dict)
    pointer: str = ""  # where it is declared, for messages
    when: DeliveryWhen = "always"

    def wanted(self, status: str) -> bool:
        """Whether a run that ended ``status`` is delivered here (``when``)."""
        return self.when == "always" or (self.when == "success") == (status == "completed")


def build_columns(data: Mapping[str, Any] | None) -> dict[str, ColumnFormat]:
    return {name: ColumnFormat.from_dict(spec) for name, spec in (data or {}).items()}


def build_deliveries(items: list[Mapping[str, Any]] | None, base: str = "/report/deliver") -> tuple[Delivery, ...]:
    """The delivery targets at ``base`` (a task's report, a budget's warnings), in order. A
    target without ``name`` is named after its kind."""
    deliveries = []
    for index, item in enumerate(items or ()):
        kind = next(k for k in DELIVERY_KINDS if k in item)
        when = item.get("when", "always")
        deliveries.append(Delivery(str(item.get("name", kind)), kind, dict(item[kind]), f"{base}/{index}", when))
    return tuple(deliveries)


def repeated_names(targets: Sequence[Delivery]) -> list[tuple[int, int]]:
    """``(index, index of the first)`` of each delivery named as an earlier one was (a
    record keeps each delivery's outcome by name, so names must be distinct)."""
    first: dict[str, int] = {}
    return [(i, first[t.name]) for i, t in enumerate(targets) if first.setdefault(t.name, i) != i]
