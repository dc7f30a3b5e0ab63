"""The signed template cache: report.html.j2 is compiled once per user, and an entry that is
not this user's own, whole and current is never loaded (the template is compiled instead)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jinja2 import DictLoader, Environment, StrictUndefined

from runner.reports.template_cache import MAC_BYTES, SignedBytecodeCache, signed_bytecode_cache

REPO = Path(__file__).resolve().parents[2]
SECRET = b"k" * 32
TEMPLATE = "Hello {{ name | upper }}{% for i in range(n) %}!{% endfor %}"


class CountingEnvironment(Environment):
    """A real Jinja environment that counts how often it compiles a template."""

    compiled = 0

    def compile(self, *args, **kwargs):  # type: ignore[no-untyped-def,override]
        type(self).compiled += 1
        return super().compile(*args, **kwargs)


def _environment(cache: SignedBytecodeCache | None, source: str = TEMPLATE) -> CountingEnvironment:
    CountingEnvironment.compiled = 0
    return CountingEnvironment(loader=DictLoader({"t": source}), undefined=StrictUndefined, bytecode_cache=cache)


def _render(cache: SignedBytecodeCache | None, source: str = TEMPLATE) -> tuple[str, int]:
    env = _environment(cache, source)
    return env.get_template("t").render(name="ada", n=2), CountingEnvironment.compiled


def _entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jinja"))


def test_the_second_environment_loads_the_compiled_template(tmp_path: Path) -> None:
    cache = SignedBytecodeCache("test/1", SECRET, tmp_path / "templates")
    assert _render(cache) == ("Hello ADA!!", 1)
    [entry] = _entries(tmp_path / "templates")
    assert entry.stat().st_mode & 0o777 == 0o600
    assert _render(cache) == ("Hello ADA!!", 0)


def test_a_changed_template_is_compiled_again(tmp_path: Path) -> None:
    cache = SignedBytecodeCache("test/1", SECRET, tmp_path)
    _render(cache)
    assert _render(cache, TEMPLATE + " bye") == ("Hello ADA!! bye", 1)


@pytest.mark.parametrize("damage", ["flip a payload byte", "flip a mac byte", "truncate", "empty"])
def test_a_damaged_or_forged_entry_is_not_loaded(tmp_path: Path, damage: str) -> None:
    cache = SignedBytecodeCache("test/1", SECRET, tmp_path)
    _render(cache)
    [entry] = _entries(tmp_path)
    data = bytearray(entry.read_bytes())
    if damage == "flip a payload byte":
        data[-10] ^= 0xFF
    elif damage == "flip a mac byte":
        data[0] ^= 0xFF
    elif damage == "truncate":
        data = data[: MAC_BYTES + 20]
    else:
        data = bytearray()
    entry.write_bytes(bytes(data))
    assert _render(cache) == ("Hello ADA!!", 1)


def test_an_entry_signed_with_another_key_is_not_loaded(tmp_path: Path) -> None:
    _render(SignedBytecodeCache("test/1", b"x" * 32, tmp_path))
    assert _render(SignedBytecodeCache("test/1", SECRET, tmp_path)) == ("Hello ADA!!", 1)


def test_another_namespace_does_not_share_entries(tmp_path: Path) -> None:
    _render(SignedBytecodeCache("test/1", SECRET, tmp_path))
    assert _render(SignedBytecodeCache("test/2", SECRET, tmp_path))[1] == 1
    assert len(_entries(tmp_path)) == 2


@pytest.mark.parametrize("how", ["group-writable", "world-readable-and-writable", "symlink"])
def test_an_entry_others_could_have_written_is_not_loaded(tmp_path: Path, how: str) -> None:
    cache = SignedBytecodeCache("test/1", SECRET, tmp_path / "templates")
    _render(cache)
    [entry] = _entries(tmp_path / "templates")
    if how == "symlink":
        moved = tmp_path / "elsewhere.jinja"
        entry.rename(moved)
        entry.symlink_to(moved)
    else:
        entry.chmod(0o620 if how == "group-writable" else 0o666)
    assert _render(cache) == ("Hello ADA!!", 1)


def test_an_unwritable_directory_only_costs_a_compile(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    cache = SignedBytecodeCache("test/1", SECRET, blocked / "templates")
    assert _render(cache) == ("Hello ADA!!", 1)
    assert _render(cache) == ("Hello ADA!!", 1)


def test_without_a_usable_key_there_is_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache directory should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert signed_bytecode_cache("test/1") is None


RENDER_REPORT = """
import json, sys
import jinja2
from runner.reports.html import render_html
from tests.reports.conftest import make_record
compiled = []
original = jinja2.Environment.compile
def counting(self, *args, **kwargs):
    compiled.append(args[1] if len(args) > 1 else kwargs.get("name"))
    return original(self, *args, **kwargs)
jinja2.Environment.compile = counting
page = render_html(make_record(), {})
print(json.dumps({"compiled": compiled, "page": page}))
"""


def _report_in_a_process(cache_home: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache_home)}
    done = subprocess.run(
        [sys.executable, "-c", RENDER_REPORT], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_html_report_is_compiled_by_the_first_run_only_and_renders_the_same(tmp_path: Path) -> None:
    first = _report_in_a_process(tmp_path)
    second = _report_in_a_process(tmp_path)
    assert "report.html.j2" in first["compiled"]  # type: ignore[operator]
    assert second["compiled"] == []
    assert second["page"] == first["page"]
    assert _entries(tmp_path / "runner" / "templates")
