"""Tutorial: your own network and your own data with any lit_bayes sampler.

Three ways to bring data (a ``BayesDataModule`` subclass that generates it, numpy arrays in
memory, an ``.npz`` file) and one way to bring a network (any ``nn.Module`` whose output the
likelihood reads). Each data module is sampled by pSGLD over 4 chains and scored on its test split.

    python docs/tutorials/own_model_and_data.py            # full size
    python docs/tutorials/own_model_and_data.py --quick    # reduced size, for CI
"""
from __future__ import annotations

import argparse
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import Tensor, nn

from lit_bayes import SGMCMC, Gaussian, GaussianPrior
from lit_bayes.callbacks import ChainDiagnostics, PosteriorSamples, PredictiveMarginal, RunHealth, UncertaintyMetrics
from lit_bayes.data import ArrayDataModule, BayesDataModule


class ResidualMLP(nn.Module):
    """Your network: any ``nn.Module`` from inputs ``(B, 1)`` to what the likelihood reads.

    ``Gaussian`` reads one output per point, the predictive mean, shape ``(B, 1)``
    (``Bernoulli`` reads one logit, ``Categorical(k)`` k logits). The sampler evaluates every
    chain in one ``torch.func.vmap`` call over stacked copies of the parameters, so ``forward``
    must be a pure function of its input and the parameters (no in-place changes to them).
    """

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.inp = nn.Linear(1, hidden)
        self.block = nn.Sequential(nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.out = nn.Linear(hidden, 1)

    def forward(self, x: Tensor) -> Tensor:
        h = self.inp(x)
        return self.out(h + self.block(h))


class NoisySine(BayesDataModule):
    """Your data set as a DataModule: y = sin(3x) + N(0, 0.2^2), x uniform on [-2, 2].

    A subclass passes the task, the number of classes and the shape of one input to
    ``BayesDataModule.__init__`` and returns the three splits from :meth:`load`; the base class
    checks them (dtypes, shapes, finite values) and builds reproducible loaders.
    """

    def __init__(self, num_train: int = 100, num_test: int = 200, batch_size: int | None = 20, seed: int = 0) -> None:
        super().__init__(task="regression", num_classes=None, input_shape=(1,), batch_size=batch_size,
                         eval_batch_size=None, seed=seed)
        self.sizes = (num_train, num_test)  # your own settings (num_train is the base class's, read from the splits)

    def load(self) -> dict[str, tuple[Tensor, Tensor]]:
        generator = torch.Generator().manual_seed(self.seed)

        def draw(n: int) -> tuple[Tensor, Tensor]:
            x = 4 * torch.rand(n, 1, generator=generator) - 2
            return x, torch.sin(3 * x[:, 0]) + 0.2 * torch.randn(n, generator=generator)

        empty = (torch.zeros(0, 1), torch.zeros(0))
        return {"train": draw(self.sizes[0]), "val": empty, "test": draw(self.sizes[1])}


def sample(data: L.LightningDataModule, name: str, epochs: int, out: Path) -> dict:
    """pSGLD over 4 chains; returns the test metrics and the health verdict."""
    sampler = SGMCMC(ResidualMLP(), Gaussian(noise_std=0.2), GaussianPrior(variance=1.0), stepper="psgld",
                     step_size=3e-3, num_chains=4, burn_in=0.5, num_draws=50, seed=0,
                     init="module")  # each chain from the layers' own initialisation: small weights, a gentle start
    health = RunHealth()
    callbacks = [PosteriorSamples(max_draws=50), PredictiveMarginal(), UncertaintyMetrics(), ChainDiagnostics(), health]
    trainer = L.Trainer(max_epochs=epochs, callbacks=callbacks, logger=CSVLogger(out, name=name),
                        limit_val_batches=0, log_every_n_steps=5, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(sampler, datamodule=data)
    (metrics,) = trainer.test(sampler, datamodule=data, verbose=False)
    return {**metrics, "verdict": health.health.verdict}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced size (a few seconds)")
    parser.add_argument("--out", type=Path, default=Path("runs/tutorials/own_model_and_data"), help="log directory")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    epochs = 30 if args.quick else 600

    # 1. a DataModule subclass
    datasets = {"subclass": NoisySine()}

    # 2. numpy arrays in memory: one x, y cut into splits by a seeded permutation (the default
    #    standardize="per_feature" would scale x and y with training statistics; kept raw here, as in 1.)
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, size=(300, 1))
    y = np.sin(3 * x[:, 0]) + 0.2 * rng.normal(size=300)
    datasets["arrays"] = ArrayDataModule(x=x, y=y, task="regression", val_fraction=0.0, test_fraction=2 / 3,
                                         standardize="none", batch_size=20)

    # 3. an .npz file (as a YAML config would name it: `path: data.npz`), here with ready splits
    path = args.out / "noisy_sine.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, x_train=x[:100], y_train=y[:100], x_test=x[100:], y_test=y[100:])
    datasets["npz"] = ArrayDataModule(path=path, task="regression", standardize="none", batch_size=20)

    results = {name: sample(data, name, epochs, args.out) for name, data in datasets.items()}
    print(f"\n{'data':<9} {'test RMSE':>9} {'test NLPD':>9}  verdict   (the noise std is 0.2)")
    for name, metrics in results.items():
        print(f"{name:<9} {metrics['test/rmse']:9.3f} {metrics['test/nlpd']:9.3f}  {metrics['verdict']}")


if __name__ == "__main__":
    main()
