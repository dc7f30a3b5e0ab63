"""What a deferred provider batch needs besides its ids: where its key is, and its deadlines.

* :func:`key_source`: the endpoint a batch was submitted to and *where* its key came from
  (the ``runner_model`` connection, or the environment variable the agent's model names),
  found by resolving the endpoint exactly as the submission did. The trigger stores that,
  never the key: Airflow keeps a trigger's arguments in its database.
* :func:`cancel_at`: when the batch's wall cap (``max_wall_seconds``, counted from the
  batch's start, across tries) is reached, so the trigger cancels what is still out.
* :func:`defer_timeout`: how long Airflow may keep the task deferred: to the try's
  ``execution_timeout`` (Airflow does not apply it to a deferral itself), and to the wall
  cap plus :data:`CANCEL_GRACE_SECONDS` for the provider to confirm a cancel.

No Airflow imports here.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runner.endpoints import DEFAULT_BASE_URL, STANDARD_KEY_VARIABLES

if TYPE_CHECKING:
    from runner.batch.request import BatchRequest
    from runner.config.project import Project
    from runner.config.specs import TaskSpec

CANCEL_GRACE_SECONDS = 900.0
"""How long after the wall cap the provider has to confirm a cancel before Airflow times the task out."""


@dataclass(frozen=True)
class KeySource:
    """The endpoint a provider batch is at, and where the triggerer finds its key (at most one of
    ``conn_id`` and ``api_key_env``; neither: the endpoint takes no key)."""

    base_url: str
    conn_id: str | None = None
    api_key_env: str | None = None


def key_source(project: Project, task: TaskSpec, request: BatchRequest, conn_id: str | None) -> KeySource:
    """Where the key of ``request``'s endpoint comes from; ``conn_id`` is the connection whose
    password is ``request.api_key`` (when one applied). Compares keys in this process only."""
    from runner.batch.batch_api import batch_api_agent as single_request_agent
    from runner.model.factory import resolve_endpoint

    model = single_request_agent(project, task).model
    endpoint = resolve_endpoint(
        model, model_override=request.model_override, base_url_override=request.base_url_override,
        api_key=request.api_key,
    )  # fmt: skip
    base_url = endpoint.base_url or DEFAULT_BASE_URL
    if conn_id and request.api_key and endpoint.api_key == request.api_key:
        return KeySource(base_url, conn_id=conn_id)
    for variable in (model.api_key_env, *STANDARD_KEY_VARIABLES):
        if variable and os.environ.get(variable) == endpoint.api_key:
            return KeySource(base_url, api_key_env=variable)
    return KeySource(base_url)  # no candidate was chosen: the endpoint takes no key (a local server)


def cancel_at(max_wall_seconds: float | None, age_seconds: float, now: float) -> float | None:
    """The epoch second the batch's wall cap is reached (``None`` without one)."""
    if max_wall_seconds is None:
        return None
    return now + max_wall_seconds - age_seconds


def defer_timeout(
    try_deadline: dt.datetime | None, cancel_epoch: float | None, now: dt.datetime
) -> dt.timedelta | None:
    """How long the task may stay deferred (``None``: no bound); raises :class:`DeadlinePassed`
    when the try's ``execution_timeout`` has already passed."""
    bounds = []
    if try_deadline is not None:
        if try_deadline <= now:
            raise DeadlinePassed(f"execution_timeout reached at {try_deadline.isoformat(timespec='seconds')}")
        bounds.append(try_deadline - now)
    if cancel_epoch is not None:
        # the grace counts from the cancel, or from now when the cap passed before this deferral
        bounds.append(dt.timedelta(seconds=max(cancel_epoch - now.timestamp(), 0.0) + CANCEL_GRACE_SECONDS))
    return min(bounds) if bounds else None


class DeadlinePassed(Exception):
    """The try's ``execution_timeout`` passed while its batch was out at the provider."""
