"""Small real documents of every supported type, written by the tests themselves."""

from __future__ import annotations

import zlib
from pathlib import Path

BILLING_MD = """\
# Billing

Invoices are sent on the first of each month.

## Refunds

Annual plans are refunded pro rata within 30 days of purchase.

Monthly plans are not refunded, but you can cancel at any time.

## Payment methods

We accept Visa, Mastercard and SEPA direct debit.
"""

INSTALL_MD = """\
# Installing Widgetizer

Run the installer as an administrator. On Linux use `sudo dpkg -i widgetizer.deb`.

## Troubleshooting

Error E42 means the licence server cannot be reached: check that port 7443 is open.
"""

FAQ_HTML = """\
<html><head><title>FAQ</title></head><body>
<nav><a href="/">Home</a> | <a href="/pricing">Pricing</a></nav>
<article>
<h1>Frequently asked questions</h1>
<h2>Can I change my plan?</h2>
<p>You can switch between the Starter and Team plans from the account page; the change applies at the next invoice.</p>
<h2>Is there a student discount?</h2>
<p>Students get 40 percent off the Team plan with a valid university email address.</p>
</article>
<footer>Copyright Widgetizer Ltd</footer>
</body></html>
"""

NOTES_TXT = "Support hours are 08:00 to 18:00 CET on working days.\n\nUrgent outages are handled around the clock.\n"


def write_docx(path: Path) -> None:
    """A DOCX with heading styles, written with python-docx."""
    import docx

    document = docx.Document()
    document.add_heading("Security policy", level=1)
    document.add_paragraph("All customer data is encrypted at rest with AES-256.")
    document.add_heading("Data retention", level=2)
    document.add_paragraph("Deleted projects are purged from backups after 35 days.")
    document.save(str(path))


def write_pdf(path: Path, pages: list[str]) -> None:
    """A minimal valid PDF (Helvetica text, one line per page), with a correct xref table."""
    objects: list[bytes] = []
    count = len(pages)
    page_ids = [3 + 2 * i for i in range(count)]
    font_id = 3 + 2 * count
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    kids = " ".join(f"{i} 0 R" for i in page_ids)
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode())
    for i, text in enumerate(pages):
        content_id = page_ids[i] + 1
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content_id} 0 R "
            f"/Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode()
        )
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode()
        objects.append(b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    _write_pdf_objects(path, objects)


def write_nested_forms_pdf(path: Path, depth: int = 5, fanout: int = 10, leaf_operations: int = 100_000) -> None:
    """A one-page PDF of a few KB whose page draws a form that draws the next form ``fanout``
    times, ``depth`` deep; the last form holds ``leaf_operations`` (empty) text operations,
    deflated. A text extractor that follows forms (pypdf does, up to 5,000 drawings) parses
    the last form each time it is drawn: about 10**8 operations here, hours of reading. The
    page has text of its own."""
    form = 6
    page = b"BT /F1 12 Tf 72 720 Td (Nested forms.) Tj ET /X Do"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        f"/Resources << /Font << /F1 5 0 R >> /XObject << /X {form} 0 R >> >> >>".encode(),
        _stream(b"", page),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    kind = b"/Type /XObject /Subtype /Form /BBox [0 0 10 10] "
    for level in range(depth - 1):
        draws = b" ".join([b"/X Do"] * fanout)
        objects.append(_stream(kind + f"/Resources << /XObject << /X {form + level + 1} 0 R >> >> ".encode(), draws))
    leaf = zlib.compress(b"BT /F1 1 Tf () Tj ET " * leaf_operations, 9)
    objects.append(_stream(kind + b"/Resources << /Font << /F1 5 0 R >> >> /Filter /FlateDecode ", leaf))
    _write_pdf_objects(path, objects)


def _stream(entries: bytes, data: bytes) -> bytes:
    return b"<< " + entries + b"/Length " + str(len(data)).encode() + b" >>\nstream\n" + data + b"\nendstream"


def _write_pdf_objects(path: Path, objects: list[bytes]) -> None:
    """``objects`` numbered from 1 (the first is the catalog), with a correct xref table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))


def write_docs(folder: Path) -> Path:
    """Every kind of document under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "billing.md").write_text(BILLING_MD)
    (folder / "install.md").write_text(INSTALL_MD)
    (folder / "faq.html").write_text(FAQ_HTML)
    (folder / "notes.txt").write_text(NOTES_TXT)
    write_docx(folder / "security.docx")
    write_pdf(folder / "warranty.pdf", ["Warranty: hardware is covered for 24 months.", "Claims need the serial number WX-2231."])
    return folder
