"""Where a ``lit-bayes`` command writes: a new ``<root>/version_<n>`` directory, or, for a fit that resumes a
run of the same root, that run's own directory; and removing the directory of a start that failed.

A resumed fit continues the run's ``metrics.csv`` (the rows up to the checkpoint's step are kept: the
steps after it run again), and its ``summary.json``, plots and checkpoints replace the earlier ones.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import warnings
from pathlib import Path

import torch
import yaml
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities import rank_zero_only

from lit_bayes.run_loading import run_directory

__all__ = ["START_FILES", "check_checkpoint_path", "check_resumed_data", "claim_run_directory", "continue_metrics",
           "remove_failed_start", "resumed_run_directory"]

# what a command writes into its directory before its first step: a failed start leaves only these
START_FILES = frozenset({"config.yaml", "hparams.yaml"})
# ckpt_path values that Lightning resolves itself rather than as a file path
SPECIAL_CHECKPOINTS = frozenset({"last", "best", "hpc", "registry"})


def check_checkpoint_path(ckpt_path: str | os.PathLike | None) -> None:
    """Raise a ``ValueError`` naming ``--ckpt_path`` when it is a local path with no file there (before the
    command makes its log directory). Lightning's special values and remote URLs are left to Lightning."""
    if ckpt_path is None:
        return
    text = str(ckpt_path)
    if text in SPECIAL_CHECKPOINTS or text.startswith("registry:") or "://" in text:
        return
    if not Path(text).is_file():
        raise ValueError(f"--ckpt_path: no checkpoint file at {text!r}")


def claim_run_directory(root: str | os.PathLike) -> str:
    """The name ``version_<n>`` of a new run directory under ``root``, made here: the number after the highest
    there, or the next free one, each tried with ``os.mkdir``, which fails when the directory exists. Two runs
    started at the same moment on the same root so take different numbers (a logger that lists the versions and
    then makes its directory lets both take the same)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name[len("version_"):]) for p in root.glob("version_*") if p.name[len("version_"):].isdigit()]
    number = max(taken, default=-1) + 1
    while True:
        try:
            (root / f"version_{number}").mkdir()
            return f"version_{number}"
        except FileExistsError:
            number += 1


def _as_saved(value: object) -> str:
    """A config leaf that JSON does not take as a saved config writes it: a function by its import path, any
    other object (a path) as text."""
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{value.__module__}.{value.__qualname__}"
    return str(value)


def _flat(value: object, prefix: str = "") -> dict[str, object]:
    """A nested config section as ``{"a.b.c": leaf}``, leaves through JSON (:func:`_as_saved`)."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


def check_resumed_data(ckpt_path: str | os.PathLike | None, data: object) -> None:
    """Raise a ``ValueError`` when a fit resumed from ``ckpt_path`` would train on other data than the run it
    continues: its ``data`` section (the command's, any mapping) differs from the ``config.yaml`` saved in the
    checkpoint's run directory, naming every differing setting. Nothing to compare (no file there, a run
    without a saved config) passes."""
    if ckpt_path is None or not Path(ckpt_path).is_file():
        return
    saved_file = run_directory(ckpt_path) / "config.yaml"
    if not saved_file.is_file():
        return
    saved = (yaml.safe_load(saved_file.read_text()) or {}).get("data")
    if saved is None:
        return
    given, kept = (_flat(json.loads(json.dumps(section, default=_as_saved))) for section in (data, saved))
    differ = sorted(key for key in given.keys() | kept.keys() if given.get(key) != kept.get(key))
    if differ:
        pairs = "; ".join(f"data.{key}: {given.get(key)!r} given, {kept.get(key)!r} in the run" for key in differ)
        raise ValueError(f"--ckpt_path continues a run trained on other data settings ({pairs}): a chain continued "
                         f"on other data is neither run; start a new run, or resume with the run's {saved_file}")


def resumed_run_directory(ckpt_path: str | os.PathLike | None, root: str | os.PathLike) -> Path | None:
    """The run directory ``<root>/<version>`` that ``ckpt_path`` (``<run_dir>/checkpoints/<name>.ckpt``)
    belongs to, or ``None`` (no checkpoint, or one of a run under another root or of no run directory)."""
    if ckpt_path is None or not Path(ckpt_path).is_file():
        return None
    path = Path(ckpt_path).resolve()
    if path.parent.name != "checkpoints":
        return None
    directory = run_directory(path)
    return directory if directory.parent == Path(root).resolve() else None


def _step(row: dict[str, str]) -> float:
    try:
        return float(row.get("step") or "nan")
    except ValueError:
        return float("nan")


@rank_zero_only
def continue_metrics(logger: CSVLogger, ckpt_path: str | os.PathLike) -> None:
    """Open ``logger``'s writer on the resumed run's directory, keeping the rows of its ``metrics.csv``
    up to the checkpoint's step (Lightning's writer deletes an existing file when it opens a directory
    that is not empty; new rows are appended under the same header)."""
    path = Path(logger.log_dir) / "metrics.csv"
    header, rows = [], []
    if path.is_file():
        last_step = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True).get("global_step", 0)
        with path.open(newline="") as file:
            reader = csv.DictReader(file)
            header = list(reader.fieldnames or [])
            rows = [row for row in reader if _step(row) <= last_step]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"Experiment logs directory .* exists and is not empty")
        writer = logger.experiment
    if header:
        with path.open("w", newline="") as file:
            out = csv.DictWriter(file, fieldnames=header)
            out.writeheader()
            out.writerows(rows)
        writer.metrics_keys = header


def remove_failed_start(directory: Path) -> bool:
    """Remove ``directory`` (made by this command) when it holds nothing but what a command writes before
    its first step (:data:`START_FILES`, W&B's folder, empty folders); returns whether it did."""
    if not directory.is_dir():
        return False
    written = [p.relative_to(directory) for p in directory.rglob("*") if p.is_file()]
    if any(p.parts[0] != "wandb" and not (len(p.parts) == 1 and p.name in START_FILES) for p in written):
        return False
    shutil.rmtree(directory)
    return True
