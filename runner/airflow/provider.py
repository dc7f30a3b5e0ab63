"""Airflow provider metadata for ``runner`` (the ``apache_airflow_provider`` entry point).

Airflow's ProvidersManager calls :func:`get_provider_info` for every installed distribution
that declares the entry point, validates the dict against its ``provider_info.schema.json``
and requires ``package-name`` to equal the distribution's name ("runner"). This module must
stay importable without Airflow (and cheap): it imports nothing from Airflow.
"""

from __future__ import annotations

from typing import Any

CONN_TYPE = "runner_model"
DEFAULT_CONN_ID = "runner_model_default"
HOOK_CLASS = "runner.airflow.hook.RunnerModelHook"
INTEGRATION = "Runner (LLM agent batch runner)"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("runner")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "0.0.0"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "runner",
        "name": "Runner",
        "description": "Run YAML-configured LLM agent tasks and batches from Airflow: "
        "an operator, a mapped shard operator, a deferrable provider-batch operator and its trigger, "
        "and a model-endpoint connection type.",
        "versions": [_version()],
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["runner.airflow.operator", "runner.airflow.fanout", "runner.airflow.batch_operator"],
            }
        ],
        "extra-links": ["runner.airflow.links.RunnerReportLink"],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["runner.airflow.triggers"]}],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["runner.airflow.hook"]}],
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": HOOK_CLASS,
                "hook-name": "Runner model endpoint",
                "ui-field-behaviour": {
                    "hidden-fields": ["login", "schema", "port", "extra"],
                    "relabeling": {"host": "Base URL", "password": "API key"},
                    "placeholders": {"host": "https://api.openai.com/v1", "password": "sk-..."},
                },
            }
        ],
    }
