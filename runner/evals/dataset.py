"""An eval's files, read as carefully as the prompt files: the dataset and the baseline.

The dataset is copied once per ``runner eval``, through a descriptor opened beneath the
project root without following links (:func:`runner.config.project_files.open_in_project`),
into the eval's output folder; every variant's batch and the expected values are read from
that copy. So a link swapped in after ``runner validate``, a hard link, a FIFO or a file
that grows while it is read cannot make an eval read outside the project, hang, or check
cases against other bytes than it ran; and the copy's SHA-256 names the variants' journals,
so a changed dataset starts afresh instead of resuming another one's results.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

from runner.config.evals import EvalSpec
from runner.config.project_files import MAX_DATASET_BYTES, FileRefused, dataset_problem, open_in_project
from runner.errors import UsageError
from runner.files import write_atomic

_CHUNK = 1 << 20


def snapshot_dataset(spec: EvalSpec, root: Path, out_dir: Path) -> tuple[EvalSpec, str]:
    """``spec`` reading its dataset from a copy under ``out_dir``, and the copy's SHA-256."""
    reference = spec.dataset.reference or str(spec.dataset.path.relative_to(root))
    try:
        with open_in_project(reference, root) as source:
            data, digest = _read_capped(source, reference)
    except FileRefused as exc:
        raise UsageError(f"{spec.source}: /dataset/path: {exc}") from None
    copy = out_dir / "dataset" / spec.dataset.path.name
    write_atomic(copy, data)
    return replace(spec, dataset=replace(spec.dataset, path=copy)), digest


def _read_capped(source: BinaryIO, reference: str) -> tuple[bytes, str]:
    digest, parts, size = hashlib.sha256(), [], 0
    while chunk := source.read(_CHUNK):
        size += len(chunk)
        if size > MAX_DATASET_BYTES:
            raise FileRefused(f"'{reference}' grew past {MAX_DATASET_BYTES} bytes while being read; eval datasets are limited to that")
        digest.update(chunk)
        parts.append(chunk)
    return b"".join(parts), digest.hexdigest()


def baseline_bytes(path: Path) -> bytes | None:
    """A stored baseline's bytes, ``None`` when there is none yet; :class:`UsageError` for a
    FIFO, a device, a directory or a file over :data:`MAX_DATASET_BYTES` (never blocks)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"baseline {path}: cannot be read ({os.strerror(exc.errno or 0)})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"baseline {path}: not a regular file; give the JSON file --save-baseline wrote")
        data = handle.read(MAX_DATASET_BYTES + 1)
    if len(data) > MAX_DATASET_BYTES:
        raise UsageError(f"baseline {path}: larger than {MAX_DATASET_BYTES} bytes; give the JSON file --save-baseline wrote")
    return data


def baseline_target_problem(spec: EvalSpec, root: Path, explicit: Path | None) -> str | None:
    """Why ``--save-baseline`` may not write the eval's own baseline (it must stay inside the
    project, not through a link out); a path given with ``--baseline`` is the caller's choice."""
    if explicit is not None or spec.baseline is None:
        return None
    reference = str(spec.baseline.relative_to(root)) if spec.baseline.is_relative_to(root) else str(spec.baseline)
    return dataset_problem(reference, root, what="baselines", must_exist=False)
