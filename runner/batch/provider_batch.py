"""Names ``runner.airflow`` imports from here (its provider batch trigger's polling); they live
in :mod:`runner.batch.provider_api` now."""

from __future__ import annotations

from runner.batch.provider_api import FINISHED, PollPolicy

__all__ = ["FINISHED", "PollPolicy"]
