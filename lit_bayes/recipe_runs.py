"""One cell of a recipe's grid: a ``lit-bayes fit`` run in its own directory, read back from its
``summary.json`` (DESIGN.md, machine-readable results). Recipe scripts loop over cells and print
the paper's table beside the summaries; a cell whose run finished is read, not run again, and one
that was interrupted continues from its last checkpoint, so an interrupted grid continues where it
stopped."""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["fit_cell", "fit_run", "settings_overrides"]


def fit_run(configs: Sequence[str | os.PathLike], root: str | os.PathLike, overrides: Sequence[str] = (),
            resume: bool = False) -> Path:
    """``lit-bayes fit -c <configs...> --trainer.default_root_dir root <overrides>`` (no W&B; no progress
    bar, :class:`lit_bayes.callbacks.ProgressLog`'s lines instead) in this process; ``resume`` continues
    from the newest ``last.ckpt`` under ``root`` (``--ckpt_path``). Returns the run's log directory, the
    newest ``root/version_<n>`` (``root`` when the overrides turn the logger off)."""
    from lit_bayes.cli import last_checkpoint, main

    root = Path(root)
    checkpoint = last_checkpoint(root) if resume else None
    main(["fit", *(arg for config in configs for arg in ("-c", str(config))), "--wandb", "false",
          "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(root), *overrides,
          *(["--ckpt_path", str(checkpoint)] if checkpoint else [])])
    versions = list(root.glob("version_*"))
    return max(versions, key=lambda path: int(path.name.split("_")[1])) if versions else root


def fit_cell(config: str | os.PathLike, directory: str | os.PathLike, overrides: Sequence[str] = (),
             rerun: bool = False) -> dict:
    """One cell of a grid: :func:`fit_run` of ``config`` without a logger, writing ``summary.json``,
    ``config.yaml``, the checkpoint and the sample store (when on disk) under ``directory``; returns the
    summary. With ``rerun=False`` a directory whose summary already holds test metrics is read instead
    of run again, and an unfinished run (killed or interrupted: no test metrics) continues from its
    ``last.ckpt`` (the same chains, as if never stopped); ``rerun=True`` starts afresh."""
    directory = Path(directory)
    summary = directory / "summary.json"
    if not rerun and summary.exists():
        done = json.loads(summary.read_text())
        if any(key.startswith("test/") for key in done.get("metrics", {})):
            return done
    summary.unlink(missing_ok=True)  # a stale, unfinished summary would be merged into
    fit_run([config], directory, ["--trainer.logger", "false", "--summary.directory", str(directory), *overrides],
            resume=not rerun)
    return json.loads(summary.read_text())


def settings_overrides(settings: dict[str, object]) -> list[str]:
    """``{"model.init_args.step_size": 1e-3, ...}`` as ``["--model.init_args.step_size", "0.001", ...]``
    (lists as JSON, ``None`` as ``null``; keys already starting with ``--`` are kept)."""
    args: list[str] = []
    for key, value in settings.items():
        text = json.dumps(value) if isinstance(value, (list, tuple, dict, type(None), bool)) else str(value)
        args += [key if key.startswith("--") else f"--{key}", text]
    return args
