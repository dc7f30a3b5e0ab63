"""runner: a declarative, YAML-configured, headless batch runner for LLM agents."""

__version__ = "0.1.0"
