"""Tutorial: exact Gibbs sampling of a noisy network on teacher-student data, with the thermalization test.

A network with Gaussian noise at every pre- and post-activation (Piccioli et al.) has a posterior
over weights *and* latent activations whose conditionals are all Gaussian or truncated Gaussian,
so it can be Gibbs-sampled exactly, with no step size to tune. Teacher-student data make the
result checkable: a random "teacher" of the same architecture labels the inputs, and a chain
started at the teacher (its weights and its latents, an exact posterior draw) is at equilibrium
from the first sweep. The other chains start at zero; once their test error against the teacher
matches the informed chain's they have thermalized ("merged").

Here: teacher = student = MLP(10, 4, 1) with ReLU units and biases, noise variance 0.01 at every
layer, 200 training points (about 4 per parameter), four chains of which the first is informed.

    python docs/tutorials/noisy_gibbs.py            # full size
    python docs/tutorials/noisy_gibbs.py --quick    # reduced size, for CI
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger

from lit_bayes import NoisyGibbs
from lit_bayes.callbacks import (
    PosteriorSamples,
    PredictiveMarginal,
    RunSummary,
    ThermalizationCheck,
    UncertaintyMetrics,
)
from lit_bayes.data import TeacherStudent
from lit_bayes.models import NoisyMLP

NETWORK = dict(widths=[10, 4, 1], activation="relu", delta_z=0.01, delta_x=0.01)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced size (a few seconds)")
    parser.add_argument("--out", type=Path, default=Path("runs/tutorials/noisy_gibbs"), help="log directory")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    sweeps = 300 if args.quick else 20000  # full batch: one sweep per epoch

    # the student matches the teacher: same architecture, noise variances and priors
    sampler = NoisyGibbs(NoisyMLP(**NETWORK), num_chains=4, informed_chains=1, init="zeros",
                         burn_in=0.5, num_draws=100, seed=0)
    data = TeacherStudent(**NETWORK, num_train=200, num_val=0, num_test=1000, seed=0)  # batch_size None: full batch
    callbacks = [
        ThermalizationCheck(informed_chains=1, every_n_steps=sweeps // 100, window=5, rhat_block=10),
        PosteriorSamples(max_draws=100), PredictiveMarginal(), UncertaintyMetrics(), RunSummary(),
    ]
    trainer = L.Trainer(max_epochs=sweeps, callbacks=callbacks, logger=CSVLogger(args.out, name="gibbs"),
                        limit_val_batches=0, num_sanity_val_steps=0, log_every_n_steps=50,
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(sampler, datamodule=data)
    trainer.test(sampler, datamodule=data, verbose=False)

    m = json.loads(Path(trainer.log_dir, "summary.json").read_text())["metrics"]
    print(f"\ninformed chain, test MSE against the teacher:          {m['thermalization/informed_test_mse']:.4f}")
    print(f"zero-started chains, test MSE at the end (mean):       {m['thermalization/uninformed_test_mse']:.4f}")
    merged = "all merged, at sweep {:.0f}".format(m["thermalization/merge_step"]) \
        if m["thermalization/merged"] else f"{m['thermalization/merged_fraction']:.0%} merged"
    print(f"zero-started chains:                                    {merged}")
    print(f"posterior predictive (second half of the sweeps): test RMSE {m['test/rmse']:.3f}, "
          f"NLPD {m['test/nlpd']:.3f}")


if __name__ == "__main__":
    main()
