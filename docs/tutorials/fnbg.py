"""Tutorial: minibatch Metropolis-within-blocked-Gibbs (FNBG) on noisy XOR, by block size.

The FNBG paper's small problem: noisy XOR (5000 training points, minibatches of 100) and an
MLP(2, 2, 1) with sigmoid units, a N(0, 10) prior and a Bernoulli likelihood on the raw batch
sum. Each sweep proposes a Gaussian move (variance 0.04) for one block of parameters at a time
and accepts or rejects it by Metropolis-Hastings on the current minibatch. The same sampler runs
with whole layers as blocks and with one block per node (NBG: a neuron's incoming weights and
bias): smaller blocks are accepted more often.

    python docs/tutorials/fnbg.py            # full size
    python docs/tutorials/fnbg.py --quick    # reduced size, for CI
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger

from lit_bayes import BlockGibbs, Bernoulli, GaussianPrior
from lit_bayes.callbacks import (
    AcceptanceMonitor,
    ChainDiagnostics,
    PosteriorSamples,
    PredictiveMarginal,
    RunHealth,
    RunSummary,
    UncertaintyMetrics,
)
from lit_bayes.data import NoisyXOR
from lit_bayes.models import MLP


def run(blocks: str, epochs: int, out: Path) -> dict:
    """Sample with one block rule, test, and return the run's ``summary.json``."""
    sampler = BlockGibbs(
        MLP([2, 2, 1], activation="sigmoid"), Bernoulli(), GaussianPrior(variance=10.0),
        blocks=blocks, proposal_variance=0.04,  # a variance, not a standard deviation
        minibatch_scaling="sum",                # the paper's energy: the raw minibatch sum
        num_chains=10, burn_in=0.5, num_draws=200, init="prior", seed=0,
    )
    data = NoisyXOR(num_train=5000, num_val=400, num_test=1200, batch_size=100, seed=0)
    callbacks = [
        AcceptanceMonitor(),  # acceptance rate per block, node and layer
        PosteriorSamples(max_draws=200), PredictiveMarginal(), UncertaintyMetrics(),
        ChainDiagnostics(), RunHealth(), RunSummary(),
    ]
    trainer = L.Trainer(
        max_epochs=epochs, callbacks=callbacks, logger=CSVLogger(out, name=blocks),
        check_val_every_n_epoch=epochs, log_every_n_steps=50, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False,
    )
    trainer.fit(sampler, datamodule=data)
    trainer.test(sampler, datamodule=data, verbose=False)
    print(f"{blocks}: {sampler.partition.num_blocks} blocks per sweep")
    return json.loads(Path(trainer.log_dir, "summary.json").read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced size (a few seconds per block rule)")
    parser.add_argument("--out", type=Path, default=Path("runs/tutorials/fnbg"), help="log directory")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    epochs = 4 if args.quick else 400  # an epoch is 50 sweeps (minibatches of 100)

    rows = {blocks: run(blocks, epochs, args.out) for blocks in ("layer", "node")}
    print(f"\n{'blocks':<6} {'verdict':<8} {'acceptance per layer':<22} {'accuracy':>8} {'NLPD':>6}")
    for blocks, summary in rows.items():
        m = summary["metrics"]
        layers = " ".join(f"{m[key]:.2f}" for key in sorted(m) if key.startswith("accept/layer_"))
        print(f"{blocks:<6} {summary['health']['verdict']:<8} {layers:<22} {m['test/accuracy']:8.3f} "
              f"{m['test/nlpd']:6.3f}")


if __name__ == "__main__":
    main()
