"""A project: every configuration document under a root, validated and cross-checked.

Loading goes: YAML with positions -> JSON Schema -> typed specs -> cross-reference checks
(agents, tools, steps, templates, prices). All problems are collected, then raised together
as one :class:`~runner.errors.ConfigError`. A project whose files are unchanged since a
clean load is built from the compiled project cache instead (:mod:`runner.config.compiled`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from runner.config import specs
from runner.config.compiled import CachedProject, ConfigFile, cache_key, prompts_digest, read_cache, write_cache
from runner.config.documents import Document, YamlError, read_config_bytes
from runner.config.prices import default_prices
from runner.config.profiles import (
    ModelProfile,
    build_profiles,
    merge_profiles,
    new_profiles_without_match,
    profile_entry,
    shipped_profiles,
)
from runner.config.project_files import workspace_file_problem
from runner.config.specs import AgentSpec, Price, TaskSpec, TelemetrySpec, ToolSpec
from runner.errors import ConfigError, Problem, did_you_mean
from runner.knowledge.spec import KnowledgeSpec
from runner.tools.sql.source import SqlSource

if TYPE_CHECKING:
    from runner.config.budgets import BudgetSpec
    from runner.config.evals import EvalSpec

CONFIG_DIRS = ("agents.d", "tasks.d", "tools.d", "evals.d", "knowledge.d", "sources.d", "budgets.d")
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass
class Project:
    """Everything the runner knows from configuration."""

    root: Path
    agents: dict[str, AgentSpec] = field(default_factory=dict)
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    tools: dict[str, ToolSpec] = field(default_factory=dict)
    knowledge: dict[str, KnowledgeSpec] = field(default_factory=dict)  # kind: Knowledge, and bases declared in place
    sources: dict[str, SqlSource] = field(default_factory=dict)  # kind: Source documents
    prices: dict[str, Price] = field(default_factory=default_prices)
    documents: dict[tuple[str, str], Document] = field(default_factory=dict)
    task_files: dict[Path, str] = field(default_factory=dict)
    price_documents: list[Document] = field(default_factory=list)
    profiles: dict[str, ModelProfile] = field(default_factory=shipped_profiles)  # runner.config.profiles
    profile_documents: list[Document] = field(default_factory=list)  # kind: ModelProfiles, in load order
    hashes: dict[str, str] = field(default_factory=dict)  # task name -> resolved config hash
    telemetry: TelemetrySpec | None = None  # a kind: Telemetry document (one per project)
    evals: dict[str, EvalSpec] = field(default_factory=dict)
    budgets: dict[str, BudgetSpec] = field(default_factory=dict)  # kind: Budget documents (budgets.d/)

    def document(self, kind: str, name: str) -> Document:
        return self.documents[(kind, name)]

    def sources_for(self, task: TaskSpec) -> dict[str, SqlSource]:
        """The SQL sources a task's tools may read: the project's, and the task's own."""
        return {**self.sources, **task.sources}

    def task_for(self, ref: str) -> TaskSpec:
        """A task by name or by YAML path."""
        path = Path(ref)
        if path.suffix in YAML_SUFFIXES:
            resolved = path.resolve()
            if resolved in self.task_files:
                return self.tasks[self.task_files[resolved]]
            raise ConfigError(f"{ref}: no Task document in this file (or it is outside {self.root})")
        if ref in self.tasks:
            return self.tasks[ref]
        raise ConfigError(f"unknown task '{ref}'{did_you_mean(ref, self.tasks)}; `runner list` shows the tasks")


def find_root(start: Path) -> Path:
    """The project root for a path: the parent of ``tasks.d``/``agents.d`` it lives in, else cwd."""
    start = start.resolve()
    for parent in (start, *start.parents):
        if parent.name in CONFIG_DIRS:
            return parent.parent
        if any((parent / d).is_dir() for d in CONFIG_DIRS) and parent != Path("/"):
            return parent
    return Path.cwd()


def config_files(root: Path, extra: list[Path] | None = None) -> list[Path]:
    """Every YAML file in the root's config directories, plus ``extra`` files or directories.

    Entries named ``*.yaml`` that are not regular files (a FIFO, a device, a dangling link)
    are kept, so that loading reports them instead of skipping them silently."""
    found: list[Path] = []
    for directory in [root / d for d in CONFIG_DIRS] + list(extra or []):
        if directory.is_dir():
            found.extend(sorted(p for p in directory.rglob("*") if p.suffix in YAML_SUFFIXES and not p.is_dir()))
        elif directory.exists() or directory.is_symlink():
            found.append(directory)
    unique: dict[Path, None] = {}
    for path in found:
        unique.setdefault(path.resolve(), None)
    return list(unique)


def load_project(root: Path, extra: list[Path] | None = None, *, use_cache: bool = True) -> tuple[Project, list[Problem]]:
    """Load and check the project at ``root``. Returns the project and every problem found.

    An unchanged project is built from the compiled project cache (:mod:`runner.config.compiled`)
    without being parsed or checked again; ``use_cache=False`` checks everything. A load that
    finds no problem refreshes the cache."""
    root = root.resolve()
    files, problems = _read_files(config_files(root, extra), root)
    key = cache_key(root, files) if not problems else None
    if use_cache and key is not None:
        cached = read_cache(root, key)
        project = _from_cache(root, cached) if cached is not None else None
        if project is not None:
            return project, []
    project, found = _load(root, files)
    problems += found
    if key is not None and not problems:
        documents = list(project.documents.values()) + project.price_documents + project.profile_documents
        profiles = {name: profile_entry(profile) for name, profile in project.profiles.items()}
        write_cache(root, key, documents, project.prices, _prompts_digest(project), profiles)
    return project, problems


def _read_files(paths: list[Path], root: Path) -> tuple[list[ConfigFile], list[Problem]]:
    """The bytes of every configuration file, and a problem for each that cannot be read."""
    files: list[ConfigFile] = []
    problems: list[Problem] = []
    for path in paths:
        display = display_path(path, root)
        try:
            files.append(ConfigFile(path, display, read_config_bytes(path, display)))
        except YamlError as exc:
            problems.append(exc.problem)
        except OSError as exc:
            problems.append(Problem(display, 1, 1, "", f"cannot read file: {exc.strerror}"))
    return files, problems


def _load(root: Path, files: list[ConfigFile]) -> tuple[Project, list[Problem]]:
    """The full load: parse, validate against the schemas, build, cross-check."""
    from runner.config.schema import validate_document
    from runner.config.yamlload import parse_config_bytes

    project = Project(root=root)
    problems: list[Problem] = []
    valid: list[Document] = []
    for item in files:
        try:
            documents = parse_config_bytes(item.raw, item.display, item.path)
        except YamlError as exc:
            problems.append(exc.problem)
            continue
        if not documents:
            problems.append(Problem(item.display, 1, 1, "", "empty file; expected a document with apiVersion and kind"))
        for doc in documents:
            found = validate_document(doc)
            problems.extend(found)
            if not found:
                valid.append(doc)
    problems.extend(_build(project, valid))
    from runner.config.crossref import check_references
    from runner.config.eval_checks import check_evals

    problems.extend(check_references(project))
    problems.extend(check_evals(project))
    if project.budgets:
        from runner.config.budgets import budget_problems

        problems.extend(budget_problems(project))
    return project, problems


def _from_cache(root: Path, cached: CachedProject) -> Project | None:
    """The project a cache entry describes, or ``None`` when the file system no longer agrees
    with it (a prompt file refused or changed, a workspace file refused): the caller then
    loads in full, which reports why."""
    prices = {model: Price(*values) for model, values in cached.prices.items()}  # type: ignore[arg-type]  # as written by Price
    try:
        profiles = merge_profiles({}, cached.profiles)
    except (KeyError, TypeError, ValueError):  # an entry of another shape: load in full
        return None
    project = Project(root=root, prices=prices, profiles=profiles)
    if _build(project, list(cached.documents)) or _prompts_digest(project) != cached.prompts_digest:
        return None
    refused = any(workspace_file_problem(rel, root) for task in project.tasks.values() for rel in task.workspace_files)
    if refused or (project.evals and _dataset_problems(project)):
        return None
    return project


def _dataset_problems(project: Project) -> bool:
    """Whether an eval's checks now fail: its dataset is read from disk, not hashed."""
    from runner.config.eval_checks import check_evals

    return bool(check_evals(project))


def _prompts_digest(project: Project) -> str:
    """The digest of every prompt read while building (agents' prompt fields, eval variants')."""
    agents = (text for agent in project.agents.values() for text in (agent.system_prompt, agent.next_step_prompt))
    variants = (v.system_prompt or "" for spec in project.evals.values() for v in spec.variants)
    return prompts_digest([*agents, "\0evals", *variants])


def load_project_or_raise(root: Path, extra: list[Path] | None = None) -> Project:
    """The project at ``root``; :class:`~runner.errors.ConfigError` listing every problem otherwise."""
    project, problems = load_project(root, extra)
    if problems:
        raise ConfigError(problems)
    return project


def display_path(path: Path, root: Path) -> str:
    """How messages name a file: relative to the project root, else to the working directory."""
    resolved = path.resolve()
    for base in (root, Path.cwd()):
        try:
            return str(resolved.relative_to(base))
        except ValueError:
            continue
    return str(resolved)


def _set_telemetry(project: Project, doc: Document) -> list[Problem]:
    first = project.documents.get(("Telemetry", ""))
    if first is not None:
        where = f"{first.source.file}:{first.source.locate('/kind').line}"
        return [doc.problem("/kind", f"a second Telemetry document (the first is at {where}); keep one per project")]
    project.telemetry = specs.build_telemetry(doc)
    project.documents[("Telemetry", "")] = doc
    return _telemetry_endpoint_problems(doc)


def _telemetry_endpoint_problems(doc: Document) -> list[Problem]:
    """The schema checks the endpoint's shape; a port outside 1-65535 or a bracket left open
    only ``urlsplit`` sees (and a run would refuse)."""
    endpoint = (doc.data.get("traces") or {}).get("endpoint")
    if not isinstance(endpoint, str):
        return []
    try:
        port = urlsplit(endpoint).port
    except ValueError as exc:
        return [doc.problem("/traces/endpoint", f"not a usable URL ({exc}); e.g. http://localhost:4318")]
    return [doc.problem("/traces/endpoint", "port 0 is not a port; e.g. http://localhost:4318")] if port == 0 else []


def _build(project: Project, documents: list[Document]) -> list[Problem]:
    problems: list[Problem] = []
    for doc in documents:
        kind, name = doc.data["kind"], doc.data.get("name", "")
        if kind == "Prices":
            project.prices.update(specs.build_prices(doc))
            project.price_documents.append(doc)
            continue
        if kind == "Telemetry":
            problems.extend(_set_telemetry(project, doc))
            continue
        if kind == "ModelProfiles":
            problems.extend(new_profiles_without_match(doc, project.profiles))
            project.profiles = build_profiles(doc, project.profiles)
            project.profile_documents.append(doc)
            continue
        if (kind, name) in project.documents:
            first = project.documents[(kind, name)]
            where = f"{first.source.file}:{first.source.locate('/name').line}"
            problems.append(doc.problem("/name", f"duplicate {kind.lower()} name '{name}' (also defined at {where})"))
            continue
        if kind == "Agent":
            prompts, refused = specs.read_prompts(doc, project.root)
            problems.extend(refused)
            project.agents[name] = specs.build_agent(doc, prompts)
        elif kind == "Task":
            project.tasks[name] = specs.build_task(doc, project.root)
            project.task_files[doc.path.resolve()] = name
        elif kind == "Source":
            from runner.config.sql_sources import source_document

            project.sources[name] = source_document(doc, project.root)
        elif kind == "Eval":
            from runner.config.evals import build_eval  # a project with evals only

            project.evals[name], refused = build_eval(doc, project.root)
            problems.extend(refused)
        elif kind == "Knowledge":
            problems += _add_knowledge(project, doc, [specs.build_knowledge(doc)])
        elif kind == "Budget":
            from runner.config.budgets import build_budget

            project.budgets[name] = build_budget(doc)
        else:
            project.tools[name] = specs.build_tool(doc)
        project.documents[(kind, name)] = doc
        if kind in ("Agent", "Task"):
            problems += _add_knowledge(project, doc, specs.inline_knowledge(doc))
    return problems


def _add_knowledge(project: Project, doc: Document, declared: list[KnowledgeSpec]) -> list[Problem]:
    """Register knowledge bases; a second base with the same name is a problem naming the first."""
    problems: list[Problem] = []
    for spec in declared:
        first = project.knowledge.get(spec.name)
        if first is not None:
            where = f"{first.source}{' at ' + first.pointer if first.pointer else ''}"
            problems.append(doc.problem(f"{spec.pointer}/name", f"duplicate knowledge base name '{spec.name}' (also declared in {where})"))
            continue
        project.knowledge[spec.name] = spec
    return problems
