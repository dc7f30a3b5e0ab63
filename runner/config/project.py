"""A project: every configuration document under a root, validated and cross-checked.

Loading goes: YAML with positions -> JSON Schema -> typed specs -> cross-reference checks
(agents, tools, steps, templates, prices). All problems are collected, then raised together
as one :class:`~runner.errors.ConfigError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from runner.config import specs
from runner.config.evals import EvalSpec, build_eval
from runner.config.prices import default_prices
from runner.config.schema import validate_document
from runner.config.specs import AgentSpec, Price, TaskSpec, TelemetrySpec, ToolSpec
from runner.config.yamlload import Document, YamlError, load_documents
from runner.errors import ConfigError, Problem, did_you_mean
from runner.tools.sql.source import SqlSource

CONFIG_DIRS = ("agents.d", "tasks.d", "tools.d", "evals.d", "sources.d")
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass
class Project:
    """Everything the runner knows from configuration."""

    root: Path
    agents: dict[str, AgentSpec] = field(default_factory=dict)
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    tools: dict[str, ToolSpec] = field(default_factory=dict)
    sources: dict[str, SqlSource] = field(default_factory=dict)  # kind: Source documents
    prices: dict[str, Price] = field(default_factory=default_prices)
    documents: dict[tuple[str, str], Document] = field(default_factory=dict)
    task_files: dict[Path, str] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)  # task name -> resolved config hash
    telemetry: TelemetrySpec | None = None  # a kind: Telemetry document (one per project)
    evals: dict[str, EvalSpec] = field(default_factory=dict)

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


def load_project(root: Path, extra: list[Path] | None = None) -> tuple[Project, list[Problem]]:
    """Load and check the project at ``root``. Returns the project and every problem found."""
    project = Project(root=root.resolve())
    problems: list[Problem] = []
    valid: list[Document] = []
    for path in config_files(project.root, extra):
        display = display_path(path, project.root)
        try:
            documents = load_documents(path, display)
        except YamlError as exc:
            problems.append(exc.problem)
            continue
        except OSError as exc:
            problems.append(Problem(display, 1, 1, "", f"cannot read file: {exc.strerror}"))
            continue
        if not documents:
            problems.append(Problem(display, 1, 1, "", "empty file; expected a document with apiVersion and kind"))
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
    return project, problems


def load_project_or_raise(root: Path, extra: list[Path] | None = None) -> Project:
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
    return []


def _build(project: Project, documents: list[Document]) -> list[Problem]:
    problems: list[Problem] = []
    for doc in documents:
        kind, name = doc.data["kind"], doc.data.get("name", "")
        if kind == "Prices":
            project.prices.update(specs.build_prices(doc))
            continue
        if kind == "Telemetry":
            problems.extend(_set_telemetry(project, doc))
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
            from runner.config.sources import source_document

            project.sources[name] = source_document(doc, project.root)
        elif kind == "Eval":
            project.evals[name], refused = build_eval(doc, project.root)
            problems.extend(refused)
        else:
            project.tools[name] = specs.build_tool(doc)
        project.documents[(kind, name)] = doc
    return problems
