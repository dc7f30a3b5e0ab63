"""The few Airflow names whose home moved between Airflow 3.1 and 3.2+ (task SDK 1.1 -> 1.2+).

Everything else is imported from ``airflow.sdk`` directly. On Airflow >= 3.2 these
exceptions live in ``airflow.sdk.exceptions``; the 3.1 task SDK still used the ones in
``airflow.exceptions`` (a connection that is not defined raises that module's
``AirflowNotFoundException`` there), so on 3.1 they must come from there to be caught.
"""

from __future__ import annotations

try:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException
except ImportError:  # pragma: no cover - Airflow 3.1 (task SDK 1.1)
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
    )

__all__ = ["AirflowException", "AirflowFailException", "AirflowNotFoundException"]
