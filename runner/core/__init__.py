"""The shared vocabulary every layer speaks: usage, statuses, step records, call entries,
run results and the small protocols (event sink, rate gate) a run is handed.

This package imports nothing from the rest of ``runner`` except :mod:`runner.errors`, so
any layer may import it and no cycle can run through it.
"""
