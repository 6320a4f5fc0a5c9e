"""Tutorial: Feynman-Kac training of a partial Bayesian neural network (OHSMC) on two moons.

A partial BNN is stochastic in a small part of the network only (here one hidden layer, phi)
and deterministic elsewhere (psi). OHSMC (Zhao et al.) keeps a cloud of particles for phi,
moves, weights and resamples it on every minibatch like a particle filter, and trains psi by
Adam on Fisher's identity with the same weights. Predictions average the current cloud.

The paper's two-moons setting: make_moons(noise=0.3) with 100/100/100 points, batches of 20,
the network Dense100-GELU -> Dense20-GELU -> Dense5-GELU -> Dense1 with the third layer (105
parameters) stochastic, a random-walk move of variance 0.01, resampling every step, float64.
psi keeps training as long as the run lasts and will overfit 100 points, so, as in the paper,
the validation NLPD is computed after every step and the test set is scored at the best one.

    python docs/tutorials/feynman_kac.py            # full size
    python docs/tutorials/feynman_kac.py --quick    # reduced size, for CI
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from lit_bayes import OHSMC, Bernoulli
from lit_bayes.callbacks import (
    ChainDiagnostics,
    PosteriorSamples,
    PredictiveMarginal,
    RunHealth,
    RunSummary,
    UncertaintyMetrics,
)
from lit_bayes.data import TwoMoons
from lit_bayes.models import PartialMLP


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced size (a few seconds)")
    parser.add_argument("--out", type=Path, default=Path("runs/tutorials/feynman_kac"), help="log directory")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    particles, epochs = (100, 10) if args.quick else (1000, 100)  # an epoch is 5 steps (batches of 20)

    sampler = OHSMC(
        PartialMLP([2, 100, 20, 5, 1], stochastic_layer=2),  # layer 2 (Dense20 -> 5) is phi, the rest psi
        Bernoulli(), num_particles=particles,
        kernel="random_walk", kernel_options={"variance": 0.01},
        resampling="stratified", ess_threshold=1.0,  # resample at every step
        optimizer="adam", lr=0.01, seed=0,
    )
    data = TwoMoons(num_train=100, num_val=100, num_test=100, noise=0.3, batch_size=20, seed=0)
    best = ModelCheckpoint(dirpath=args.out / "checkpoints", monitor="val/nlpd", mode="min", save_top_k=1,
                           save_on_train_epoch_end=False)  # the state (cloud, weights, psi) of the best step
    callbacks = [
        best,
        PosteriorSamples(max_draws=1),       # predictions use the current cloud and its weights
        PredictiveMarginal(keep_per_sample=True),
        UncertaintyMetrics(per_sample=True),  # also each particle's own metrics, averaged (the paper's)
        ChainDiagnostics(),                   # particle ESS, resampling count, log-evidence
        RunHealth(), RunSummary(),
    ]
    trainer = L.Trainer(max_epochs=epochs, precision="64-true", callbacks=callbacks,
                        logger=CSVLogger(args.out, name="ohsmc"), val_check_interval=1, num_sanity_val_steps=0,
                        log_every_n_steps=5, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(sampler, datamodule=data)
    trainer.test(sampler, datamodule=data, ckpt_path="best", verbose=False)

    m = json.loads(Path(trainer.log_dir, "summary.json").read_text())["metrics"]
    print(f"\nparticle ESS (fraction of {particles}): min {m['diag/particle_ess_min']:.3f}, "
          f"mean {m['diag/particle_ess_mean']:.3f}; resampled {m['diag/resample_count']:.0f} times; "
          f"log-evidence {m['diag/log_evidence']:.1f}")
    print(f"best validation NLPD {best.best_model_score:.3f}, at {Path(best.best_model_path).stem}")
    print(f"averaged predictive: test accuracy {m['test/accuracy']:.3f}, NLPD {m['test/nlpd']:.3f}, "
          f"ECE {m['test/ece']:.3f}")
    print(f"per particle (mean): accuracy {m['test/accuracy_per_sample']:.3f}, ECE {m['test/ece_per_sample']:.3f}")


if __name__ == "__main__":
    main()
