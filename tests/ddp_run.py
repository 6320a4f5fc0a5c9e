"""2-process ChainParallel runs on CPU (gloo), launched by tests/test_ddp.py.

``python -m tests.ddp_run ROOT sgld`` (or ``gibbs``): SGLD (or node-blocked Gibbs) chains;
rank 0 writes the gathered initial states, samples, metrics and diagnostics to
``ROOT/result.pt``.
``python -m tests.ddp_run ROOT map``: one plain SGD step per process, compared with the
same step computed without DDP (gradients must stay local); result in ``ROOT/result.pt``.
``python -m tests.ddp_run ROOT ohsmc``: OHSMC with plain DDP (data-parallel: one particle
cloud replicated on both processes); rank 0 writes both processes' particles and psi.
"""
from __future__ import annotations

import sys

import lightning as L
import torch
from torch import nn

from lit_bayes import MAP, OHSMC, SGMCMC, BlockGibbs, Gaussian, GaussianPrior
from lit_bayes.callbacks import ChainDiagnostics, PosteriorSamples, PredictiveMarginal, UncertaintyMetrics
from lit_bayes.data import LinearRegression
from lit_bayes.models import PartialMLP
from lit_bayes.predictive import posterior_samples
from lit_bayes.strategy import ChainParallel


class RecordSampling(L.Callback):
    def on_train_start(self, trainer, pl_module):
        self.initial = pl_module.gather_across_processes(pl_module.chains.flat())

    def on_test_end(self, trainer, pl_module):
        samples, log_weights = posterior_samples(trainer, pl_module)
        diagnostics = next(c for c in trainer.callbacks if isinstance(c, ChainDiagnostics))
        if trainer.is_global_zero:
            torch.save({
                "initial": self.initial.cpu(),
                "samples": torch.cat([p.reshape(p.shape[0], -1) for p in samples.values()], 1).cpu(),
                "log_weights": log_weights.cpu(),
                "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
                "diag": diagnostics.summary_metrics(),
            }, sys.argv[1] + "/result.pt")


class RecordLocalStep(L.Callback):
    """Compares the first SGD step of each process with the same step done by hand."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == 0:
            params = {n: p.detach().clone().requires_grad_() for n, p in pl_module.chains.as_dict().items()}
            loss = pl_module.energy(params, *batch).sum() / pl_module.posterior.num_data
            grads = torch.autograd.grad(loss, list(params.values()))
            stepped = [(p - pl_module.lr * g).detach() for p, g in zip(params.values(), grads)]
            self.expected = torch.cat([p.reshape(p.shape[0], -1) for p in stepped], 1)  # layout of chains.flat()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 1:
            error = (pl_module.chains.flat() - self.expected).abs().max().reshape(1)
            errors = pl_module.gather_across_processes(error)
            if trainer.is_global_zero:
                torch.save({"errors": errors.cpu()}, sys.argv[1] + "/result.pt")


class RecordReplicas(L.Callback):
    """Both processes' first-batch inputs, and at the end their particles and psi."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == 0:
            self.first_batch = pl_module.all_gather(batch[0].sum().reshape(1))

    def on_train_end(self, trainer, pl_module):
        flat = torch.cat([pl_module.chains.flat().flatten(), *(p.detach().flatten() for p in pl_module.parameters())])
        replicas = pl_module.all_gather(flat)
        if trainer.is_global_zero:
            torch.save({"replicas": replicas.cpu(), "first_batch": self.first_batch.flatten().cpu()},
                       sys.argv[1] + "/result.pt")


def main(root: str, kind: str) -> None:
    torch.set_num_threads(1)
    data = LinearRegression(num_train=64, num_val=16, num_test=32, batch_size=16, seed=1)
    if kind == "ohsmc":
        torch.manual_seed(0)  # the same psi initialisation on both processes
        sampler = OHSMC(PartialMLP([3, 4, 3, 1], 1), Gaussian(1.0), num_particles=32, seed=3)
        data = LinearRegression(num_train=64, num_val=16, num_test=16, batch_size=8, seed=1)
        L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=4, logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                  callbacks=[RecordReplicas()], default_root_dir=root).fit(sampler, datamodule=data)
        return
    strategy = ChainParallel(process_group_backend="gloo")
    common = dict(accelerator="cpu", devices=2, strategy=strategy, logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)
    if kind == "map":
        sampler = MAP(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), optimizer="sgd", lr=0.1, num_chains=2)
        L.Trainer(max_steps=1, callbacks=[RecordLocalStep()], limit_val_batches=0, **common).fit(sampler, datamodule=data)
        return
    if kind == "gibbs":
        sampler = BlockGibbs(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), blocks="node",
                             proposal_variance=0.01, num_chains=2, burn_in=10, thinning=2, seed=7)
    else:
        sampler = SGMCMC(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), stepper="sgld", step_size=1e-3,
                         num_chains=2, burn_in=10, thinning=2, seed=7)
    callbacks = [PosteriorSamples(max_draws=50), PredictiveMarginal(), UncertaintyMetrics(), ChainDiagnostics(),
                 RecordSampling()]
    trainer = L.Trainer(max_epochs=20, callbacks=callbacks, **common)
    trainer.fit(sampler, datamodule=data)
    trainer.test(sampler, datamodule=data)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
