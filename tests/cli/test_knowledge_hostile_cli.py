"""Hostile source files through ``runner index``: each one is reported as "file: why" with
exit 1 while the other files are still indexed, never a traceback or a hang. The files are
built here: a Markdown heading line that made the heading pattern backtrack cubically, a DOCX
that inflates far past its size on disk, PDFs pypdf fails on with errors of its own
(a self-referencing object, an unknown filter), an AES-encrypted PDF (read with the
``cryptography`` package, and a clear error without it), a PDF with no extractable text, and
an embeddings endpoint that changes its vector size between files, and a PDF whose forms draw
forms, which pypdf would read for ever: its parser's process is killed at the deadline, by
``runner index`` and by a run's wall-clock cap."""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.knowledge.documents import write_docx, write_nested_forms_pdf, write_pdf
from tests.support.project import REPO, run_cli, write_project

pytestmark = pytest.mark.timeout(300)

KNOWLEDGE = "apiVersion: runner/v1\nkind: Knowledge\nname: manuals\nsources: [docs]\n"
GOOD = "# Refunds\n\nAnnual plans are refunded pro rata within 30 days.\n"


def project(root: Path, extra_knowledge: str = "") -> Path:
    root = write_project(root, {"knowledge.d/manuals.yaml": KNOWLEDGE + extra_knowledge, "docs/good.md": GOOD})
    return root


def index(root: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = run_cli(root, None, "index", "manuals", env=env, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.returncode, done.stdout, done.stderr


def errors(stderr: str) -> list[str]:
    return [line.removeprefix("manuals: error: ") for line in stderr.splitlines() if line.startswith("manuals: error: ")]


def test_a_heading_line_of_spaces_indexes_at_once(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    (root / "docs" / "spaces.md").write_text("# a" + " " * 8000 + "b\n\nBody text.\n")
    code, out, err = index(root)
    assert code == 0, err
    assert "2 added" in out


def test_a_docx_that_inflates_past_the_limit_is_refused_and_the_rest_indexed(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    write_docx(root / "docs" / "real.docx")
    bomb = root / "docs" / "bomb.docx"
    inflate(root / "docs" / "real.docx", bomb, paragraphs=10_000_000)  # about 60 MB of XML
    assert bomb.stat().st_size < 1_000_000
    code, out, err = index(root)
    assert code == 1
    [problem] = errors(err)
    assert problem.startswith("docs/bomb.docx: bomb.docx inflates to more than 20 MB of text"), problem
    assert "2 added" in out  # good.md and real.docx


def test_a_docx_with_too_many_members_is_refused(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    with zipfile.ZipFile(root / "docs" / "many.docx", "w") as archive:
        for number in range(2_001):
            archive.writestr(f"word/media/m{number}.bin", b"")
    code, _, err = index(root)
    assert code == 1 and errors(err) == ["docs/many.docx: many.docx holds 2001 members, more than 2000"]


def inflate(source: Path, target: Path, paragraphs: int) -> None:
    """``source`` with its document body padded by empty paragraphs (compressing ~1000:1)."""
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for member in original.infolist():
            data = original.read(member)
            if member.filename == "word/document.xml":
                data = data.replace(b"<w:body>", b"<w:body>" + b"<w:p/>" * paragraphs, 1)
            out.writestr(member, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)


def test_pdfs_pypdf_fails_on_are_named_and_the_rest_indexed(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    docs = root / "docs"
    write_pdf(docs / "fine.pdf", ["Warranty: hardware is covered for 24 months."])
    good = (docs / "fine.pdf").read_bytes()
    # object 2 (the page tree) is a reference to itself
    (docs / "selfref.pdf").write_bytes(good.replace(b"2 0 obj\n<<", b"2 0 obj\n2 0 R\nendobj\n98 0 obj\n<<", 1))
    # a content stream with a filter pypdf does not implement (NotImplementedError)
    (docs / "filter.pdf").write_bytes(good.replace(b"<< /Length ", b"<< /Filter /NoSuchDecode /Length ", 1))
    # a page tree whose catalog points at itself: no page at all
    (docs / "nopages.pdf").write_bytes(good.replace(b"/Pages 2 0 R >>", b"/Pages 1 0 R >>", 1))
    # a page that draws lines but has no text
    (docs / "notext.pdf").write_bytes(good.replace(b"BT /F1 12 Tf 72 720 Td (", b"0 0 m 100 100 l S % (", 1)
                                      .replace(b") Tj ET", b")     ", 1))
    (docs / "garbage.pdf").write_bytes(b"%PDF-1.4\n" + os.urandom(2000))
    code, out, err = index(root)
    assert code == 1
    found = {line.split(":", 1)[0]: line for line in errors(err)}
    assert sorted(found) == ["docs/filter.pdf", "docs/garbage.pdf", "docs/nopages.pdf", "docs/notext.pdf", "docs/selfref.pdf"]
    assert "is not a readable PDF (AttributeError" in found["docs/selfref.pdf"]
    assert "is not a readable PDF (NotImplementedError" in found["docs/filter.pdf"]
    assert "no extractable text in 0 page(s)" in found["docs/nopages.pdf"]
    assert "no extractable text in 1 page(s)" in found["docs/notext.pdf"]
    assert "2 added" in out  # good.md and fine.pdf



def test_pdfs_with_a_damaged_xref_table_are_repaired_or_named(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    write_pdf(tmp_path / "fine.pdf", ["Warranty: hardware is covered for 24 months."])
    good = (tmp_path / "fine.pdf").read_bytes()
    docs = root / "docs"
    (docs / "far.pdf").write_bytes(re.sub(rb"startxref\n\d+", b"startxref\n999999", good))  # points past the end
    (docs / "shifted.pdf").write_bytes(re.sub(rb"(\d{10}) 00000 n", lambda m: b"%010d 00000 n" % (int(m[1]) + 7), good))
    (docs / "looped.pdf").write_bytes(good.replace(b"trailer\n<<", b"trailer\n<< /Prev 0", 1))  # an xref chain into itself
    (docs / "cut.pdf").write_bytes(good[: good.index(b"xref")] + b"xref\n0 9\n0000000000 65535 f \n00000")
    code, out, err = index(root)
    assert code == 1
    [problem] = errors(err)
    assert problem.startswith("docs/cut.pdf: cut.pdf is not a readable PDF ("), problem
    assert "4 added" in out  # good.md and the three pypdf repairs

def aes_pdf(plain: Path, target: Path) -> None:
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(plain))
    writer.encrypt(user_password="", owner_password="vendor-owner", algorithm="AES-256")
    with target.open("wb") as handle:
        writer.write(handle)


def test_an_aes_pdf_that_opens_without_a_password_is_indexed(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    write_pdf(tmp_path / "plain.pdf", ["Manual: reset the router by holding the button for 10 seconds."])
    aes_pdf(tmp_path / "plain.pdf", root / "docs" / "manual.pdf")
    code, out, err = index(root)
    assert code == 0, err
    assert "2 added" in out


def test_an_aes_pdf_without_the_cryptography_package_is_a_clear_error(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    write_pdf(tmp_path / "plain.pdf", ["Manual: reset the router by holding the button for 10 seconds."])
    aes_pdf(tmp_path / "plain.pdf", root / "docs" / "manual.pdf")
    blocker = tmp_path / "blocker" / "cryptography"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('not installed (blocked by the test)')\n")
    code, out, err = index(root, env={"PYTHONPATH": os.pathsep.join([str(REPO), str(blocker.parent)])})
    assert code == 1
    assert errors(err) == [
        "docs/manual.pdf: manual.pdf is AES-encrypted: reading it needs the 'cryptography' package "
        "(pip install 'runner[knowledge]')"
    ]
    assert "1 added" in out


def test_a_pdf_that_needs_a_password_says_so(tmp_path: Path) -> None:
    import pypdf

    root = project(tmp_path / "p")
    write_pdf(tmp_path / "plain.pdf", ["Secret."])
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(tmp_path / "plain.pdf"))
    writer.encrypt(user_password="hunter2", owner_password="owner", algorithm="AES-128")
    with (root / "docs" / "locked.pdf").open("wb") as handle:
        writer.write(handle)
    code, _, err = index(root)
    assert code == 1
    assert errors(err) == ["docs/locked.pdf: locked.pdf is encrypted with a password; give an unencrypted copy"]


class ChangingEmbeddings:
    """An OpenAI-compatible ``/v1/embeddings`` on loopback whose vectors have 3 dimensions for
    texts that mention ``Zebra`` and 2 for the others (a model swapped behind one name)."""

    def __enter__(self) -> ChangingEmbeddings:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
                data = [
                    {"object": "embedding", "index": i, "embedding": [0.6, 0.8, 0.0] if "Zebra" in t else [0.6, 0.8]}
                    for i, t in enumerate(texts)
                ]
                answer = json.dumps({"object": "list", "data": data, "model": body["model"],
                                     "usage": {"prompt_tokens": 3, "total_tokens": 3}}).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def changing() -> Iterator[ChangingEmbeddings]:
    with ChangingEmbeddings() as server:
        yield server


def test_an_endpoint_that_changes_vector_size_names_the_file_and_both_sizes(tmp_path: Path, changing: ChangingEmbeddings) -> None:
    embeddings = f"embeddings: {{model: text-embedding-3-small, base_url: '{changing.base_url}', api_key_env: TEST_EMBED_KEY}}\n"
    root = project(tmp_path / "p", embeddings)
    (root / "docs" / "zoo.md").write_text("# Zoo\n\nThe Zebra enclosure opens at nine.\n")
    done = run_cli(root, None, "index", "manuals", env={"TEST_EMBED_KEY": "sk-embed-0123456789"}, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 1
    assert errors(done.stderr) == [
        "docs/zoo.md: the embeddings endpoint (text-embedding-3-small) returned vectors of 3 dimensions, but the index "
        "holds 2; the model behind the endpoint changed: rebuild the index (delete it) or point at the same model"
    ]
    assert "1 added" in done.stdout


def processes_marked(mark: str) -> list[int]:
    """Processes whose environment holds ``mark`` (a CLI process's children inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # gone, or not ours to read
    return found


def test_a_parse_that_would_never_end_is_killed_at_its_deadline_and_the_rest_indexed(tmp_path: Path) -> None:
    root = project(tmp_path / "p", "parsing: {max_seconds: 5}\n")  # fine.pdf's read imports pypdf: seconds on a loaded machine
    write_pdf(root / "docs" / "fine.pdf", ["Warranty: hardware is covered for 24 months."])
    write_nested_forms_pdf(root / "docs" / "forms.pdf")  # 10**12 form drawings; good.md is read after it
    mark = uuid.uuid4().hex
    code, out, err = index(root, env={"RUNNER_TEST_MARK": mark})
    assert code == 1, err
    assert errors(err) == ["docs/forms.pdf: forms.pdf took longer than 5 s to read (its parser was stopped); split or simplify it"]
    assert "2 added" in out  # fine.pdf before it, good.md after it (in a new process)
    assert processes_marked(mark) == []  # no parser left running
    again = run_cli(root, None, "index", "manuals", timeout=120)
    assert again.returncode == 1 and "0 added" in again.stdout and "2 unchanged" in again.stdout  # tried again, not kept


def test_a_runs_wall_cap_kills_the_parse_it_waits_for(tmp_path: Path) -> None:
    agent = "apiVersion: runner/v1\nkind: Agent\nname: reader\nmodel: {id: gpt-4o-mini, max_tokens: 50}\ntools: [search_knowledge]\nknowledge: [manuals]\n"
    task = "apiVersion: runner/v1\nkind: Task\nname: look_up\nagent: reader\ngoal: Find the refund rule.\n"
    root = project(tmp_path / "p", "parsing: {max_seconds: 3600}\n")
    write_project(root, {"agents.d/reader.yaml": agent, "tasks.d/look_up.yaml": task})
    write_nested_forms_pdf(root / "docs" / "forms.pdf")
    mark = uuid.uuid4().hex
    with ScriptedServer({"rules": [{"reply": "Refunds are pro rata."}]}) as server:
        done = run_cli(root, server, "run", "look_up", "--max-wall-seconds", "3", env={"RUNNER_TEST_MARK": mark}, timeout=240)
        assert server.requests == []  # capped while reading its sources
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 3, done.stdout + done.stderr[-2000:]
    assert "max_wall_seconds" in done.stdout + done.stderr, done.stdout + done.stderr[-2000:]
    assert processes_marked(mark) == []
