"""Tutorial: the SG-MCMC baselines (SGLD, pSGLD, SGHMC) on a small-data classifier, against MAP.

Two moons with 50 training points, an MLP(2, 32, 32, 1) with tanh units and a N(0, 1) prior:
with so few points a single fitted network is overconfident, and averaging over posterior
draws should give a better test NLPD and calibration. Each stepper runs 8 chains from prior
draws; the first half of the run is burn-in, and 100 draws per chain are kept from the second.

    python docs/tutorials/sgmcmc.py            # full size
    python docs/tutorials/sgmcmc.py --quick    # reduced size, for CI
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger

from lit_bayes import SGMCMC, Bernoulli, GaussianPrior
from lit_bayes.callbacks import (
    ChainDiagnostics,
    MAPBaseline,
    PosteriorSamples,
    PredictiveMarginal,
    RunHealth,
    RunSummary,
    UncertaintyMetrics,
)
from lit_bayes.data import TwoMoons
from lit_bayes.models import MLP

# stepper -> (step size, stepper options)
STEPPERS = {
    "sgld": (2e-3, {}),
    "psgld": (2e-3, {"alpha": 0.99}),
    "sghmc": (2e-2, {"friction": 1.0}),
}


def run(stepper: str, epochs: int, map_steps: int, out: Path) -> dict:
    """Sample with one stepper, test, and return the run's ``summary.json``."""
    step_size, options = STEPPERS[stepper]
    sampler = SGMCMC(
        MLP([2, 32, 32, 1], activation="tanh"), Bernoulli(), GaussianPrior(variance=1.0),
        stepper=stepper, step_size=step_size, stepper_options=options,
        num_chains=8, burn_in=0.5, num_draws=100, init="prior", seed=0,
    )
    data = TwoMoons(num_train=50, num_val=200, num_test=1000, noise=0.3, batch_size=10, seed=0)
    callbacks = [
        PosteriorSamples(max_draws=100),  # the kept draws
        PredictiveMarginal(),             # their averaged predictive on val/test batches
        UncertaintyMetrics(),             # accuracy, NLPD, ECE, Brier of that predictive
        ChainDiagnostics(),               # per-chain traces, R-hat, ESS
        RunHealth(),                      # the verdict: ok / warning / failed, printed at the end of fit
        MAPBaseline(steps=map_steps),     # a MAP fit of the same network (Adam), scored beside the posterior
        RunSummary(),                     # everything above in <log_dir>/summary.json
    ]
    trainer = L.Trainer(
        max_epochs=epochs, callbacks=callbacks, logger=CSVLogger(out, name=stepper),
        check_val_every_n_epoch=epochs, log_every_n_steps=5, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(sampler, datamodule=data)
    trainer.test(sampler, datamodule=data, verbose=False)
    return json.loads(Path(trainer.log_dir, "summary.json").read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced size (a few seconds per stepper)")
    parser.add_argument("--out", type=Path, default=Path("runs/tutorials/sgmcmc"), help="log directory")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # tiny network: one thread is fastest
    epochs, map_steps = (60, 300) if args.quick else (1600, 2000)  # an epoch is 5 steps (batches of 10)

    rows = {name: run(name, epochs, map_steps, args.out) for name in STEPPERS}
    print(f"\n{'sampler':<8} {'verdict':<8} {'fs R-hat':>8} {'accuracy':>8} {'NLPD':>7} {'ECE':>7}")
    for name, summary in rows.items():
        m = summary["metrics"]
        print(f"{name:<8} {summary['health']['verdict']:<8} {m['diag/fs_rhat_max']:8.3f} "
              f"{m['test/accuracy']:8.3f} {m['test/nlpd']:7.3f} {m['test/ece']:7.3f}")
    m = next(iter(rows.values()))["metrics"]
    print(f"{'MAP':<8} {'':<8} {'':>8} {m['baseline/map/test/accuracy']:8.3f} "
          f"{m['baseline/map/test/nlpd']:7.3f} {m['baseline/map/test/ece']:7.3f}")


if __name__ == "__main__":
    main()
