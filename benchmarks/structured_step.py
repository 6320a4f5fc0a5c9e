"""Benchmark: one structured SG-MCMC step against one plain SGLD step.

Setting: the paper's MNIST network, ``MLP(784, 50, 50, 10)`` (ReLU), ``Categorical(10)``,
one chain, a batch of ``--batch`` (default 500, the paper's) random MNIST-shaped inputs,
float32. Every path runs the whole step: energy, backward, stepper update (and, for the
structured paths, the mask and buffer draws and the buffer push).

Paths, each timed as the median of ``--repeats`` steps after ``--warmup`` steps:
  * ``sgld``: :class:`lit_bayes.SGMCMC` energy of the current parameters (the reference).
  * ``sd_batched``: S_d-SGLD, ``--masks`` (K = 4) Bernoulli(0.5) masks over a fully
    factorised partition, the K composites evaluated in one vectorised call
    (:meth:`StructuredSGMCMC.structured_energy`).
  * ``sd_loop``: the same composites, one forward pass per composite in a Python loop.
  * ``s_batched`` / ``s_loop``: S-SGLD with ``--groups`` (M = 8) modulo groups, M composites.
Before timing, each loop path's energy is checked against its batched path.

Times are ratios within this run only; nothing asserts on them. The target of the issue
is a batched S_d step within 2x of the plain step (a loop over K = 4 composites does about
4x the forward and backward work).

Run from the repository root:  python benchmarks/structured_step.py [--device cpu|cuda]
The last line printed is one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from lit_bayes import SGMCMC, Categorical, GaussianPrior
from lit_bayes.models import MLP
from lit_bayes.samplers.structured_sgmcmc import StructuredSGMCMC

WIDTHS = [784, 50, 50, 10]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--masks", type=int, default=4, help="K of S_d-SGLD")
    parser.add_argument("--groups", type=int, default=8, help="M of S-SGLD")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if min(args.batch, args.masks, args.groups, args.repeats) < 1 or args.warmup < 0:
        parser.error("--batch, --masks, --groups and --repeats must be positive, --warmup non-negative")
    return args


def build(cls, device, **options):
    """A sampler with its chain, stepper and generators, outside a Trainer."""
    torch.manual_seed(0)
    sampler = cls(MLP(WIDTHS, "relu"), Categorical(10), GaussianPrior(1.0), step_size=1e-5, num_data=60_000,
                  seed=0, **options).to(device)
    sampler.setup("fit")
    stepper = sampler.configure_optimizers()
    return sampler, stepper


def loop_energy(sampler: StructuredSGMCMC, x, y, masks, tilde):
    """The naive reference: one forward pass per composite."""
    flat = torch.cat([p.reshape(1, -1) for p in sampler.chains.as_dict().values()], dim=1)
    keep = masks[..., sampler.group_ids]
    total = 0.0
    for k in range(keep.shape[1]):
        composite = keep[:, k] * flat + (1.0 - keep[:, k]) * tilde[:, k]
        total = total + sampler.energy(sampler.chains.unflatten(composite), x, y)
    return sampler.structure.normaliser() * total


def plain_step(sampler, stepper, x, y):
    stepper.zero_grad()
    sampler.energy(sampler.chains.as_dict(), x, y).sum().backward()
    stepper.step()


def structured_step(sampler, stepper, x, y, loop):
    stepper.zero_grad()
    masks, tilde = sampler.draw_composites()
    energy = loop_energy(sampler, x, y, masks, tilde) if loop else sampler.structured_energy(x, y, masks, tilde)
    energy.sum().backward()
    stepper.step()
    sampler.sample_buffer.push(sampler.chains.flat())


def time_steps(step, device, repeats, warmup) -> float:
    """Median wall time of one step in milliseconds."""
    times = []
    for i in range(warmup + repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def check_loop_matches(sampler, x, y) -> float:
    """Largest relative difference between the batched and the looped energy of one draw."""
    state = sampler.structure_generator.get_state()
    masks, tilde = sampler.draw_composites()
    sampler.structure_generator.set_state(state)
    with torch.no_grad():
        fast = sampler.structured_energy(x, y, masks, tilde)
        slow = loop_energy(sampler, x, y, masks, tilde)
    return float(((fast - slow).abs() / slow.abs()).max())


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 1, 28, 28, generator=gen).to(args.device)
    y = torch.randint(10, (args.batch,), generator=gen).to(args.device)

    sgld, sgld_stepper = build(SGMCMC, args.device)
    sd, sd_stepper = build(StructuredSGMCMC, args.device, mode="dropout", num_masks=args.masks, keep_prob=0.5,
                           partition="fully_factorised", buffer_size=200)
    s, s_stepper = build(StructuredSGMCMC, args.device, mode="structured", partition="modulo",
                         num_groups=args.groups, buffer_size=200)
    for sampler, stepper in ((sd, sd_stepper), (s, s_stepper)):  # fill the buffers with distinct states
        for _ in range(10):
            structured_step(sampler, stepper, x, y, loop=False)
    mismatch = max(check_loop_matches(sd, x, y), check_loop_matches(s, x, y))

    timed = {
        "sgld": lambda: plain_step(sgld, sgld_stepper, x, y),
        "sd_batched": lambda: structured_step(sd, sd_stepper, x, y, loop=False),
        "sd_loop": lambda: structured_step(sd, sd_stepper, x, y, loop=True),
        "s_batched": lambda: structured_step(s, s_stepper, x, y, loop=False),
        "s_loop": lambda: structured_step(s, s_stepper, x, y, loop=True),
    }
    ms = {name: time_steps(step, args.device, args.repeats, args.warmup) for name, step in timed.items()}
    ratios = {name: ms[name] / ms["sgld"] for name in ms}

    composites = {"sgld": 1, "sd_batched": args.masks, "sd_loop": args.masks, "s_batched": args.groups,
                  "s_loop": args.groups}
    print(f"MLP{tuple(WIDTHS)}, batch {args.batch}, 1 chain, {args.device}, {args.threads} thread(s)")
    print(f"{'path':<12}{'composites':>11}{'ms/step':>10}{'x sgld':>9}")
    for name in timed:
        print(f"{name:<12}{composites[name]:>11}{ms[name]:>10.2f}{ratios[name]:>9.2f}")
    print(f"batched vs loop energy: max relative difference {mismatch:.1e}")
    result = {
        "benchmark": "structured_step",
        "device": args.device,
        "threads": args.threads,
        "batch": args.batch,
        "num_masks": args.masks,
        "num_groups": args.groups,
        "ms_per_step": {k: round(v, 3) for k, v in ms.items()},
        "ratio_to_sgld": {k: round(v, 3) for k, v in ratios.items()},
        "loop_energy_max_rel_diff": mismatch,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
