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
    values += _source_secrets(project, options)
    values += [os.environ.get(n, "") for n in sorted(delivery_secret_names(project))]
    return [v for v in values if len(v) >= MIN_SECRET_CHARS]


def _source_secrets(project: Project, options: RunOptions) -> list[str]:
    """Passwords of SQL sources (and the URLs that hold them), wherever they come from."""
    from urllib.parse import unquote, urlsplit

    sources = [*project.sources.values(), *(s for t in project.tasks.values() for s in t.sources.values())]
    urls = [*(v for s in sources for v in s.secrets()), *options.source_urls.values()]
    passwords = [unquote(urlsplit(u).password or "") for u in urls if "://" in u]
    return urls + passwords


def delivery_secret_names(project: Project) -> set[str]:
    """Variables report and budget warning deliveries read secrets from (the SMTP password,
    webhook URLs, storage options); the SMTP user name is not one (it is often the sender's address)."""
    names: set[str] = set()
    targets = [*(t for task in project.tasks.values() for t in task.report.deliver),
               *(t for budget in project.budgets.values() for t in budget.deliver)]  # fmt: skip
    for target in targets:
        smtp = target.settings.get("smtp") or {}
        candidates = (smtp.get("password_env"), target.settings.get("url_env"), target.settings.get("options_env"))
        names |= {str(name) for name in candidates if name}
    return names
