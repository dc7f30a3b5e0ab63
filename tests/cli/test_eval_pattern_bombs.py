"""Eval datasets whose per-case assertions carry the other ways a pattern or schema can hold
the process: a repeat ``regex`` would unroll into gigabytes when compiling, a JSON Schema whose
``unevaluatedProperties`` asks a backtracking ``patternProperties``, a ``$ref`` cycle. Each
becomes a failed case with its reason, through the real CLI; the eval finishes."""

from __future__ import annotations

import json
from pathlib import Path

from runner.model.server import ScriptedServer
from tests.cli.test_eval_hostile import eval_yaml, root, runner, write_eval

__all__ = ["root"]  # the project fixture, shared with the other hostile eval tests

ROWS = [
    "id,text,expected,checks",
    'unrolled,a,greeting,"[{""path"": ""summary"", ""regex"": ""a{4294967294}""}]"',
    'nested,b,greeting,"[{""path"": ""summary"", ""regex"": ""(?:a{1000}){1000}""}]"',
    'unevaluated,c,greeting,"[{""path"": ""keys"", ""json_schema"": {""patternProperties"": {""^(a|aa)+$"": {}}, ""unevaluatedProperties"": false}}]"',
    'cycle,d,greeting,"[{""path"": ""label"", ""json_schema"": {""$ref"": ""#""}}]"',
    'fine,e,greeting,"[{""path"": ""summary"", ""regex"": ""^a{40}!$""}]"',
]


def test_pattern_and_schema_bombs_in_a_dataset_become_failed_cases(root: Path) -> None:
    (root / "data" / "rows.csv").write_text("\n".join(ROWS) + "\n")
    write_eval(root, eval_yaml("data/rows.csv"))
    reply = json.dumps({"label": "greeting", "summary": "a" * 40 + "!", "keys": {"a" * 40 + "!": 1}})
    with ScriptedServer({"fallback": reply}) as server:
        done = runner(root, "eval", "hostile", "--json", server=server)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    cases = {c["key"]: c for c in json.loads(done.stdout)["variants"][0]["results"]}

    def why(key: str) -> str:
        return " | ".join(f"{c['label']}: {c['detail']}" for c in cases[key]["checks"] if c["passed"] is False)

    assert "repeats too much" in why("unrolled") and "repeats too much" in why("nested")
    assert "took more than 1 s" in why("unevaluated")
    assert "cycle" in why("cycle")
    assert cases["fine"]["passed"]
