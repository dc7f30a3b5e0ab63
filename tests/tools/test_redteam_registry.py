"""What a tool raises by surprise (a model's arguments, a workspace sandboxed code wrote) is an
observation for the model; the runner's own errors (caps, configuration) still end the run."""

from __future__ import annotations

import pytest

from runner.errors import CapReached, ConfigError, ToolFailure
from runner.tools.base import ToolContext, tool
from runner.tools.registry import ToolRegistry
from runner.tools.sandbox import SandboxPolicy

pytestmark = pytest.mark.timeout(60)
CANARY = "sk-canary-registry-0123456789"


@tool
def brittle(kind: str) -> str:
    """Fail in the way asked.

    Args:
        kind: What to raise.
    """
    if kind == "value":
        raise ValueError(f"bad value near {CANARY}\nsecond line")
    if kind == "key":
        raise KeyError("missing")
    if kind == "cap":
        raise CapReached("max_cost_usd", 1.0, 1.5)
    if kind == "config":
        raise ConfigError("tools.d/x.yaml: broken")
    return "fine"


@pytest.fixture
def registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(brittle)
    return registry


@pytest.fixture
def ctx(workspace) -> ToolContext:
    return ToolContext(workspace=workspace, sandbox=SandboxPolicy(), secrets=(CANARY,))


async def test_an_unexpected_error_is_a_tool_failure_without_secrets(registry, ctx):
    with pytest.raises(ToolFailure) as failure:
        await registry.invoke("brittle", {"kind": "value"}, ctx)
    assert str(failure.value) == "tool 'brittle' failed: ValueError: bad value near [REDACTED]"
    with pytest.raises(ToolFailure, match="KeyError: 'missing'"):
        await registry.invoke("brittle", {"kind": "key"}, ctx)


@pytest.mark.parametrize(("kind", "error"), [("cap", CapReached), ("config", ConfigError)])
async def test_the_runners_own_errors_still_end_the_run(registry, ctx, kind, error):
    with pytest.raises(error):
        await registry.invoke("brittle", {"kind": kind}, ctx)
