"""Knowledge bases, memory and the search_knowledge data step through the real CLI, against
the loopback model server (chat and embeddings)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.knowledge.documents import write_docs
from tests.support.project import run_cli, tool_call, write_project

pytestmark = pytest.mark.timeout(300)

KNOWLEDGE = """\
apiVersion: runner/v1
kind: Knowledge
name: product_docs
description: The product manuals.
sources: [docs]
chunking: {max_chars: 800, overlap_chars: 100}
"""
AGENT = """\
apiVersion: runner/v1
kind: Agent
name: support
model: {id: gpt-4o-mini}
tools: [search_knowledge, remember, recall]
knowledge: [product_docs]
memory: {scope: task, max_entries: 2}
checks: {evidence: true}
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: answer
inputs:
  question: {type: string}
agent: support
goal: "Answer from the docs, citing them: {{ inputs.question }}"
"""
ANSWER = "Annual plans are refunded pro rata within 30 days of purchase [1] (docs/billing.md — Billing > Refunds)."


def project(root: Path, **extra: str) -> Path:
    write_docs(root / "docs")
    files = {"knowledge.d/docs.yaml": KNOWLEDGE, "agents.d/support.yaml": AGENT, "tasks.d/answer.yaml": TASK}
    return write_project(root, files | extra)


def test_index_builds_then_refreshes_incrementally(tmp_path: Path) -> None:
    root = project(tmp_path)
    first = run_cli(root, None, "index", "product_docs")
    assert first.returncode == 0, first.stderr
    assert "product_docs: 6 added, 0 updated, 0 removed, 0 unchanged" in first.stdout
    assert ".runner/knowledge/product_docs.sqlite3" in first.stdout
    assert "6 unchanged" in run_cli(root, None, "index").stdout
    (root / "docs/billing.md").write_text("# Billing\n\nNo refunds.\n")
    (root / "docs/notes.txt").unlink()
    assert "0 added, 1 updated, 1 removed, 4 unchanged" in run_cli(root, None, "index").stdout


def test_index_names_an_unknown_base_and_unreadable_files(tmp_path: Path) -> None:
    root = project(tmp_path)
    unknown = run_cli(root, None, "index", "product_doc")
    assert unknown.returncode == 2 and "Did you mean 'product_docs'?" in unknown.stderr
    (root / "docs/broken.docx").write_bytes(b"not a zip file")
    broken = run_cli(root, None, "index")
    assert broken.returncode == 1 and "6 added" in broken.stdout
    assert "product_docs: error: docs/broken.docx: broken.docx is not a readable DOCX" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_sources_that_match_no_file_fail_the_index_and_warn_the_run(tmp_path: Path) -> None:
    root = project(tmp_path, **{"knowledge.d/docs.yaml": KNOWLEDGE.replace("[docs]", "[manuals/*.md]")})
    assert run_cli(root, None, "validate").returncode == 0  # the documents may be deployed apart from the YAML
    index = run_cli(root, None, "index")
    assert index.returncode == 1
    assert "product_docs: error: its sources (manuals/*.md) match no .md, .txt, .html, .pdf or .docx file" in index.stderr
    script = {"rules": [{"when": {"last_role": "user"}, "reply": tool_call("search_knowledge", query="refund")}], "fallback": "Not documented."}
    with ScriptedServer(script) as model:
        result = run_cli(root, model, "run", "answer", "-i", "question=q")
        observation = model.requests[1].body["messages"][-1]["content"]
    assert result.returncode == 0, result.stderr
    assert "Nothing in the knowledge base matches" in observation
    (report_dir,) = (root / "reports/answer").iterdir()
    warnings = json.loads((report_dir / "report.json").read_text())["warnings"]
    assert any("knowledge base 'product_docs': its sources (manuals/*.md) match no" in w for w in warnings)


def test_a_run_builds_the_index_on_first_use_and_cites_its_sources(tmp_path: Path) -> None:
    root = project(tmp_path)
    script = {
        "rules": [
            {"when": {"last_role": "user"}, "reply": tool_call("search_knowledge", query="annual plan refund")},
            {"when": {"last_role": "tool"}, "reply": {"content": ANSWER}},
        ],
        "fallback": None,
    }
    with ScriptedServer(script) as model:
        result = run_cli(root, model, "run", "answer", "-i", "question=Can I get a refund on my annual plan?")
        observation = model.requests[1].body["messages"][-1]["content"]
    assert result.returncode == 0, result.stderr
    assert (root / ".runner/knowledge/product_docs.sqlite3").is_file()
    assert observation.startswith("[1] docs/billing.md — Billing > Refunds (lines 7-9)\nAnnual plans are refunded pro rata")
    assert ANSWER in result.stdout
    (report_dir,) = (root / "reports/answer").iterdir()
    record = json.loads((report_dir / "report.json").read_text())
    first = record["sources"][0]
    assert first["kind"] == "knowledge" and first["citation"] == "docs/billing.md — Billing > Refunds (lines 7-9)"
    assert first["collection"] == "product_docs" and first["steps"] == ["main"]
    assert "| 1 | docs/billing.md — Billing > Refunds (lines 7-9) | Refunds | knowledge | main |" in (report_dir / "report.md").read_text()
    assert "docs/billing.md" in (report_dir / "report.html").read_text()


def test_an_answer_the_docs_do_not_support_fails(tmp_path: Path) -> None:
    root = project(tmp_path)
    script = {
        "rules": [{"when": {"last_role": "user"}, "times": 1, "reply": tool_call("search_knowledge", query="refund")}],
        "fallback": "Refunds are possible within 90 days via Stripe.",
    }
    with ScriptedServer(script) as model:
        result = run_cli(root, model, "run", "answer", "-i", "question=refund?", "--no-report")
    assert result.returncode == 1
    assert "not supported by the run's evidence" in result.stderr and "90" in result.stderr and "Stripe" in result.stderr


def test_the_search_knowledge_data_step_feeds_an_agent_with_citations(tmp_path: Path) -> None:
    task = """\
apiVersion: runner/v1
kind: Task
name: lookup
inputs:
  question: {type: string}
knowledge: [product_docs]
pipeline:
  steps:
    - id: passages
      tool: search_knowledge
      args: {query: "{{ inputs.question }}", k: 2}
    - id: reply
      agent: writer
      depends_on: [passages]
      goal: |
        Answer "{{ inputs.question }}" from these passages:
        {% for r in steps.passages.data.results %}[{{ r.rank }}] {{ r.citation }}: {{ r.text }}
        {% endfor %}
"""
    writer = "apiVersion: runner/v1\nkind: Agent\nname: writer\nmodel: {id: gpt-4o-mini}\n"
    root = project(tmp_path, **{"tasks.d/lookup.yaml": task, "agents.d/writer.yaml": writer})
    with ScriptedServer({"fallback": "Port 7443 must be open [1]."}) as model:
        result = run_cli(root, model, "run", "lookup", "-i", "question=What does error E42 mean?")
        goal = model.requests[0].body["messages"][-1]["content"]
    assert result.returncode == 0, result.stderr
    assert "[1] docs/install.md — Installing Widgetizer > Troubleshooting (line 7): Error E42 means" in goal
    (report_dir,) = (root / "reports/lookup").iterdir()
    record = json.loads((report_dir / "report.json").read_text())
    passages = next(s for s in record["steps"] if s["id"] == "passages")
    assert passages["data"]["results"][0]["source"] == "docs/install.md"
    assert record["sources"][0]["steps"] == ["passages"]


def test_memory_persists_across_runs_within_its_scope_and_limit(tmp_path: Path) -> None:
    root = project(tmp_path)
    for note in ("customer acme prefers email", "customer acme is on the team plan", "customer acme renews in march"):
        script = {"rules": [{"when": {"last_role": "user"}, "reply": tool_call("remember", note=note)}], "fallback": "Noted."}
        with ScriptedServer(script) as model:
            assert run_cli(root, model, "run", "answer", "-i", "question=x", "--no-report").returncode == 0
    script = {"rules": [{"when": {"last_role": "user"}, "reply": tool_call("recall", query="acme")}], "fallback": "Done."}
    with ScriptedServer(script) as model:
        assert run_cli(root, model, "run", "answer", "-i", "question=x", "--no-report").returncode == 0
        recalled = model.requests[1].body["messages"][-1]["content"]
    assert "Notes from memory (task:answer)" in recalled
    assert "renews in march" in recalled and "team plan" in recalled and "prefers email" not in recalled  # max_entries: 2
    with sqlite3.connect(root / ".runner/memory.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM chunks WHERE collection = 'task:answer'").fetchone()[0] == 2


def test_embeddings_from_the_loopback_server_at_index_time(tmp_path: Path) -> None:
    with ScriptedServer() as model:
        knowledge = KNOWLEDGE + f"embeddings: {{model: test-embed, base_url: '{model.base_url}', api_key_env: TEST_EMBED_KEY}}\n"
        root = project(tmp_path, **{"knowledge.d/docs.yaml": knowledge})
        result = run_cli(root, None, "index", env={"TEST_EMBED_KEY": "sk-embed-abcdef012345"})
        embeddings = [r for r in model.requests if r.rule == "embeddings"]
    assert result.returncode == 0, result.stderr
    assert embeddings and all(r.path == "/v1/embeddings" and r.auth_present for r in embeddings)
    with sqlite3.connect(root / ".runner/knowledge/product_docs.sqlite3") as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'dimensions'").fetchone()[0] == "256"
    missing = run_cli(root, None, "index", "product_docs")
    assert missing.returncode == 2 and "TEST_EMBED_KEY" in missing.stderr


@pytest.mark.parametrize(
    ("files", "pointer", "message"),
    [
        ({"agents.d/support.yaml": AGENT.replace("[product_docs]", "[product_doc]")}, "/knowledge/0", "Did you mean 'product_docs'?"),
        ({"knowledge.d/docs.yaml": KNOWLEDGE.replace("[docs]", "[../elsewhere]")}, "/sources/0", "leaves the project"),
        ({"knowledge.d/docs.yaml": KNOWLEDGE + "chunking: {max_chars: 10}\n"}, "", "duplicate key"),
        ({"knowledge.d/docs.yaml": KNOWLEDGE.replace("chunking: {max_chars: 800, overlap_chars: 100}", "chunking: {max_chars: 10}")},
         "/chunking/max_chars", "less than the minimum of 200"),
        ({"agents.d/support.yaml": AGENT.replace("knowledge: [product_docs]\n", "")}, "/agent", "has the search_knowledge tool but"),
        ({"agents.d/support.yaml": AGENT.replace("knowledge: [product_docs]", "knowledge: [{name: product_docs, sources: [docs]}]")},
         "/name", "duplicate knowledge base name 'product_docs' (also declared in agents.d/support.yaml at /knowledge/0)"),
        ({"agents.d/support.yaml": AGENT.replace("scope: task", "scope: team")}, "/memory/scope", "is not one of"),
        ({"knowledge.d/docs.yaml": KNOWLEDGE + "embeddings: {provider: openai}\n"}, "/embeddings", "'model' is a required property"),
    ],
)
def test_validate_checks_the_knowledge_keys(tmp_path: Path, files: dict[str, str], pointer: str, message: str) -> None:
    root = project(tmp_path, **files)
    result = run_cli(root, None, "validate")
    assert result.returncode == 2, result.stdout
    assert message in result.stdout, result.stdout
    assert f"error: {pointer}" in result.stdout or f": {pointer}:" in result.stdout or pointer == "", result.stdout


def test_an_inline_knowledge_base_on_a_task_validates_and_runs(tmp_path: Path) -> None:
    task = TASK + "knowledge:\n  - {name: inline_docs, sources: ['docs/*.md'], search: {top_k: 1}}\n"
    agent = AGENT.replace("knowledge: [product_docs]\n", "")
    root = project(tmp_path, **{"tasks.d/answer.yaml": task, "agents.d/support.yaml": agent})
    assert run_cli(root, None, "validate").returncode == 0
    script = {"rules": [{"when": {"last_role": "user"}, "reply": tool_call("search_knowledge", query="refund")}], "fallback": "OK."}
    with ScriptedServer(script) as model:
        result = run_cli(root, model, "run", "answer", "-i", "question=q", "--no-report")
        observation = model.requests[1].body["messages"][-1]["content"]
    assert result.returncode == 0, result.stderr
    assert observation.count("[1] docs/billing.md") == 1 and "[2]" not in observation
