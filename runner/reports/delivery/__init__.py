"""Delivering a written report: email (SMTP), webhook (Slack-compatible JSON), copy (fsspec).

Delivery runs after the report is written and never changes the run's result: each target
ends ``delivered`` or ``failed`` (:class:`~runner.reports.delivery.outcome.DeliveryOutcome`),
recorded in the run record and the run store. A resumed run (same ``--run-id``) sends only
what did not arrive. Secrets (SMTP password, webhook URL, storage keys) come from named
environment variables and are never written into a message, a record or a log.
"""
