"""Shared by the FNBG grid scripts: run one recipe with ``lit-bayes fit``, find its run, print a table."""
from __future__ import annotations

import json
import math
from pathlib import Path

from lit_bayes.cli import last_checkpoint
from lit_bayes.recipe_runs import fit_run
from lit_bayes.run_loading import RunPosterior, load_run

HERE = Path(__file__).resolve().parent
#: what an XOR run whose verdict is not ok means for its per-chain table (:func:`verdict_lines`)
CHAINS_UNCONVERGED = ("its chains' accuracies are not draws of one posterior (chains in separate modes or not yet "
                      "stationary)")


def scaled(sweeps: int, batches_per_epoch: int) -> list[str]:
    """Overrides for a run of ``sweeps`` sweeps with the paper's proportions (1/11 burn-in,
    the last 10,000 draws or fewer) and a checkpoint about every 5,000 sweeps."""
    burn_in, epochs = sweeps // 11, math.ceil(sweeps / batches_per_epoch)
    every = min(epochs, math.ceil(5_000 / batches_per_epoch))
    return ["--trainer.max_epochs", str(epochs), "--checkpoint.every_n_epochs", str(every),
            "--model.init_args.burn_in", str(burn_in), "--samples.max_draws", str(min(10_000, sweeps - burn_in))]


def fit(configs: list[str], root: str | Path, overrides: list[str] = (), resume: bool = False) -> Path:
    """:func:`lit_bayes.recipe_runs.fit_run` of this folder's ``configs`` under ``root``; returns the
    run's directory, ``<root>/version_<n>``."""
    return fit_run([HERE / config for config in configs], root, overrides, resume)


def summary(run_dir: Path) -> dict:
    """The run's ``summary.json``."""
    return json.loads((run_dir / "summary.json").read_text())


def kept_draws(run_dir: Path) -> RunPosterior:
    """The run's kept draws; a run resumed at its end saved no checkpoint of its own, so they are
    read from the newest checkpoint of the runs beside it."""
    return load_run(run_dir, checkpoint=last_checkpoint(run_dir.parent))


def show(title: str, header: list[str], rows: list[list]) -> None:
    print(f"\n{title}")
    print(" | ".join(f"{h:>14}" for h in header))
    for row in rows:
        print(" | ".join(f"{v:>14.4g}" if isinstance(v, float) else f"{str(v):>14}" for v in row))
