"""Runs shared by the resume and kill tests: a small SGMCMC fit with a disk or memory store.

Executed in-process by the tests, or as ``python -m tests.resume_runs ...`` in a child
process that the kill test terminates with SIGKILL.
"""
from __future__ import annotations

import argparse
import os
import signal

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lit_bayes import (
    HMC, MALA, MAP, OHSMC, SGMCMC, SGSMC, SWAG, Gaussian, GaussianPrior, LearnedScalePrior, MeanFieldVB,
    ReplicaExchangeSGMCMC,
)
from lit_bayes.callbacks import PosteriorSamples
from lit_bayes.data import SyntheticRegression
from lit_bayes.models import MLP, PartialMLP


class KillAtStep(Callback):
    """Sends a signal (SIGKILL, or e.g. ``"SIGTERM"``) to its own process after the given training step."""

    def __init__(self, step: int, signal_name: str = "SIGKILL") -> None:
        self.step = step
        self.signal = getattr(signal, signal_name)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signal)


def make_sampler(kind: str):
    """A small sampler of each family, 3 chains (16 particles), burn-in 2, thinning 2."""
    net, lik, prior = MLP([1, 8, 1], "tanh"), Gaussian(1.0), GaussianPrior(1.0)
    if kind in ("ohsmc", "sgsmc"):
        sampler_cls = {"ohsmc": OHSMC, "sgsmc": SGSMC}[kind]
        torch.manual_seed(0)  # psi's initial values come from the network's own init
        return sampler_cls(PartialMLP([1, 8, 4, 1], 1), lik, prior, num_particles=16, burn_in=2, thinning=2, seed=5)
    if kind == "vb":
        torch.manual_seed(0)
        return MeanFieldVB(PartialMLP([1, 8, 4, 1], 1), lik, prior, num_train_samples=8, num_samples=16, seed=5)
    common = dict(num_chains=3, seed=5)
    if kind in ("sgld", "psgld", "sghmc"):
        return SGMCMC(net, lik, prior, stepper=kind, step_size=1e-3, burn_in=2, thinning=2, **common)
    if kind == "sghmc_learned_map":  # learned prior scales (their own random stream), chains started at MAP fits
        return SGMCMC(net, lik, LearnedScalePrior(2.0, 2.0), stepper="sghmc", step_size=1e-3, burn_in=2, thinning=2,
                      init="map", init_options={"steps": 20, "batch_size": 16}, **common)
    if kind in ("sghmc_exchange", "psgld_exchange_minibatch"):  # hotter replicas, swap counts, the "exchange" stream
        stepper, swap_energy = ("sghmc", "full_batch") if kind == "sghmc_exchange" else ("psgld", "minibatch")
        return ReplicaExchangeSGMCMC(net, lik, prior, stepper=stepper, step_size=1e-3, burn_in=2, thinning=2,
                                     num_temperatures=4, max_temperature=8.0, swap_every=2, swap_energy=swap_energy,
                                     **common)
    if kind == "map":
        return MAP(net, lik, prior, optimizer="adam", lr=1e-2, **common)
    if kind == "swag":
        return SWAG(net, lik, prior, max_rank=3, num_samples=8, lr=1e-2, seed=5, init="prior")
    sampler_cls = {"hmc": HMC, "mala": MALA}[kind]
    return sampler_cls(net, lik, prior, step_size=1e-2, burn_in=2, thinning=2, adapt_steps=5, **common)


def fit(root, epochs, stepper="sghmc", store="disk", ckpt_path=None, kill_at=None, shard_size=3, max_steps=-1,
        accelerator="cpu"):
    """``epochs`` epochs of 4 steps (or ``max_steps`` steps, with a checkpoint after every step)."""
    torch.set_num_threads(1)
    data = SyntheticRegression(num_train=40, num_val=10, num_test=10, batch_size=10, seed=3)
    sampler = make_sampler(stepper)
    samples = PosteriorSamples(mode=store, directory=os.path.join(root, "samples"), shard_size=shard_size)
    every = dict(every_n_train_steps=1) if max_steps > 0 else dict(save_on_train_epoch_end=True, every_n_epochs=1)
    callbacks = [samples, ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), save_last=True, **every)]
    if kill_at is not None:
        callbacks.append(KillAtStep(kill_at))
    trainer = L.Trainer(accelerator=accelerator, devices=1, max_epochs=epochs, max_steps=max_steps, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        callbacks=callbacks, default_root_dir=root)
    trainer.fit(sampler, datamodule=data, ckpt_path=ckpt_path)
    return sampler, samples


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--kill-at", type=int)
    args = parser.parse_args()
    fit(args.root, args.epochs, kill_at=args.kill_at)
