"""Benchmark: an SG-MCMC step as ``lit-bayes fit`` runs it, against plain torch steps, in plain forward-equivalents.

Setting: the S_d mixing study's SGLD cell (``recipes/structured/mixing_study.py``): SGLD at eps 1e-5 on the
N-scaled energy, ``MLP(784, 10)`` (softmax regression), a N(0, 0.3^2) prior, 4 chains, batches of 500, float32,
one thread, on ``--num-train`` MNIST-shaped inputs of :class:`lit_bayes.data.ClassPrototypes` (no download).

Paths, each a training step of every chain:
  * ``fit``: ``lit-bayes fit`` of ``recipes/structured/mnist_mlp.yaml`` with the study's overrides: Lightning's loop,
    the library's always-on callbacks (run health, function-space diagnostics on 256 held-out images at every kept
    step, the sample store, the progress log), the batch checks. Its step time is the difference of two runs'
    ``wall_time_s`` (``--epochs`` and three times as many) over the difference of their steps, so the setup, the
    test pass and the end-of-run diagnostics cancel;
  * ``plain_vectorised``: the same update written in torch, the 4 chains as one ``(40, 784)`` product, the
    log-likelihood through ``F.cross_entropy``, the batch by ``index_select``;
  * ``plain_per_chain``: one network per chain in a Python loop (``F.linear``), as a one-chain script run 4 times
    per step would do.

``fwd`` is the plain forward-equivalent of ``plain_forward.py`` (one network, the batch of 500, summed
cross-entropy), warm: blocks of forwards timed in turn with the plain steps. Printed: ms per step and fwd per step of every path, and ``fit`` over each plain path.
Nothing asserts on time; compare figures of one run only.

On the 2-core AMD EPYC Zen3 (2026-12-02, one thread, the other core's job paused; defaults): ``fit`` 10.42 ms = 19.3
fwd a step (fwd 0.54 ms), ``plain_vectorised`` 5.00 ms = 9.3 fwd, ``plain_per_chain`` 9.90 ms = 18.3 fwd: the fit
step costs 2.1x the plain vectorised one and about the per-chain loop's (1.05x). Of a fit step of the real-MNIST cell
(timed by wrapping its methods, the same day): the energy ~2.0 ms and its backward ~2.5 ms (their two matrix
products ~2.35 ms together), the SGLD update with Lightning's and torch's optimizer wrappers ~0.8 ms, the
diagnostics' function-space record ~0.9 ms a step, the batch ~0.5 ms, the rest Lightning's loop and hooks
(~55 callback-hook calls a step). Two changes of that day are in these figures: the batch by ``index_select``
(:class:`lit_bayes.data.IndexedTensors`; 1.31-1.37 ms before) and the log-likelihood through ``F.cross_entropy``
(``Categorical``); in three interleaved pairs of fits the step's mean fell from 11.1 / 11.7 / 14.7 to
9.9 / 9.9 / 13.3 ms.

Run from the repository root:  python benchmarks/sgmcmc_fit_step.py [--epochs E] [--num-train N]
The last line printed is one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from plain_forward import plain_forward, unit_and_call_seconds

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes" / "structured"))

from mixing_study import CONFIG, SGLD, SGLD_LR, grid  # noqa: E402

from lit_bayes.recipe_runs import fit_cell, settings_overrides  # noqa: E402

WIDTHS = [784, 10]
CHAINS, BATCH, PRIOR_VARIANCE = 4, 500, 0.09


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=10, help="epochs of the shorter fit (the longer: 3x)")
    parser.add_argument("--num-train", type=int, default=20_000, help="training inputs (batches of 500)")
    parser.add_argument("--steps", type=int, default=200, help="timed steps of each plain path (in turn)")
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.num_train < BATCH or args.steps < 1:
        parser.error(f"--epochs and --steps must be >= 1 and --num-train >= {BATCH}")
    return args


def fit_summary(directory: Path, epochs: int, num_train: int) -> dict:
    """``summary.json`` of the SGLD cell's fit of ``epochs`` epochs on ClassPrototypes data (the study's SGLD
    stepper settings, :func:`mixing_study.grid`)."""
    sgld = next(stepper for name, _, _, stepper in grid([], [], 1, SGLD_LR) if name == SGLD)
    settings = {
        "data.class_path": "lit_bayes.data.ClassPrototypes", "data.init_args.input_shape": [1, 28, 28],
        "data.init_args.num_train": num_train, "data.init_args.num_test": 1000, "data.init_args.num_val": 1000,
        "data.init_args.batch_size": BATCH, "model.init_args.model.init_args.widths": WIDTHS,
        "model.init_args.num_chains": CHAINS, "model.init_args.burn_in": 0.5, "trainer.callbacks": [],
        "diagnostics.heldout_size": 256, "diagnostics.num_fixed_inputs": 4,
        "trainer.max_epochs": epochs, "trainer.check_val_every_n_epoch": epochs, **sgld,
    }
    return fit_cell(CONFIG, directory / f"e{epochs}", settings_overrides(settings), rerun=True)


def plain_steps(x: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> dict:
    """The two plain SGLD steps (vectorised, per chain), each on the next batch of a shuffled pass over ``x, y``."""
    scale, eps = x.shape[0] / BATCH, SGLD_LR
    weight = (torch.randn(CHAINS, WIDTHS[1], WIDTHS[0], generator=generator) * 0.01).requires_grad_()
    bias = torch.zeros(CHAINS, WIDTHS[1], requires_grad=True)
    nets = [((torch.randn(WIDTHS[1], WIDTHS[0], generator=generator) * 0.01).requires_grad_(),
             torch.zeros(WIDTHS[1], requires_grad=True)) for _ in range(CHAINS)]
    batches = torch.randperm(x.shape[0], generator=generator)[: x.shape[0] // BATCH * BATCH].split(BATCH)
    count = [0]

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        index = batches[count[0] % len(batches)]
        count[0] += 1
        return x.index_select(0, index), y.index_select(0, index)

    def move(params) -> None:
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-0.5 * eps).add_(torch.randn(p.shape, generator=generator), alpha=math.sqrt(eps))
                p.grad = None

    def vectorised() -> None:
        xb, yb = batch()
        logits = torch.addmm(bias.reshape(-1, 1), weight.reshape(-1, WIDTHS[0]), xb.T).reshape(CHAINS, WIDTHS[1], -1)
        log_lik = -F.cross_entropy(logits, yb.expand(CHAINS, -1), reduction="none").sum(-1)
        log_prior = -0.5 * (weight.square().sum((1, 2)) + bias.square().sum(1)) / PRIOR_VARIANCE
        (-(scale * log_lik + log_prior)).sum().backward()
        move((weight, bias))

    def per_chain() -> None:
        xb, yb = batch()
        for w, b in nets:
            energy = scale * F.cross_entropy(F.linear(xb, w, b), yb, reduction="sum")
            (energy + 0.5 * (w.square().sum() + b.square().sum()) / PRIOR_VARIANCE).backward()
            move((w, b))

    return {"plain_vectorised": vectorised, "plain_per_chain": per_chain}


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        short, long = (fit_summary(Path(tmp), e, args.num_train) for e in (args.epochs, 3 * args.epochs))
    fit_s = (long["wall_time_s"] - short["wall_time_s"]) / (long["steps"] - short["steps"])
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(args.num_train, WIDTHS[0], generator=generator)
    y = torch.randint(WIDTHS[1], (args.num_train,), generator=generator)
    forward = plain_forward(WIDTHS, "relu", "cross_entropy", x[:BATCH], y[:BATCH])
    unit, plain = unit_and_call_seconds(forward, plain_steps(x, y, generator), args.steps, warmup=10)
    seconds = {"fit": fit_s, **plain}
    print(f"SGLD, MLP{tuple(WIDTHS)}, {CHAINS} chains, batch {BATCH}, float32, 1 thread; fwd {1e3 * unit:.3f} ms "
          f"(plain forward + summed cross-entropy of one network on the batch)")
    print(f"{'path':>18} {'ms/step':>9} {'fwd/step':>9} {'fit/path':>9}")
    for name, value in seconds.items():
        print(f"{name:>18} {1e3 * value:9.3f} {value / unit:9.1f} {fit_s / value:9.2f}")
    print(f"fit: {long['steps'] - short['steps']} steps between runs of {short['steps']} and {long['steps']}")
    result = {"benchmark": "sgmcmc_fit_step", "widths": WIDTHS, "chains": CHAINS, "batch": BATCH,
              "num_train": args.num_train, "fwd_ms": 1e3 * unit,
              **{f"{name}_ms": 1e3 * value for name, value in seconds.items()},
              **{f"{name}_fwd": value / unit for name, value in seconds.items()}}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
