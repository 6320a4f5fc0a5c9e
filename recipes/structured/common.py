"""Shared pieces of the structured SG-MCMC recipes (structured-sgmcmc spec §5-6).

Mixing metrics (spec §5, §7 item 10). The paper computes ESS with TensorFlow Probability
and IAC with a hand-written FFT estimator, on unstated quantities. Here both are computed
per parameter coordinate on the kept draws of every chain: ESS is the rank-normalised
bulk ESS of Vehtari et al. (2021) (:func:`lit_bayes.diagnostics.ess_bulk`, pooled over
chains, and per chain), IAC is Sokal's integrated autocorrelation time with the automatic window
(:func:`lit_bayes.diagnostics.integrated_autocorrelation_time`, autocorrelations averaged
over chains). Both are summarised by their median over a fixed random subset of
coordinates (all of them when there are fewer). Neither matches the paper's numbers'
scale (its ESS of ~7 from 5,000 draws is another estimator), so compare methods within a
run, not with the paper's values.

Accuracy (spec §7 item 11): ``test/accuracy`` is that of the predictive averaged over 100
kept draws, a uniform sample of the post-burn-in states ("an ensemble of 100 models",
:class:`lit_bayes.callbacks.UncertaintyMetrics`); ``test/expected_accuracy`` is the mean
of those draws' own accuracies (the authors' code). Both are taken once, at the end.
"""
from __future__ import annotations

import json
import time
from collections import deque
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from lit_bayes.callbacks import PosteriorSamples, PredictiveMarginal, UncertaintyMetrics
from lit_bayes.data import BayesDataModule
from lit_bayes.diagnostics import ess_bulk, integrated_autocorrelation_time

PAPER_NOTE = "paper values are from the seed's tables; ESS/IAC use other estimators (see common.py)"


def mixing(trace: Tensor, num_coords: int = 1000, seed: int = 0) -> dict[str, float]:
    """Median bulk ESS and Sokal IAC over a fixed random subset of the coordinates of
    ``trace`` ``(chains, draws, P)``. ``ess_median`` pools the chains, so chains that sit in
    different modes (networks from different starts seldom agree weight by weight) hold it near
    the number of chains whatever the sampler; ``ess_within_median`` is the mean over chains of
    each chain's own ESS, how fast a chain decorrelates where it is."""
    num_params = trace.shape[-1]
    if num_params > num_coords:
        picks = torch.randperm(num_params, generator=torch.Generator().manual_seed(seed))[:num_coords]
        trace = trace[..., picks]
    trace = trace.double()
    varying = trace.std(dim=(0, 1)) > 0
    trace = trace[..., varying]
    return {
        "ess_median": float(torch.as_tensor(ess_bulk(trace)).median()),
        "ess_within_median": float(torch.stack([torch.as_tensor(ess_bulk(chain[None])) for chain in trace]).mean(0).median()),
        "iac_median": float(torch.as_tensor(integrated_autocorrelation_time(trace)).median()),
        "draws_per_chain": int(trace.shape[1]),
        "coords": int(trace.shape[-1]),
    }


@torch.no_grad()
def expected_accuracy(sampler, store: PosteriorSamples, datamodule: BayesDataModule, max_samples: int = 100) -> float:
    """Mean over up to ``max_samples`` of the kept draws of each draw's own test accuracy."""
    samples = store.samples(sampler)
    if samples is None:
        return float("nan")
    params, _ = samples
    total = next(iter(params.values())).shape[0]
    picks = torch.linspace(0, total - 1, min(total, max_samples)).long()
    chosen = {n: p[picks].to(sampler.device) for n, p in params.items()}
    correct, count = 0.0, 0
    for x, y in datamodule.test_dataloader():
        x, y = x.to(sampler.device), y.to(sampler.device)
        for start in range(0, picks.numel(), 25):
            chunk = {n: p[start : start + 25] for n, p in chosen.items()}
            correct += (sampler.outputs(chunk, x).argmax(-1) == y).float().sum().item()
        count += y.numel()
    return correct / (count * picks.numel())


class CoordinateTrace(Callback):
    """The last ``max_draws`` kept states (the sampler's burn-in and thinning) of a fixed
    random subset of ``num_coords`` parameter coordinates: enough for the mixing metrics
    without holding thousands of full ResNet states."""

    def __init__(self, num_coords: int = 1000, max_draws: int = 5000, seed: int = 0) -> None:
        self.num_coords, self.seed = num_coords, seed
        self.draws: deque[Tensor] = deque(maxlen=max_draws)
        self.picks: Tensor | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not pl_module.is_sample_step():
            return
        flat = pl_module.chains.flat()
        if self.picks is None:
            order = torch.randperm(flat.shape[1], generator=torch.Generator().manual_seed(self.seed))
            self.picks = order[: self.num_coords].sort().values.to(flat.device)
        self.draws.append(flat[:, self.picks].cpu())

    def trace(self) -> Tensor | None:
        """``(chains, draws, coords)`` or ``None`` before the first kept draw."""
        return torch.stack(list(self.draws), dim=1) if self.draws else None


def fit_and_test(sampler, datamodule: BayesDataModule, max_epochs: int | None = None, max_steps: int = -1,
                 predictive_draws: int = 100, trace_draws: int = 5000,
                 accelerator: str = "auto") -> tuple[dict, PosteriorSamples]:
    """Sample with ``Trainer.fit``, then test the predictive averaged over ``predictive_draws``
    kept draws (a uniform reservoir sample of them); mixing from the last ``trace_draws``.
    Returns the results (JSON-ready) and the sample store."""
    store = PosteriorSamples(max_draws=predictive_draws, policy="reservoir")
    coords = CoordinateTrace(max_draws=trace_draws)
    trainer = L.Trainer(
        max_epochs=max_epochs, max_steps=max_steps, accelerator=accelerator, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
        callbacks=[store, coords, PredictiveMarginal(), UncertaintyMetrics()],
    )
    start = time.perf_counter()
    trainer.fit(sampler, datamodule=datamodule)
    wall = time.perf_counter() - start
    metrics = {k: float(v) for k, v in trainer.test(sampler, datamodule=datamodule, verbose=False)[0].items()}
    if sampler.likelihood.task == "classification":
        metrics["test/expected_accuracy"] = expected_accuracy(sampler, store, datamodule, predictive_draws)
    trace = coords.trace()
    passes = getattr(sampler, "num_composites", 1)
    return {
        "metrics": metrics,
        "mixing": mixing(trace) if trace is not None and trace.shape[1] >= 4 else None,
        "steps": trainer.global_step,
        "forward_backward_passes": trainer.global_step * passes,
        "wall_time_s": wall,
    }, store


def pretrain_map(model, likelihood, prior, datamodule, epochs: int, lr: float = 1e-3, accelerator: str = "auto"):
    """Load into ``model`` a MAP estimate from ``epochs`` of Adam (the authors' code starts
    every chain at a MAP from RMSprop pretraining); ``epochs=0`` leaves ``model`` as it is."""
    if epochs == 0:
        return model
    from lit_bayes import MAP

    map_module = MAP(model, likelihood, prior, optimizer="adam", lr=lr, init="template")
    L.Trainer(max_epochs=epochs, accelerator=accelerator, logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0
              ).fit(map_module, datamodule=datamodule)
    net, _ = map_module.split_parameters(map_module.chains.snapshot())
    model.load_state_dict({n: p[0].cpu() for n, p in net.items()}, strict=False)
    return model


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2))
    print(f"wrote {path}")


class SyntheticClassification(BayesDataModule):
    """Inputs of a given shape around one random prototype per class (x = mu_y + N(0, I),
    mu ~ N(0, separation^2 I), uniform labels): a clustered stand-in of the right shape where
    the real data set's files are missing (the recipes say so in their output)."""

    def __init__(self, input_shape=(1, 28, 28), num_classes: int = 10, num_train: int = 2000, num_test: int = 500,
                 batch_size: int = 500, separation: float = 0.2, seed: int = 0) -> None:
        super().__init__(task="classification", num_classes=num_classes, input_shape=tuple(input_shape),
                         batch_size=batch_size, eval_batch_size=None, seed=seed)
        self.sizes = (num_train, 0, num_test)
        self.separation = separation

    def load(self):
        g = torch.Generator().manual_seed(self.seed)
        prototypes = self.separation * torch.randn(self.num_classes, *self.input_shape, generator=g)
        splits = {}
        for split, n in zip(("train", "val", "test"), self.sizes):
            y = torch.randint(self.num_classes, (n,), generator=g)
            splits[split] = (prototypes[y] + torch.randn(n, *self.input_shape, generator=g), y)
        return splits


class SyntheticTabular(BayesDataModule):
    """Standard-normal features, a smooth random target plus noise (stand-in for a CSV)."""

    def __init__(self, num_features: int = 8, num_train: int = 300, num_val: int = 40, num_test: int = 60,
                 batch_size: int = 32, seed: int = 0) -> None:
        super().__init__(task="regression", num_classes=None, input_shape=(num_features,), batch_size=batch_size,
                         eval_batch_size=None, seed=seed)
        self.sizes = (num_train, num_val, num_test)

    def load(self):
        g = torch.Generator().manual_seed(self.seed)
        w = torch.randn(self.input_shape[0], generator=g)
        splits = {}
        for split, n in zip(("train", "val", "test"), self.sizes):
            x = torch.randn(n, self.input_shape[0], generator=g)
            y = torch.tanh(x @ w / 2) + 0.2 * torch.randn(n, generator=g)
            splits[split] = (x, y)
        return splits
