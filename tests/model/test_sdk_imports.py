"""The openai adapter loads nothing the SDK itself does not: classifying transport failures
looks at the transport the SDK imported, not at every HTTP library installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys, openai
before = set(sys.modules)
import runner.model.openai_client
from runner.model.openai_faults import _not_sent
added = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('httpx', 'httpx2', 'rich', 'pygments', 'click'))
print(json.dumps({"added": added, "classes": sorted({c.__module__.split('.')[0] for c in _not_sent()})}))
"""


def test_the_adapter_imports_no_second_transport() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    found = json.loads(done.stdout)
    assert found["added"] == []
    assert found["classes"] in (["httpx2"], ["httpx"])  # the SDK's own transport, and only it
