"""One cell of a recipe's grid: a ``lit-bayes fit`` run in its own directory, read back from its
``summary.json`` (DESIGN.md, machine-readable results). Recipe scripts loop over cells and print
the paper's table beside the summaries; a cell whose run finished is read, not run again, and one
that was interrupted continues from its last checkpoint, so an interrupted grid continues where it
stopped. Every table a script prints carries its runs' health verdicts (:func:`verdict_lines`)."""
from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["finished_summary", "fit_cell", "fit_run", "health_verdict", "settings_overrides", "verdict_lines"]

#: runs named one by one in the loud line of :func:`verdict_lines`; the rest are counted
NAMED_RUNS = 12


def fit_run(configs: Sequence[str | os.PathLike], root: str | os.PathLike, overrides: Sequence[str] = (),
            resume: bool = False) -> Path:
    """``lit-bayes fit -c <configs...> --trainer.default_root_dir root <overrides>`` (no W&B; no progress
    bar, :class:`lit_bayes.callbacks.ProgressLog`'s lines instead) in this process; ``resume`` continues
    from the newest checkpoint under ``root`` (``--ckpt_path``). Returns the run's log directory, the
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
    done = None if rerun else finished_summary(directory)
    if done is not None:
        return done
    summary = directory / "summary.json"
    summary.unlink(missing_ok=True)  # a stale, unfinished summary would be merged into
    fit_run([config], directory, ["--trainer.logger", "false", "--summary.directory", str(directory), *overrides],
            resume=not rerun)
    return json.loads(summary.read_text())


def finished_summary(directory: str | os.PathLike) -> dict | None:
    """The ``summary.json`` of the run in ``directory`` when the run finished (its summary holds test
    metrics), else None."""
    summary = Path(directory) / "summary.json"
    if not summary.exists():
        return None
    done = json.loads(summary.read_text())
    return done if any(key.startswith("test/") for key in done.get("metrics", {})) else None


def settings_overrides(settings: dict[str, object]) -> list[str]:
    """``{"model.init_args.step_size": 1e-3, ...}`` as ``["--model.init_args.step_size", "0.001", ...]``
    (lists as JSON, ``None`` as ``null``; keys already starting with ``--`` are kept)."""
    args: list[str] = []
    for key, value in settings.items():
        text = json.dumps(value) if isinstance(value, (list, tuple, dict, type(None), bool)) else str(value)
        args += [key if key.startswith("--") else f"--{key}", text]
    return args


def health_verdict(summary: dict) -> str:
    """A run's health verdict from its ``summary.json``: ``ok``, ``warning`` or ``failed``
    (:mod:`lit_bayes.health`); ``missing`` for a summary without one."""
    return summary.get("health", {}).get("verdict", "missing")


def verdict_lines(verdicts: Mapping[str, str], consequence: str) -> list[str]:
    """What a recipe prints under its table about the runs behind it (run name to
    :func:`health_verdict`): the count of each verdict and, when any run is not ``ok``, a loud line
    naming those runs (the first ``NAMED_RUNS``) with ``consequence``, what that means for the table."""
    counts = Counter(verdicts.values())
    lines = [f"health verdicts of the {len(verdicts)} run(s): "
             + ", ".join(f"{counts[v]} {v}" for v in ("ok", "warning", "failed", "missing") if counts[v])]
    unsettled = [f"{name} ({verdict})" for name, verdict in verdicts.items() if verdict != "ok"]
    if unsettled:
        named = ", ".join(unsettled[:NAMED_RUNS]) + (f" and {len(unsettled) - NAMED_RUNS} more"
                                                     if len(unsettled) > NAMED_RUNS else "")
        lines.append(f"NOT CONVERGED: the verdict of {named} is not ok (the reasons and fixes: each run's "
                     f"summary.json, 'health'): {consequence}")
    return lines
