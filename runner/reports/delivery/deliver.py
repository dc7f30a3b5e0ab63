"""Deliver a written report to each target of ``report.deliver``, and record the outcomes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.config.report_options import Delivery
from runner.core.report_formats import CHARTS, NAMES
from runner.files import write_text_atomic
from runner.redact import redact_secrets
from runner.reports.delivery import copy, email, webhook
from runner.reports.delivery.outcome import DeliveryFailed, DeliveryOutcome, Package
from runner.reports.record import validate_record

Render = Callable[[str], str]
"""Renders a template field (subject, link, copy target) with the run's template context."""

DEFAULT_COPY = (*NAMES, CHARTS)


def deliver_all(
    targets: Sequence[Delivery],
    package: Package,
    render: Render,
    *,
    earlier: Mapping[str, DeliveryOutcome],
    secrets: Sequence[str],
    root: Path,
    now: Callable[[], str],
) -> list[DeliveryOutcome]:
    """Deliver to every target; one outcome each, in order. A target an earlier attempt of
    the run delivered is not sent again. Failures are outcomes, never exceptions."""
    outcomes = []
    for target in targets:
        before = earlier.get(target.name)
        if before is not None and before.status == "delivered" and before.kind == target.kind:
            outcomes.append(DeliveryOutcome.from_dict({**before.as_dict(), "earlier_attempt": True}))
            continue
        outcomes.append(_deliver_one(target, package, render, secrets, root, now))
    return outcomes


def _deliver_one(target: Delivery, package: Package, render: Render, secrets: Sequence[str], root: Path, now: Callable[[], str]) -> DeliveryOutcome:
    where = ""
    try:
        settings, where = _resolved(target.kind, target.settings, package, render, root)
        attempts, files = _send(target.kind, settings, package, render)
    except DeliveryFailed as failure:
        return DeliveryOutcome(
            target.name, target.kind, "failed", redact_secrets(where, secrets), failure.attempts,
            redact_secrets(str(failure), secrets), failure.kind, now(),
        )  # fmt: skip
    return DeliveryOutcome(target.name, target.kind, "delivered", redact_secrets(where, secrets), attempts, at=now(), files=tuple(files))


def _resolved(kind: str, settings: Mapping[str, Any], package: Package, render: Render, root: Path) -> tuple[dict[str, Any], str]:
    """The settings with templates rendered, paths and secrets resolved; and where it goes (no secrets)."""
    resolved = dict(settings)
    if kind == "email":
        smtp = dict(settings["smtp"])
        if smtp.get("ca_file"):
            smtp["ca_file"] = str(root / smtp["ca_file"])
        resolved["smtp"] = smtp
        resolved["subject"] = _rendered(render, settings.get("subject")) or f"{package.title} [{package.status}]"
        return resolved, email.describe(resolved)
    if kind == "webhook":
        resolved["url"] = settings.get("url") or _variable(package.environ, settings["url_env"], "the webhook URL")
        resolved["link"] = _rendered(render, settings.get("link"))
        return resolved, webhook.describe(resolved["url"])
    resolved["to"] = _rendered(render, settings["to"]) or ""
    if ".." in resolved["to"].replace("\\", "/").split("/"):
        raise DeliveryFailed(f"the copy target {copy.describe(resolved['to'])} climbs out of its directory ('..')", "config")
    return resolved, copy.describe(resolved["to"])


def _send(kind: str, settings: Mapping[str, Any], package: Package, render: Render) -> tuple[int, list[str]]:
    """Send one delivery: (attempts, files sent)."""
    if kind == "email":
        return 1, email.send_email(settings, package, settings["subject"])
    if kind == "webhook":
        body = webhook.payload(package, settings["link"])
        return webhook.post_webhook(settings["url"], body, retries=int(settings.get("retries", 3)), timeout=float(settings.get("timeout_seconds", 30))), []
    files = package.chosen(settings.get("formats"), DEFAULT_COPY)
    return 1, copy.copy_files(settings["to"], files, package.environ, settings.get("options_env"), settings.get("timeout_seconds"))


def _rendered(render: Render, template: str | None) -> str | None:
    from runner.config.template_types import TemplateError

    if not template:
        return None
    try:
        return render(template)
    except TemplateError as error:
        raise DeliveryFailed(str(error), "template") from None


def _variable(environ: Mapping[str, str], name: str, what: str) -> str:
    value = environ.get(name, "")
    if not value:
        raise DeliveryFailed(f"the environment variable {name} ({what}) is not set", "config")
    return value


def earlier_outcomes(record_json: str | None) -> dict[str, DeliveryOutcome]:
    """The deliveries an earlier attempt of a run recorded (its stored record), by name."""
    if not record_json:
        return {}
    try:
        stored = json.loads(record_json).get("deliveries") or []
    except (ValueError, AttributeError):
        return {}
    return {d["name"]: DeliveryOutcome.from_dict(d) for d in stored if isinstance(d, dict) and "name" in d}


def record_deliveries(report_dir: Path, outcomes: Iterable[DeliveryOutcome]) -> None:
    """Add the outcomes to the written report.json (the other files were delivered as they are)."""
    path = report_dir / "report.json"
    if not path.is_file():
        return
    document = json.loads(path.read_text("utf-8"))
    document["deliveries"] = [o.as_dict() for o in outcomes]
    validate_record(document)
    write_text_atomic(path, json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
