"""The scripts the benchmarks write out and run in other processes import what runner has.

They are text (``bench/caps_overshoot.py``'s ``SHARD``), so neither ruff nor mypy sees a name
they import go away; a refactor that removed one (``FanoutOptions``) broke the bench's budget row.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fanout_shard_script_of_caps_overshoot_imports_what_runner_has() -> None:
    imports = [line for line in _bench("caps_overshoot").SHARD.splitlines() if line.startswith("from runner")]
    assert imports
    exec("\n".join(imports), {})
