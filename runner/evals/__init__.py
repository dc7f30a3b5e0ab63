"""``runner eval``: regression tests for tasks (``kind: Eval`` in ``evals.d/``).

Each variant of an eval (:mod:`~runner.evals.variants`) runs the task over the dataset
through the batch engine (its caps, rate limits, retries and resume); each case's result is
checked against its assertions (:mod:`~runner.evals.assertions`, expected values from the
dataset's columns: :mod:`~runner.evals.cases`); the variants are compared with each other
and with a stored baseline (:mod:`~runner.evals.results`), and rendered as Markdown, HTML
and JSON (:mod:`~runner.evals.report`). :func:`~runner.evals.run.run_eval` ties them together.
"""
