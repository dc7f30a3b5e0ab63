"""What ``runner.airflow`` imports from here (the agent whose endpoint a deferred provider
batch is at); the checks themselves are :func:`runner.batch.batch_api.check_batch_api`."""

from __future__ import annotations

from runner.batch.batch_api import batch_api_agent as single_request_agent

__all__ = ["single_request_agent"]
