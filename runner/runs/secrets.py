"""The secrets a run could hold, so that everything it records can be redacted."""

from __future__ import annotations

import os

from runner.config.project import Project
from runner.runs.options import RunOptions

MIN_SECRET_CHARS = 6  # shorter values would redact ordinary words


def known_secrets(project: Project, options: RunOptions) -> list[str]:
    """Every key this run could hold: given, the SDK's standard variable, and each variable
    an agent or tool names. Redacted from everything the run records."""
    names = {"OPENAI_API_KEY"}
    names |= {a.model.api_key_env for a in project.agents.values() if a.model.api_key_env}
    names |= {t.data.get("http", {}).get("api_key_env") for t in project.tools.values() if t.type == "http"} - {None}
    refs = [r for a in project.agents.values() for r in a.tools]
    refs += [r for t in project.tasks.values() if t.pipeline for s in t.pipeline.steps for r in s.tools or ()]
    names |= {str(r.settings["api_key_env"]) for r in refs if "api_key_env" in r.settings}  # web_search's key
    values = [options.api_key or ""] + [os.environ.get(n, "") for n in sorted(names)]
    return [v for v in values if len(v) >= MIN_SECRET_CHARS]
