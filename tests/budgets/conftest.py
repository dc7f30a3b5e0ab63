"""The budget tests' servers for deliveries: the delivery tests' SMTP server (STARTTLS, login,
a self-signed certificate) and loopback webhook receiver, as fixtures here too."""

from tests.reports.test_delivery import certificate, hooks, smtp  # noqa: F401 - fixtures, found by name
