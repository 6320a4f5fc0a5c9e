"""The one unit of every benchmark: the plain forward-equivalent (issue 26).

One forward-equivalent ("fwd") is the time of one plain torch forward pass and summed loss of the
benchmarked network on the benchmarked batch (or training set): ``F.linear``, activation, ...,
``F.linear``, then the loss with ``reduction="sum"``; one network, no chain dimension, no library
wrapper, same dtype, thread count and process as what it measures, timed in turn with it (so that a
change of the machine's load moves both alike). Small operations inflate far more than large ones
on a loaded machine: compare figures taken in one run only.

How the unit is timed matters as much. A forward called right after a sweep or step finds its weights and
inputs evicted from the caches: on the 2-core AMD EPYC Zen3 (2026-11-29) the moons pBNN's forward took 0.11 ms
in a run of calls and 0.19-0.26 ms one call after each OHSMC step, and Exp. A's 0.45 against 0.57 ms after
each noisy sweep, which made the same sweep 15.1 or 12.1 fwd. So the unit is the forward's own cost, warm:
:func:`unit_and_call_seconds` times a block of consecutive forwards before every timed call (the median over
all forwards), not one forward per call.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

ACTIVATIONS = {"relu": F.relu, "sigmoid": torch.sigmoid, "gelu": F.gelu, "tanh": torch.tanh,
               "gelu_tanh": lambda h: F.gelu(h, approximate="tanh")}  # Flax's default GELU, the FK papers' networks
LOSSES = {
    "mse": lambda out, y: F.mse_loss(out.reshape(y.shape), y, reduction="sum"),
    "cross_entropy": lambda out, y: F.cross_entropy(out, y, reduction="sum"),
    "bernoulli": lambda out, y: F.binary_cross_entropy_with_logits(out.reshape(y.shape), y, reduction="sum"),
}


def plain_forward(widths: list[int], activation: str, loss: str, x: torch.Tensor, y: torch.Tensor,
                  seed: int = 0) -> Callable[[], torch.Tensor]:
    """A call doing one plain forward + summed loss of an MLP with layer ``widths`` on ``(x, y)``."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {sorted(LOSSES)}, got {loss!r}")
    gen = torch.Generator().manual_seed(seed)
    layers = [(torch.randn(d_out, d_in, generator=gen, dtype=x.dtype).to(x.device) / math.sqrt(d_in),
               torch.zeros(d_out, dtype=x.dtype, device=x.device)) for d_in, d_out in zip(widths[:-1], widths[1:])]
    act, criterion = ACTIVATIONS[activation], LOSSES[loss]
    inputs = x.flatten(1)

    @torch.no_grad()
    def call() -> torch.Tensor:
        h = inputs
        for i, (weight, bias) in enumerate(layers):
            h = F.linear(h, weight, bias)
            if i < len(layers) - 1:
                h = act(h)
        return criterion(h, y)

    return call


def median_seconds(calls: dict[str, Callable[[], object]], repeats: int, warmup: int = 2) -> dict[str, float]:
    """Median wall time of each call after ``warmup`` untimed calls, the calls timed in turn within every
    repeat (so that a change of the machine's load hits them all alike)."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            times[name].append(_seconds(call))
    return {name: statistics.median(values) for name, values in times.items()}


def unit_and_call_seconds(forward: Callable[[], object], calls: dict[str, Callable[[], object]], repeats: int,
                          warmup: int = 2, block: int = 10, call_block: int = 1) -> tuple[float, dict[str, float]]:
    """The unit and the calls' median wall times: in every repeat ``block`` forwards in a row, then each call
    ``call_block`` times in a row (after ``warmup`` untimed calls of each). The unit is the median over all
    forwards: the warm forward of the module docstring, timed beside the calls so that a change of the
    machine's speed moves both alike. With ``call_block`` 1 each call runs after the forwards and the other
    calls, as one step of a loop that does other work between steps; with more, the median of a block is that
    of a warm call, as in a loop of steps alone."""
    for call in (forward, *calls.values()):
        for _ in range(warmup):
            call()
    forwards, times = [], {name: [] for name in calls}
    for _ in range(repeats):
        forwards += [_seconds(forward) for _ in range(block)]
        for name, call in calls.items():
            times[name] += [_seconds(call) for _ in range(call_block)]
    return statistics.median(forwards), {name: statistics.median(values) for name, values in times.items()}


def _seconds(call: Callable[[], object]) -> float:
    """Wall time of one call."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start
