"""What many test suites share: project builders, the CLI as a process, PostgreSQL fault injection."""
