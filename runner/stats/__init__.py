"""``runner stats``: how runs went across time, from the run store.

:mod:`~runner.stats.window` parses the time window, :mod:`~runner.stats.compute` turns the
store's rows into :class:`~runner.stats.compute.Stats` (per task, agent, model and tool, a
trend per task and the window before for comparison), :mod:`~runner.stats.render` prints it
as text or JSON and :mod:`~runner.stats.page` as an HTML page with small trend charts.
"""
