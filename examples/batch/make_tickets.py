"""Generate ``tickets.csv``: deterministic, realistic customer-support tickets for the batch example.

Run ``python examples/batch/make_tickets.py`` (optionally ``--rows N --out PATH``); the same
arguments always produce the same bytes. Columns: ``id``, ``subject``, ``body``, ``product``,
``priority`` (``low``/``normal``/``high``/``urgent``), ``created_on`` (``YYYY-MM-DD``).

A few rows carry what real exports carry: quotes, commas and line breaks inside a body,
accented letters and emoji, and one body that starts with ``=`` (a formula-injection attempt
that the CSV output must escape).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import random
from pathlib import Path

SEED = 20240611
PRODUCTS = ("Acme Mail", "Acme Cloud Backup", "Acme POS Terminal", "Acme Mobile App", "Acme Billing Portal", "Acme VPN")
PRIORITIES = ("low", "normal", "normal", "normal", "high", "high", "urgent")
NAMES = ("Dana", "Luis", "Priya", "Tom", "Mei", "Olu", "Sven", "Aisha", "Marco", "Yuki", "Chloé", "Jürgen")
DEVICES = ("iPhone 14", "Pixel 8", "Galaxy S23", "Windows 11 laptop", "MacBook Air", "iPad", "Chromebook")
ERRORS = ("E-1042", "ERR_TIMEOUT", "500 Internal Server Error", "SYNC_CONFLICT", "AUTH_EXPIRED", "E-2210")

ISSUES = (
    (
        "Charged twice for {month} invoice",
        "I was billed twice for the {month} invoice ({amount} each). Order {order}. "
        "Please refund the duplicate charge.",
    ),
    (
        "Cannot log in after password reset",
        "Since resetting my password yesterday, {product} says 'invalid "
        "credentials' on my {device}. I have tried three times and am now locked out.",
    ),
    (
        "{product} crashes on startup",
        "After updating to version {version}, {product} closes immediately on my "
        "{device}. Reinstalling did not help. Error code {error}.",
    ),
    (
        "Sync is very slow",
        "Syncing {count} files takes over {hours} hours with {product}. It used to take minutes. "
        "My connection is fine (other apps are fast).",
    ),
    (
        "Feature request: export to CSV",
        "It would save our team a lot of time if {product} could export reports "
        "to CSV. We currently copy {count} rows by hand every week.",
    ),
    (
        "Missing data after update",
        "Some of my records disappeared after the {version} update. About {count} "
        "entries from last month are gone. This is urgent for our audit.",
    ),
    (
        "Terminal not printing receipts",
        "Our {product} stopped printing receipts this morning at store #{store}. "
        "Paper is loaded, the light is green, error {error} on screen.",
    ),
    (
        "How do I change my plan?",
        "I'd like to move from the monthly to the annual plan for {product}. "
        "Where can I do that, and will I be charged the difference today?",
    ),
    (
        "VPN disconnects every few minutes",
        "{product} drops the connection every {minutes} minutes on my "
        "{device}, so video calls freeze. Logs show {error}.",
    ),
    (
        "Wrong VAT on invoice",
        "Invoice {order} shows VAT at 20% but we are a registered business in another EU "
        "country and should be reverse-charged. Please reissue it.",
    ),
    (
        "Two-factor codes not arriving",
        "I am not receiving the SMS codes for {product}. I checked that my number "
        "is correct. I travel a lot, could that matter?",
    ),
    (
        "Thank you!",
        "Just wanted to say that {name} from your team fixed my {product} issue in ten minutes. Great service.",
    ),
)
# Issues that only make sense for some products; the others fit any product.
_PRODUCTS_FOR = {
    "Charged twice for {month} invoice": ("Acme Billing Portal", "Acme Mail", "Acme Cloud Backup", "Acme VPN"),
    "Terminal not printing receipts": ("Acme POS Terminal",),
    "Sync is very slow": ("Acme Cloud Backup", "Acme Mail", "Acme Mobile App"),
    "Wrong VAT on invoice": ("Acme Billing Portal",),
    "VPN disconnects every few minutes": ("Acme VPN",),
    "{product} crashes on startup": ("Acme Mail", "Acme Mobile App", "Acme VPN", "Acme Cloud Backup"),
    "Missing data after update": ("Acme Cloud Backup", "Acme Mail", "Acme Billing Portal", "Acme POS Terminal"),
}
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October")
# Rows that exercise CSV quoting, Unicode and formula escaping, at fixed positions.
SPECIAL = {
    17: (
        'Invoice "INV-0091", wrong address',
        'The invoice says "Main St, 12" but we moved,\nnew address:\nRue de l\'Église 4, Genève.',
    ),
    250: ("App freezes 😩", "Since the last update the app freezes when I open the camera. Merci d'avance, Chloé."),
    613: (
        '=HYPERLINK("http://example.invalid","Click")',
        "=1+2 this body starts with an equals sign; the output CSV must show it as text.",
    ),
}


def ticket(index: int, rng: random.Random) -> dict[str, str]:
    """One ticket; ``index`` is 1-based."""
    subject, body = rng.choice(ISSUES)
    product = rng.choice(_PRODUCTS_FOR.get(subject, PRODUCTS))
    values = {
        "product": product,
        "month": rng.choice(MONTHS),
        "amount": f"${rng.randint(9, 499)}.{rng.randint(0, 99):02d}",
        "order": f"ORD-{rng.randint(100000, 999999)}",
        "device": rng.choice(DEVICES),
        "version": f"{rng.randint(2, 6)}.{rng.randint(0, 19)}.{rng.randint(0, 9)}",
        "error": rng.choice(ERRORS),
        "count": str(rng.randint(20, 5000)),
        "hours": str(rng.randint(2, 12)),
        "minutes": str(rng.randint(2, 15)),
        "store": str(rng.randint(1, 240)),
        "name": rng.choice(NAMES),
    }
    subject, body = SPECIAL.get(index, (subject.format(**values), body.format(**values)))
    signature = f"\n\n{rng.choice(NAMES)}" if rng.random() < 0.3 else ""
    created = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 180))
    return {
        "id": f"T-{index:05d}",
        "subject": subject,
        "body": body + signature,
        "product": product,
        "priority": rng.choice(PRIORITIES),
        "created_on": created.isoformat(),
    }


def write_tickets(path: Path, rows: int) -> None:
    rng = random.Random(SEED)
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=["id", "subject", "body", "product", "priority", "created_on"])
        writer.writeheader()
        for index in range(1, rows + 1):
            writer.writerow(ticket(index, rng))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1200)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("tickets.csv"))
    args = parser.parse_args()
    write_tickets(args.out, args.rows)
    print(f"wrote {args.rows} tickets to {args.out}")


if __name__ == "__main__":
    main()
