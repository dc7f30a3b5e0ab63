"""Every file a tool writes is reportable, and no secret reaches a report's artifacts.

Through the real CLI, the real sandbox and the loopback OpenAI server: the model writes
ordinary files of every kind with ``write_file`` and with sandboxed ``python``; the run
completes (exit 0) with a report listing them. Links, FIFOs, hidden files and names a
report cannot show are never artifacts; a known key written into a file is redacted from
text copies and a binary copy holding it is withheld, with a note.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import run_cli, sandbox_project

KEY = "sk-canary-artifacts-0123456789abcdef"
AGENT = """\
apiVersion: runner/v1
kind: Agent
name: coder
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [python, shell, write_file]
sandbox: {mode: bwrap, wall_seconds: 30, max_file_mb: 64}
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: files
agent: coder
goal: "WRITE the files"
"""
LONG = "/".join(["d" * 200] * 5) + "/deep.txt"  # about 1,000 characters: a long report path
WRITE_FILE_PATHS = {
    "analysis.py": "text/x-python",
    "page.html": "text/html",
    "sheet.xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "paper.pdf": "application/pdf",
    "README": "application/octet-stream",
    "data.weird-suffix": "application/octet-stream",
    "données/résumé.txt": "text/plain",
    "my file (1) [draft].md": "text/markdown",
    "./dotted//twice.csv": "text/csv",  # reported in canonical form: dotted/twice.csv
    LONG: "text/plain",
}
PYTHON_WRITES = """
import os, socket
os.makedirs('out/nested', exist_ok=True)
open('out/nested/result.csv', 'w').write('x,y\\n1,2\\n')
open('blob.bin', 'wb').write(bytes(range(256)))
open('.hidden', 'w').write('not an artifact')
os.symlink('/etc/passwd', 'passwd-link.txt')
os.symlink('/etc', 'etc-link')
os.symlink('/etc/passwd', 'out/nested/inner-link.txt')
os.mkfifo('pipe.txt')
socket.socket(socket.AF_UNIX).bind('sock')
fd = os.open(b'bad-\\xff-name.txt', os.O_WRONLY | os.O_CREAT); os.write(fd, b'x'); os.close(fd)
open('line\\nbreak.txt', 'w').write('x')
open('huge.csv', 'wb').write(b'0' * (21 * 1024 * 1024))
text = open('analysis.py').read(); os.remove('analysis.py'); open('analysis.py', 'w').write(text + '# appended by python\\n')
print('wrote')
"""


@pytest.fixture
def project() -> Iterator[Path]:
    with sandbox_project("artifacts", {"agents.d/coder.yaml": AGENT, "tasks.d/files.yaml": TASK}) as root:
        yield root


def runner(root: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, *args, key=KEY)


def script(*calls: list[dict[str, Any]], answer: str = "All files written.") -> dict[str, Any]:
    """One model reply per list of tool calls, then the answer."""
    rules = [{"times": 1, "reply": {"tool_calls": batch}} for batch in calls]
    return {"rules": rules, "fallback": answer}


def only_report(root: Path) -> Path:
    (report_dir,) = (root / "reports" / "files").iterdir()
    return report_dir


def leaked_forms() -> list[bytes]:
    raw = KEY.encode()
    forms = [raw, KEY.encode("utf-16-le"), raw.hex().encode()]
    forms += [base64.b64encode(bytes(k) + raw)[4:-4] for k in range(3)]
    return forms


def assert_no_key_anywhere(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for form in leaked_forms():
                assert form not in data, f"{path} holds the key"


@pytest.mark.timeout(300)
def test_every_file_a_tool_writes_is_reported(project: Path) -> None:
    writes = [
        {"name": "write_file", "arguments": {"path": path, "content": f"content of {path}\n"}}
        for path in WRITE_FILE_PATHS
    ]
    python = [{"name": "python", "arguments": {"code": PYTHON_WRITES}}]
    with ScriptedServer(script(writes, python)) as server:
        result = runner(project, server, "run", "files")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "All files written." in result.stdout
    report_dir = only_report(project)
    record = json.loads((report_dir / "report.json").read_text())
    copied = {a["source_path"]: a for a in record["artifacts"]}
    for path, media_type in WRITE_FILE_PATHS.items():
        canonical = path.replace("./", "").replace("//", "/")
        assert copied[canonical]["media_type"] == media_type, path
        assert (report_dir / copied[canonical]["path"]).read_bytes().startswith(f"content of {path}".encode())
    # Files the python call wrote are found, including a change to an existing file.
    assert copied["out/nested/result.csv"]["media_type"] == "text/csv"
    assert copied["blob.bin"]["media_type"] == "application/octet-stream"
    assert (report_dir / copied["blob.bin"]["path"]).read_bytes() == bytes(range(256))
    assert (report_dir / copied["analysis.py"]["path"]).read_text().endswith("# appended by python\n")
    python_step = record["steps"][0]
    assert {"out/nested/result.csv", "blob.bin", "huge.csv"} <= set(python_step["artifacts"])
    # Links, FIFOs, sockets, hidden files and unshowable names are never artifacts.
    listed = set(python_step["artifacts"])
    for never in ("passwd-link.txt", "etc-link", "out/nested/inner-link.txt", "pipe.txt", "sock", ".hidden"):
        assert never not in listed
    assert not any("bad-" in p or "\n" in p for p in listed)
    assert not any("root:x:0:0" in p.read_text(errors="replace") for p in report_dir.rglob("*") if p.is_file())
    # Too big to copy: named in the report with the reason.
    problems = {p["path"]: p["reason"] for p in record["artifact_problems"]}
    assert problems["huge.csv"].startswith("is larger than 20,971,520 bytes")
    assert copied[LONG]["path"].startswith("artifacts/_long/")  # a path too long for the file system
    markdown = (report_dir / "report.md").read_text()
    assert "huge.csv" in markdown and "my file \\(1\\) \\[draft\\].md" in markdown
    assert "(artifacts/my%20file%20%281%29%20%5Bdraft%5D.md)" in markdown
    html = (report_dir / "report.html").read_text()
    assert "données/résumé.txt" in html


@pytest.mark.timeout(300)
def test_the_model_sees_why_a_name_is_not_reported(project: Path) -> None:
    code = "fd = __import__('os').open(b'bad-\\xff.txt', 65); print('ok')"
    with ScriptedServer(script([{"name": "python", "arguments": {"code": code}}])) as server:
        result = runner(project, server, "run", "files", "--json")
        observation = server.requests[-1].body["messages"][-1]["content"]
    assert result.returncode == 0, result.stderr
    assert "not UTF-8 are not reported: 'bad-\\udcff.txt'" in observation


@pytest.mark.timeout(300)
def test_a_key_written_into_files_never_reaches_the_report(project: Path) -> None:
    # The key is built from two halves: tool arguments holding the key itself are redacted
    # before any tool runs, but an endpoint can always spell it in pieces.
    code = f"""
import base64, io, os, zipfile, zlib
key = ({KEY[:6]!r} + {KEY[6:]!r}).encode()
open('notes.md', 'w').write('The key is ' + key.decode() + '.\\nAgain: ' + key.decode() + '\\n')
open('key.bin', 'wb').write(b'\\x00\\x01' + key + b'\\x02')
open('key16.bin', 'wb').write(b'\\x00' + key.decode().encode('utf-16-le'))
buffer = io.BytesIO()
with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED) as book:
    book.writestr('xl/sharedStrings.xml', b'<t>' + key + b'</t>')
open('book.xlsx', 'wb').write(buffer.getvalue())
open('doc.pdf', 'wb').write(b'%PDF-1.4\\n1 0 obj<<>>stream\\n' + zlib.compress(b'(' + key + b') Tj') + b'\\nendstream')
open('encoded.txt', 'w').write('token: ' + base64.b64encode(b'xx' + key).decode())
open('clean.bin', 'wb').write(bytes(range(256)) * 4)
print('wrote')
"""
    calls = [[{"name": "python", "arguments": {"code": code}}]]
    with ScriptedServer(script(*calls)) as server:
        result = runner(project, server, "run", "files")
    assert result.returncode == 0, result.stderr
    report_dir = only_report(project)
    assert_no_key_anywhere(report_dir)
    record = json.loads((report_dir / "report.json").read_text())
    copied = {a["source_path"]: a for a in record["artifacts"]}
    assert (report_dir / copied["notes.md"]["path"]).read_text() == "The key is [REDACTED].\nAgain: [REDACTED]\n"
    assert copied["notes.md"]["redactions"] == 2
    assert (report_dir / copied["clean.bin"]["path"]).read_bytes() == bytes(range(256)) * 4
    problems = {p["path"]: p["reason"] for p in record["artifact_problems"]}
    assert set(problems) == {"key.bin", "key16.bin", "book.xlsx", "doc.pdf", "encoded.txt"}
    for path, reason in problems.items():
        assert reason.startswith("was withheld: it contains a secret"), path
        assert reason.endswith("secrets are never copied into reports"), path
    assert "inside zip member 'xl/sharedStrings.xml'" in problems["book.xlsx"]
    for name in ("key.bin", "book.xlsx", "doc.pdf"):
        assert not any(p.name == name for p in report_dir.rglob("*"))
    markdown = (report_dir / "report.md").read_text()
    assert "key.bin: was withheld: it contains a secret" in markdown
    # The workspace itself is left as the model wrote it; only the report is screened.
    assert KEY.encode() in (project / ".runner/workspaces").joinpath(record["run_id"], "key.bin").read_bytes()

    # Re-rendering from the run store screens the artifacts the same way.
    with ScriptedServer(script()) as server:
        rerender = runner(project, server, "report", record["run_id"], "--out", "again")
    assert rerender.returncode == 0, rerender.stderr
    assert_no_key_anywhere(project / "again")
    assert "[REDACTED]" in (project / "again/artifacts/notes.md").read_text()


@pytest.mark.timeout(300)
def test_a_directory_swapped_for_a_link_after_its_files_were_reported(project: Path) -> None:
    """A later call replaces ``out/`` by a link to a host directory shaped like it: the
    report copies nothing from the host."""
    host = Path(tempfile.mkdtemp(prefix="runner-host-", dir="/tmp"))
    try:
        (host / "nested").mkdir()
        (host / "nested" / "result.csv").write_text("HOST SECRET\n")
        first = "import os; os.makedirs('out/nested'); open('out/nested/result.csv', 'w').write('mine\\n'); print(1)"
        second = f"import os, shutil; shutil.rmtree('out'); os.symlink({str(host)!r}, 'out'); print(2)"
        calls = [
            [{"name": "python", "arguments": {"code": first}}],
            [{"name": "python", "arguments": {"code": second}}],
        ]
        with ScriptedServer(script(*calls)) as server:
            result = runner(project, server, "run", "files")
        assert result.returncode == 0, result.stderr
        report_dir = only_report(project)
        record = json.loads((report_dir / "report.json").read_text())
        problems = {p["path"]: p["reason"] for p in record["artifact_problems"]}
        assert problems["out/nested/result.csv"] == "goes through a symbolic link ('out')"
        for path in report_dir.rglob("*"):
            assert not path.is_file() or b"HOST SECRET" not in path.read_bytes()
        assert (host / "nested" / "result.csv").read_text() == "HOST SECRET\n"
    finally:
        shutil.rmtree(host, ignore_errors=True)
