"""A plain OpenAI-compatible server that is not ours: llama.cpp's own (``llama-cpp-python[server]``),
serving the embedded SmolLM2 GGUF, driven by the real CLI.

The model gets the ``default`` profile (``max_tokens``, no strict response format, which
llama.cpp's server does not take). SmolLM2-135M cannot drive tools nor keep to a JSON schema
(the shipped triage task fails its schema check on it), so the task here is tool-less prose.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.project import run_cli, write_project

PROJECT = {
    "agents.d/writer.yaml": """\
apiVersion: runner/v1
kind: Agent
name: writer
model: {id: smollm2-135m, max_tokens: 12, temperature: 0, retries: 0, timeout_seconds: 600}
system_prompt: You answer in one short sentence.
""",
    "tasks.d/greet.yaml": "apiVersion: runner/v1\nkind: Task\nname: greet\nagent: writer\ngoal: Say hello to the team.\n",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    pytest.importorskip("llama_cpp.server.app", reason="llama.cpp's server not installed: pip install 'llama-cpp-python[server]'")
    from runner.model.local import find_gguf

    try:
        gguf = find_gguf()
    except Exception as exc:  # any reason the weights are missing skips the test
        pytest.skip(f"SmolLM2 GGUF not available: {exc}")
    port = free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", "2048", "--model_alias", "smollm2-135m"]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(base_url + "/models", timeout=5) as answer:
                    if json.loads(answer.read())["data"]:
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("llama.cpp's server did not start")
                time.sleep(0.5)
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_tool_less_task_runs_against_llama_cpps_own_server(tmp_path: Path, llama_server: str) -> None:
    root = write_project(tmp_path / "project", PROJECT)
    done = run_cli(root, None, "run", "greet", "--base-url", llama_server, timeout=900)
    assert done.returncode == 0, done.stderr
    (found,) = root.glob("reports/**/report.json")
    record = json.loads(found.read_text())
    assert isinstance(record["final_output"], str) and record["final_output"].strip()
    assert record["usage"]["total"]["output_tokens"] > 0  # usage as llama.cpp reports it
