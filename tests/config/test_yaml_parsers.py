"""The strict YAML loader reads the same documents with libyaml's parser as with PyYAML's.

libyaml parses every configuration file; a text it refuses is parsed again by PyYAML's own
parser, so errors read the same whichever refused it. Both parsers feed one strict composer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.config import yamlload
from runner.config.documents import YamlError

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted(
    {*REPO.glob("*.d/*.yaml"), *(REPO / "tests/config").rglob("*.yaml"), *(REPO / "runner").rglob("*.yaml")}
)


def _outcome(loader: object, text: str) -> object:
    try:
        return [(doc.data, vars(doc.source)) for doc in yamlload._load(loader, text, "f.yaml", None)]  # type: ignore[arg-type]
    except YamlError as exc:
        return str(exc)


@pytest.mark.skipif(yamlload._FastLoader is None, reason="PyYAML without libyaml")
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_libyaml_reads_every_file_as_pyyaml_does(path: Path) -> None:
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    fast, slow = _outcome(yamlload._FastLoader, text), _outcome(yamlload._PyLoader, text)
    if isinstance(slow, list):  # PyYAML accepts it: libyaml reads the same data at the same places
        assert fast == slow
    assert _loaded(text) == slow  # and a refusal says what PyYAML says


def _loaded(text: str) -> object:
    try:
        return [(doc.data, vars(doc.source)) for doc in yamlload.load_text(text, "f.yaml")]
    except YamlError as exc:
        return str(exc)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb: x\x07\n", "f.yaml:2:5: error: /: character U+0007 is not allowed in YAML"),
        ("\x00", "f.yaml:1:1: error: /: character U+0000 is not allowed in YAML"),
        ("a: \ufffe\n", "f.yaml:1:4: error: /: character U+FFFE is not allowed in YAML"),
        ("a: \ud800\n", "f.yaml:1:4: error: /: character U+D800 is not allowed in YAML"),
        ("a: {b: 1\n", "f.yaml:2:1: error: /: YAML syntax: expected ',' or '}', but got '<stream end>'"),
        ("a: " + "[" * 5000, "f.yaml:1:67: error: /a/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0"),
        ("a: &x 1\nb: *x\n", "anchors and aliases (&name, *name) are not allowed"),
        ("k: 1\nk: 2\n", "f.yaml:2:1: error: /k: duplicate key 'k' (first defined on line 1)"),
    ],
    ids=["bell", "nul", "noncharacter", "lone-surrogate", "unclosed-flow", "deep-flow-beyond-libyaml", "alias", "duplicate"],
)
def test_refused_text_names_the_place_and_the_reason(text: str, message: str) -> None:
    with pytest.raises(YamlError) as refused:
        yamlload.load_text(text, "f.yaml")
    assert message in str(refused.value)
