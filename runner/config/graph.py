"""Dependency graphs of steps: cycles and ancestors (for ``runner validate`` and for runs)."""

from __future__ import annotations

from runner.config.specs import StepSpec


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle as a list of ids (first repeated at the end), or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in graph.get(node, []):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def ancestors(step_id: str, steps: tuple[StepSpec, ...]) -> set[str]:
    """Every step ``step_id`` depends on, directly or not."""
    deps = {s.id: s.depends_on for s in steps}
    seen: set[str] = set()
    todo = list(deps.get(step_id, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(deps.get(node, ()))
    return seen
