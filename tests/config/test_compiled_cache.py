"""The compiled project cache: an unchanged project loads from it, anything else is ignored and
rebuilt, and the checks that depend on the file system hold with or without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.config import compiled
from runner.config.compiled import CACHE_FILE, cache_key, read_cache
from runner.config.project import _read_files, config_files, load_project

REPO = Path(__file__).resolve().parents[2]

AGENT = """\
apiVersion: runner/v1
kind: Agent
name: helper
model: {id: gpt-4o-mini, max_tokens: 100}
system_prompt: {file: ../prompts/system.md}
tools: [calculator, {name: python, settings: {timeout_seconds: 5}}, word_count]
caps: {max_cost_usd: 0.05}
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: ask
inputs:
  question: {type: string}
agent: helper
goal: "Answer: {{ inputs.question }}"
workspace: {files: [data/in.csv]}
"""
TOOL = """\
apiVersion: runner/v1
kind: Tool
name: word_count
description: Count words in a workspace file.
type: shell
shell: {command: [wc, -w, "{path}"]}
parameters:
  path: {type: string, description: File in the workspace}
"""
PRICES = """\
apiVersion: runner/v1
kind: Prices
name: mine
models:
  my-model: {input_per_mtok: 1.0, output_per_mtok: 2.0, cached_input_per_mtok: 0.25}
"""


@pytest.fixture(autouse=True)
def own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test has its own per-user key directory."""
    home = tmp_path / "cache-home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for relative, text in {
        "agents.d/helper.yaml": AGENT,
        "tasks.d/ask.yaml": TASK,
        "tools.d/wc.yaml": TOOL,
        "agents.d/prices.yaml": PRICES,
        "prompts/system.md": "You help, carefully.\n",
        "data/in.csv": "a,b\n1,2\n",
    }.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / ".runner").mkdir()  # as a first run leaves it
    return root


def cache_file(root: Path) -> Path:
    return root / CACHE_FILE


def rewrite_body(root: Path, change: dict[str, object]) -> None:
    """Edit the cached payload the way someone without the key would: keep the old MAC."""
    wrapper = json.loads(cache_file(root).read_text())
    body = json.loads(wrapper["body"])
    body.update(change)
    wrapper["body"] = json.dumps(body)
    cache_file(root).write_text(json.dumps(wrapper))


def snapshot(root: Path, *, use_cache: bool) -> dict[str, object]:
    project, problems = load_project(root, use_cache=use_cache)
    assert problems == []
    documents = {key: (doc.path, doc.data, doc.source) for key, doc in project.documents.items()}
    return {
        "agents": project.agents, "tasks": project.tasks, "tools": project.tools, "prices": project.prices,
        "task_files": project.task_files, "documents": documents,
    }  # fmt: skip


def test_a_clean_load_writes_a_private_cache(project: Path) -> None:
    load_project(project)
    path = cache_file(project)
    assert path.is_file()
    assert path.stat().st_mode & 0o777 == 0o600
    files, _ = _read_files(config_files(project.resolve()), project.resolve())
    assert read_cache(project.resolve(), cache_key(project.resolve(), files)) is not None


def test_loading_never_adds_a_directory_to_a_project(project: Path) -> None:
    """``runner validate`` and ``runner list`` leave a project as they found it: the cache
    waits for the ``.runner/`` a first run makes."""
    (project / ".runner").rmdir()
    for use_cache in (True, False, True):
        assert load_project(project, use_cache=use_cache)[1] == []
    assert not (project / ".runner").exists()


def test_the_cached_project_equals_the_checked_one(project: Path) -> None:
    checked = snapshot(project, use_cache=False)
    cached = snapshot(project, use_cache=True)
    assert cached == checked
    assert cached["prices"]["my-model"].cached_input_per_mtok == 0.25  # type: ignore[index]


def test_an_unchanged_project_loads_without_parsing_or_validating(project: Path) -> None:
    load_project(project)
    code = (
        "import sys\nfrom pathlib import Path\nfrom runner.config.project import load_project\n"
        f"project, problems = load_project(Path({str(project)!r}))\n"
        "assert not problems and project.agents['helper'].system_prompt == 'You help, carefully.\\n'\n"
        "print(sorted(m for m in ('yaml', 'jsonschema', 'runner.config.crossref', 'runner.config.schema') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "[]"


def test_a_changed_file_is_loaded_and_checked_again(project: Path) -> None:
    load_project(project)
    agent = project / "agents.d/helper.yaml"
    agent.write_text(AGENT.replace("max_tokens: 100", "max_tokens: 200"))
    loaded, problems = load_project(project)
    assert problems == [] and loaded.agents["helper"].model.max_tokens == 200
    agent.write_text(AGENT.replace("max_tokens: 100", "max_tokens: -1"))
    _, problems = load_project(project)
    assert ("agents.d/helper.yaml", "/model/max_tokens") in [(p.file, p.pointer) for p in problems]


def test_a_new_or_removed_file_changes_the_key(project: Path) -> None:
    load_project(project)
    (project / "tasks.d/other.yaml").write_text(TASK.replace("name: ask", "name: other"))
    loaded, _ = load_project(project)
    assert set(loaded.tasks) == {"ask", "other"}
    (project / "tasks.d/other.yaml").unlink()
    loaded, _ = load_project(project)
    assert set(loaded.tasks) == {"ask"}


def test_a_changed_prompt_file_is_read_again(project: Path) -> None:
    load_project(project)
    (project / "prompts/system.md").write_text("You help, briefly.\n")
    loaded, problems = load_project(project)
    assert problems == [] and loaded.agents["helper"].system_prompt == "You help, briefly.\n"


def test_a_prompt_file_swapped_for_a_link_out_of_the_project_is_refused(project: Path, tmp_path: Path) -> None:
    load_project(project)
    secret = tmp_path / "secret.txt"
    secret.write_text("You help, carefully.\n")  # same text: only where it lives differs
    prompt = project / "prompts/system.md"
    prompt.unlink()
    prompt.symlink_to(secret)
    _, problems = load_project(project)
    assert [p.pointer for p in problems] == ["/system_prompt/file"]


def test_a_prompt_file_made_a_hard_link_is_refused(project: Path, tmp_path: Path) -> None:
    load_project(project)
    outside = tmp_path / "outside.md"
    os.link(project / "prompts/system.md", outside)
    _, problems = load_project(project)
    assert [p.pointer for p in problems] == ["/system_prompt/file"]


def test_a_workspace_file_swapped_for_a_link_out_of_the_project_is_refused(project: Path, tmp_path: Path) -> None:
    load_project(project)
    data = project / "data/in.csv"
    data.unlink()
    data.symlink_to(tmp_path / "cache-home")
    _, problems = load_project(project)
    assert [p.pointer for p in problems] == ["/workspace/files/0"]


def test_a_template_error_is_never_cached(project: Path) -> None:
    (project / "tasks.d/ask.yaml").write_text(TASK.replace("inputs.question", "inputs.questoin"))
    for _ in range(2):
        _, problems = load_project(project)
        assert [p.pointer for p in problems] == ["/goal"]
    assert not cache_file(project).exists()


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"\x00\xff garbage",
        b'{"format": 1, "mac": "00", "body": "{}"}',
        b"[1, 2, 3]",
        b'{"format": 1, "mac": 5, "body": null}',
        b'{"format": NaN}',
        b"[" * 200_000,
        b'{"format": 1, "mac": "00", "body": "' + b"[" * 200_000 + b'"}',
    ],
    ids=["empty", "binary", "bad-mac", "list", "wrong-types", "nan", "deep", "deep-body"],
)
def test_a_damaged_cache_is_ignored_and_rebuilt(project: Path, damage: bytes) -> None:
    checked = snapshot(project, use_cache=False)
    cache_file(project).write_bytes(damage)
    cache_file(project).chmod(0o600)
    assert snapshot(project, use_cache=True) == checked
    assert json.loads(cache_file(project).read_text())["format"] == compiled.FORMAT  # rebuilt


def test_a_truncated_cache_is_ignored(project: Path) -> None:
    load_project(project)
    text = cache_file(project).read_bytes()
    cache_file(project).write_bytes(text[: len(text) // 2])
    loaded, problems = load_project(project)
    assert problems == [] and loaded.agents["helper"].system_prompt == "You help, carefully.\n"


def test_an_edited_cache_is_not_trusted(project: Path) -> None:
    load_project(project)
    wrapper = json.loads(cache_file(project).read_text())
    body = json.loads(wrapper["body"])
    helper = next(d for d in body["documents"] if d["data"].get("name") == "helper")
    helper["data"]["model"]["base_url"] = "https://attacker.example/v1"
    helper["data"]["caps"]["max_cost_usd"] = 1000
    rewrite_body(project, {"documents": body["documents"]})
    loaded, _ = load_project(project)
    assert loaded.agents["helper"].model.base_url is None
    assert loaded.agents["helper"].caps.max_cost_usd == 0.05


def test_a_cache_signed_without_the_users_key_is_not_trusted(project: Path) -> None:
    """Someone who knows the format but not the key: a MAC under another key fails."""
    load_project(project)
    wrapper = json.loads(cache_file(project).read_text())
    body = json.loads(wrapper["body"])
    next(d for d in body["documents"] if d["data"].get("name") == "helper")["data"]["model"]["max_tokens"] = 7
    wrapper["body"] = json.dumps(body)
    wrapper["mac"] = compiled._mac(b"k" * compiled.KEY_BYTES, wrapper["body"])
    cache_file(project).write_text(json.dumps(wrapper))
    loaded, _ = load_project(project)
    assert loaded.agents["helper"].model.max_tokens == 100


def test_a_cache_from_another_project_root_is_not_used(project: Path, tmp_path: Path) -> None:
    load_project(project)
    twin = tmp_path / "twin"
    import shutil

    shutil.copytree(project, twin, symlinks=True)
    (twin / "prompts/system.md").write_text("Twin prompt.\n")
    loaded, problems = load_project(twin)
    assert problems == [] and loaded.agents["helper"].system_prompt == "Twin prompt.\n"
    assert loaded.tasks["ask"].root == twin.resolve()


@pytest.mark.parametrize("how", ["symlink", "group-writable", "other-owner"])
def test_a_cache_file_anyone_else_could_have_written_is_ignored(project: Path, tmp_path: Path, how: str) -> None:
    load_project(project)
    path = cache_file(project)
    if how == "symlink":
        target = tmp_path / "elsewhere.json"
        path.rename(target)
        path.symlink_to(target)
    elif how == "group-writable":
        path.chmod(0o660)
    else:
        if os.geteuid() != 0:
            pytest.skip("changing a file's owner needs root")
        os.chown(path, 65534, 65534)
    files, _ = _read_files(config_files(project.resolve()), project.resolve())
    assert read_cache(project.resolve(), cache_key(project.resolve(), files)) is None
    loaded, problems = load_project(project)  # and the load goes on, from the files
    assert problems == [] and loaded.agents["helper"].model.max_tokens == 100


def test_a_key_others_can_read_disables_the_cache(project: Path, own_key: Path) -> None:
    load_project(project)
    key = own_key / "runner/project-cache.key"
    key.chmod(0o644)
    assert compiled.user_key(create=True) is None
    files, _ = _read_files(config_files(project.resolve()), project.resolve())
    assert read_cache(project.resolve(), cache_key(project.resolve(), files)) is None
    loaded, problems = load_project(project)
    assert problems == [] and "helper" in loaded.agents


def test_without_a_usable_key_directory_there_is_no_cache(project: Path, own_key: Path) -> None:
    own_key.write_text("a file where the directory should be")
    loaded, problems = load_project(project)
    assert problems == [] and "helper" in loaded.agents
    assert not cache_file(project).exists()


def test_a_read_only_project_loads_without_a_cache(project: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes through directory permissions")
    project.chmod(0o555)
    try:
        _, problems = load_project(project)
    finally:
        project.chmod(0o755)
    assert problems == []


def test_runner_validate_never_trusts_the_cache(project: Path, own_key: Path) -> None:
    """Even a cache signed with the user's key (an attacker who can read it) cannot make
    ``runner validate`` pass an invalid project; ``runner list`` does use it."""
    load_project(project)
    good = cache_file(project).read_bytes()
    agent = project / "agents.d/helper.yaml"
    agent.write_text(AGENT.replace("max_tokens: 100", "max_tokens: -1"))
    files, _ = _read_files(config_files(project.resolve()), project.resolve())
    wrapper = json.loads(good)
    body = json.loads(wrapper["body"])
    body["key"] = cache_key(project.resolve(), files)
    wrapper["body"] = json.dumps(body)
    wrapper["mac"] = compiled._mac(compiled.user_key(create=False) or b"", wrapper["body"])
    cache_file(project).write_text(json.dumps(wrapper))
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(own_key)}
    run = [sys.executable, "-m", "runner"]
    validate = subprocess.run([*run, "validate"], cwd=project, capture_output=True, text=True, env=env)
    assert validate.returncode == 2, validate.stderr
    assert "agents.d/helper.yaml:4:" in validate.stdout and "/model/max_tokens" in validate.stdout
    listing = subprocess.run([*run, "list"], cwd=project, capture_output=True, text=True, env=env)
    assert listing.returncode == 0 and "helper" in listing.stdout  # the forged entry was used


def test_concurrent_loads_leave_one_whole_cache(project: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = f"from pathlib import Path\nfrom runner.config.project import load_project\nassert not load_project(Path({str(project)!r}))[1]"
    loads = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(4)]
    assert [p.wait(timeout=120) for p in loads] == [0] * 4
    files, _ = _read_files(config_files(project.resolve()), project.resolve())
    assert read_cache(project.resolve(), cache_key(project.resolve(), files)) is not None
    assert [p.name for p in cache_file(project).parent.iterdir() if p.name.endswith(".tmp")] == []


EVAL = """\
apiVersion: runner/v1
kind: Eval
name: quality
task: ask
dataset: {path: data/cases.csv, id_column: id}
assert:
  - {name: answer, equals: {column: expected}}
variants:
  - name: base
  - name: terse
    system_prompt: {file: ../prompts/terse.md}
"""


@pytest.fixture
def with_eval(project: Path) -> Path:
    (project / "evals.d").mkdir()
    (project / "evals.d/quality.yaml").write_text(EVAL)
    (project / "prompts/terse.md").write_text("Be terse.\n")
    (project / "data/cases.csv").write_text("id,question,expected\n1,2+2?,4\n")
    return project


def test_an_eval_variants_prompt_file_is_read_again(with_eval: Path) -> None:
    first, problems = load_project(with_eval)
    assert problems == [] and first.evals["quality"].variants[1].system_prompt == "Be terse.\n"
    (with_eval / "prompts/terse.md").write_text("Be very terse.\n")
    loaded, problems = load_project(with_eval)
    assert problems == [] and loaded.evals["quality"].variants[1].system_prompt == "Be very terse.\n"


@pytest.mark.parametrize(
    ("change", "pointer"), [("removed", "/dataset/path"), ("column renamed", "/assert/0/equals/column")]
)
def test_an_eval_dataset_is_checked_on_every_load(with_eval: Path, change: str, pointer: str) -> None:
    """The dataset is read from disk when checked, not hashed into the cache key."""
    assert load_project(with_eval)[1] == []
    cases = with_eval / "data/cases.csv"
    if change == "removed":
        cases.unlink()
    else:
        cases.write_text("id,question,wanted\n1,2+2?,4\n")
    _, problems = load_project(with_eval)
    assert [(p.file, p.pointer) for p in problems] == [("evals.d/quality.yaml", pointer)]


def test_a_task_named_by_its_file_is_found_in_a_cached_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load_project(project)
    loaded, _ = load_project(project)
    assert read_cache(project.resolve(), cache_key(project.resolve(), _read_files(config_files(project.resolve()), project.resolve())[0]))
    monkeypatch.chdir(project)
    assert loaded.task_for("tasks.d/ask.yaml").name == "ask"
    assert loaded.task_for(str(project / "tasks.d/ask.yaml")).name == "ask"
    origin = getattr(loaded.tasks["ask"].goal, "origin", None)  # a failing template still names where it was written
    assert (origin.file, origin.line, origin.pointer) == ("tasks.d/ask.yaml", 7, "/goal")


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_cache_path_that_is_not_a_file_neither_hangs_nor_fails_the_load(project: Path, kind: str) -> None:
    path = cache_file(project)
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    else:
        path.mkdir()
    loaded, problems = load_project(project)
    assert problems == [] and "helper" in loaded.agents
