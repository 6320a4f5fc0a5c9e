"""NoisyGibbs sweep cost in plain forward-equivalents (issues 6 and 26), its growth with n, and the MNIST-MLP size.

The unit is the plain forward-equivalent of ``plain_forward.py``: one ``F.linear``, ReLU, ``F.linear``
pass of the same network plus its summed loss (squared error for regression, cross-entropy for the
probit classifier) on the training inputs, one network, timed warm in blocks before each sweep
(``plain_forward.unit_and_call_seconds``; before 2026-11-29 one forward per sweep, in turn, which read the
forward after each sweep had cooled the caches and gave Exp. A ~30 % fewer fwd). A sweep is one
exact Gibbs sweep of every variable (Algorithm 1 with biases, noisy-gibbs spec §2.5) on one chain,
timed two ways: ``sweep`` (the stepper alone, :meth:`NoisyGibbsStepper.sweep`) and ``step`` (what a
training step does: :meth:`NoisyGibbs.sweep_inputs`, which returns the batch in the latents'
canonical order, cached while the same tensors come back, then the sweep), each timed once after a block of
forwards and the other calls, and ``warm``: the sweep again in blocks of ``WARM_BLOCK`` in a row beside their own
forwards (a loop of sweeps alone, as in ``ohsmc_step.py``). ``torch``: the sweep of the same chain without the C
proposal rounds of the relu pre-activations (``NoisyGibbs(fused=False)``), timed in turn with the other two.

Sizes:
- Exp. A (spec §6.1): d = 50, K = 10 ReLU units, scalar regression output, Delta = 1e-4, n = 2084, timed from the
  sampler's start and again after ``--burn-in`` sweeps (``exp_a_burnt``);
- the same network at several n (default 500 ... 8000): spec §2.6 predicts linear growth in n
  (the O(n d K) products dominate); the fitted log-log slope and per-point ratios are printed;
- MNIST MLP (spec §6.3): n = 60,000 synthetic N(0, 1) inputs of dimension 784, K = 12 ReLU
  units, 10-class probit output, Delta = 2, lambda = fan-in.

The authors' sweep (their released torch functions), timed side by side with ours on this machine
(2-vCPU AMD EPYC Zen3, one thread, idle; issue 26): Exp. A 4.76 ms = 20.3 fwd, MNIST MLP 255 ms =
3.64 fwd. Targets (issue 26): Exp. A <= 12 fwd, MNIST MLP <= 3.0 fwd.

On this kind of machine MKL runs the 60,000 x 784 by 12 product at ~14 GFLOP/s (78-92 ms, ~80 % of the plain
forward); the sweep multiplies its two such products (the pre-activations X W^T and the first layer's mean
T^T P^T) through oneDNN instead (:class:`lit_bayes.row_products.FixedOperand`), which the authors' code does
not; the unit's forward keeps torch's ``F.linear``.

Exp. A on 2026-11-29 (one thread, the other core's job paused): 14.0 fwd early in the afternoon; later, after the
pipelines stopped calling ``torch.broadcast_shapes`` (~0.1 ms of Python a call; the sweep 0.956 of its time in an
interleaved in-process comparison), 11.8-12.5 fwd in six runs, with the code before that change at 12.4 and 12.6 in
two runs between them: the unit (0.36-0.59 ms) and the ratio drift more between runs than the change moves them, so
the 12 fwd target is at best borderline here. Those figures took the unit one forward per sweep, in turn, after
each sweep had cooled the caches. With the warm unit of the FNBG and OHSMC benchmarks (later that day, both long
jobs paused): Exp. A 18.1 and 17.1 fwd (sweep 6.85 / 7.36 ms, fwd 0.378 / 0.432 ms), the MNIST MLP 2.8 (296 ms,
fwd 107 ms); in one run of the same sweep, 12.9 fwd in turn and 20.5 against a loop of forwards alone. The
12 fwd target is missed in this unit.

Since 2026-12-01 the pre-activation draw starts with one round of a rejection sampler without normal CDFs
(:func:`lit_bayes.steppers.truncated_gaussian.propose_two_pieces`), the exact draw only for what it rejects. It
pays near stationarity (~7 % of Exp. A's elements rejected after 2,000 sweeps) and in a chain's first sweeps
(~50 %: every omega near 0), not at the MNIST size's large noise, whose later chunks skip it. Interleaved in one
process against the code before (the other core's job paused): Exp. A 0.91x the sweep at the start, 0.89-0.90x
after 3,000 sweeps; MNIST MLP 0.97-1.06x (equal within the noise). In this benchmark that day, three runs: Exp. A
13.6 / 15.6 / 14.7 fwd (fwd 0.357 / 0.227 / 0.297 ms), ``exp_a_burnt`` (after ``--burn-in`` 2,000 untimed sweeps)
12.7 / 13.4 / 13.2, MNIST MLP 2.9 (one run): the 12 fwd target is still missed, by 1.1-1.3x.

2026-12-03 (idle machine, one thread, pinned to one core): five changes: the post-activation draw with its n rows on
the long axis of its products (``LinearGaussianConditional._sample_columns``: a 2,084 x 10 by 10 x 10 product took
~70-90 µs row-major, ~25 µs transposed), a relu proposal in fewer passes (``propose_relu``), ``torch.bmm`` instead
of ``matmul``'s broadcasting wrapper for the sweep's small products (~7 µs a call), omega converted to float64 and
to row order in one pass, and the exact draw of few rejected proposals by the inverse CDF alone (``PLAIN_MIN``); 253
aten calls a sweep before, 187 after. Interleaved in one process, one chain each from the same seed and start, after
2,000 sweeps: 0.82-0.85x the sweep time of the code before (three runs); MNIST MLP 0.95 / 1.09 / 0.98x (unchanged
within the noise). In this benchmark, runs alternating with the code before: Exp. A 11.7 / 11.0 / 11.7 / 13.2 / 11.7
fwd (``exp_a_burnt`` 11.6 / 10.4 / 10.6; warm 11.2 / 9.3 / 10.7 / 12.9 / 13.2) against 13.5 / 12.2 / 12.9 / 12.8
before; MNIST MLP 3.0 / 2.9 / 3.0 against 3.1 / 2.9. The unit moves most: 0.21-0.40 ms for Exp. A within the hour,
and a small unit reads a large ratio (13.2 at 0.212 ms), so the 12 fwd line holds in most runs, not all.

2026-12-06 (2-core AMD EPYC listing AVX-512, idle, one thread): the relu pre-activation draw in C
(:mod:`lit_bayes.steppers.relu_draw`, ``NoisyGibbs(fused=True)``, the default): a vectorised round of proposals on
every element, further rounds on the rejected ones, and the exact draw of the few left (log-space piece masses,
Robert's exponential proposal in the tail). Before it, in the plain fwd unit, Exp. A read 10.9 / 11.4 / 12.0 / 10.9
in four runs that morning; the profile gave the relu draw ~55 % of the sweep (the proposal round's ~15 passes and
~40 more for the exact draw of what it rejected), torch's generator ~20 % (a float64 uniform ~4 ns, a float32
normal ~3.5 ns an element). With it, four runs of this benchmark: Exp. A 7.5 / 8.0 / 8.5 / 7.7 fwd (the ``torch``
column, the same sweep without the kernel in the same runs, 10.9 / 11.7 / 12.0 / 11.4: sweep/torch 0.69 / 0.68 /
0.71 / 0.68), ``exp_a_burnt`` 7.1 / 7.1 / 7.3 / 8.1 (0.68 / 0.65 / 0.71 / 0.72), the MNIST MLP 1.5 / 1.5 / 1.5 (0.83 /
0.84 / 0.78; the fourth run without it).

float32 by default (the authors' default). Timings depend on the machine and its load: nothing
here asserts on time. Run: ``python benchmarks/noisy_gibbs_sweep.py`` (``--sweeps`` timed repeats
after two warm-ups, ``--sizes``, ``--threads`` (default 1), ``--dtype``, ``--no-mnist``, ``--burn-in``).
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np
import torch
from plain_forward import plain_forward, unit_and_call_seconds

from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.row_products import ONEDNN_MIN_ELEMENTS, cpu_vendor, onednn_is_faster, transposed_is_faster
from lit_bayes.samplers.noisy_gibbs import NoisyGibbs

EXP_A = dict(widths=[50, 10, 1], delta=1e-4, output="regression", n=2084)
MNIST = dict(widths=[784, 12, 10], delta=2.0, output="probit", n=60_000)
AUTHORS = {"exp_a": (4.76e-3, 20.3), "mnist_mlp": (255e-3, 3.64)}  # issue 26, side by side, plain fwd
TARGETS = {"exp_a": 12.0, "mnist_mlp": 3.0}
WARM_BLOCK = 10  # sweeps in a row of the ``warm`` column


def problem(widths: list[int], delta: float, output: str, n: int, seed: int = 0):
    """A teacher-generated training set for the network (labels through eq. 7)."""
    gen = torch.Generator().manual_seed(seed)
    model = NoisyMLP(widths, "relu", delta, delta, output=output)
    teacher = {name: torch.randn(1, *p.shape, generator=gen) / math.sqrt(p.shape[-1])
               for name, p in model.named_parameters()}
    x = torch.randn(n, widths[0], generator=gen)
    _, top = model.generate(teacher, x, gen)
    y = top[0, :, 0] if output == "regression" else top[0].argmax(-1)
    return model, x, y


@torch.no_grad()
def measure(widths: list[int], delta: float, output: str, n: int, sweeps: int, dtype: str, block: int = 10,
            burn_in: int = 0) -> dict:
    """The unit and the sweep (and training step) times, after ``burn_in`` untimed sweeps from the sampler's
    default start."""
    model, x, y = problem(widths, delta, output, n)
    x = x.to(getattr(torch, dtype))
    forward_and_loss = plain_forward(widths, "relu", "mse" if output == "regression" else "cross_entropy", x,
                                     y.to(x.dtype) if output == "regression" else y)
    sampler = NoisyGibbs(model, num_chains=1, seed=0, dtype=dtype)
    sampler.setup("fit")
    stepper = sampler.configure_optimizers()
    batch = (x.float(), y)
    inputs, targets, latents = sampler.sweep_inputs(batch)
    for _ in range(burn_in):
        stepper.sweep(inputs, targets, latents)
    sweep_call = lambda: stepper.sweep(inputs, targets, latents)  # noqa: E731

    def torch_sweep() -> None:  # the same chain's sweep without the C proposal rounds
        stepper.fused = False
        try:
            stepper.sweep(inputs, targets, latents)
        finally:
            stepper.fused = True

    forward, times = unit_and_call_seconds(
        forward_and_loss, {"sweep": sweep_call, "step": lambda: stepper.sweep(*sampler.sweep_inputs(batch)),
                           "torch": torch_sweep}, sweeps, block=block)
    warm_forward, warm = unit_and_call_seconds(forward_and_loss, {"sweep": sweep_call}, max(3, sweeps // WARM_BLOCK),
                                               block=block, call_block=WARM_BLOCK)
    sweep, step = times["sweep"], times["step"]
    return {"widths": widths, "n": n, "output": output, "forward_s": forward, "sweep_s": sweep, "step_s": step,
            "sweep_fwd_equiv": sweep / forward, "step_fwd_equiv": step / forward, "torch_sweep_s": times["torch"],
            "torch_fwd_equiv": times["torch"] / forward, "warm_forward_s": warm_forward,
            "warm_sweep_s": warm["sweep"], "warm_fwd_equiv": warm["sweep"] / warm_forward}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=50, help="timed sweeps per measurement (after 2 warm-ups)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2084, 4000, 8000])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--no-mnist", action="store_true", help="skip the MNIST-MLP size")
    parser.add_argument("--burn-in", type=int, default=2000,
                        help="untimed sweeps before the Exp. A row near stationarity (exp_a_burnt; 0 skips it)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"NoisyGibbs, 1 chain, {args.dtype}, {args.threads} threads, medians of {args.sweeps} repeats after 2 "
          "warm-ups (MNIST: a quarter); fwd = one plain full-batch forward + summed loss (plain_forward.py), "
          "warm: the median of a block of forwards before each timed sweep; warm/fwd: sweeps in blocks of "
          f"{WARM_BLOCK} in a row beside their own forwards (a loop of sweeps alone)")
    at_threshold = torch.empty(ONEDNN_MIN_ELEMENTS, dtype=getattr(torch, args.dtype))  # the smallest oneDNN matrix
    print(f"CPU vendor {cpu_vendor() or 'unknown'}: first-layer row products in the "
          f"{'transposed' if transposed_is_faster(torch.device('cpu')) else 'plain'} orientation (lit_bayes.row_products); "
          f"the fixed inputs and first-layer projector multiplied through "
          f"{'oneDNN' if onednn_is_faster(at_threshold) else 'the dense products'} from {ONEDNN_MIN_ELEMENTS:,} elements on")
    header = (f"{'case':>11} {'n':>6} {'fwd ms':>8} {'sweep ms':>9} {'step ms':>8} {'sweep/fwd':>10} {'step/fwd':>9} "
              f"{'warm/fwd':>9} {'torch/fwd':>10} {'sweep/torch':>12}")
    print(header)
    rows = []
    cases = [("exp_a", EXP_A["n"], EXP_A)] + [("scaling", n, EXP_A) for n in args.sizes if n != EXP_A["n"]]
    if args.burn_in:
        cases.insert(1, ("exp_a_burnt", EXP_A["n"], EXP_A))
    if not args.no_mnist:
        cases.append(("mnist_mlp", MNIST["n"], MNIST))
    for case, n, spec in cases:
        sweeps = max(3, args.sweeps // 4) if case == "mnist_mlp" else args.sweeps
        block = 3 if case == "mnist_mlp" else 10  # forwards before each timed sweep (MNIST's take ~70 ms each)
        burn_in = args.burn_in if case == "exp_a_burnt" else 0
        row = {"case": case, "burn_in": burn_in,
               **measure(spec["widths"], spec["delta"], spec["output"], n, sweeps, args.dtype, block, burn_in)}
        rows.append(row)
        print(f"{case:>11} {n:>6} {row['forward_s'] * 1e3:>8.3f} {row['sweep_s'] * 1e3:>9.3f} {row['step_s'] * 1e3:>8.3f} "
              f"{row['sweep_fwd_equiv']:>10.1f} {row['step_fwd_equiv']:>9.1f} {row['warm_fwd_equiv']:>9.1f} "
              f"{row['torch_fwd_equiv']:>10.1f} {row['sweep_s'] / row['torch_sweep_s']:>12.2f}")
    scaling = sorted((r for r in rows if r["case"] in ("exp_a", "scaling")), key=lambda r: r["n"])
    ns = np.array([r["n"] for r in scaling], dtype=float)
    sweeps_s = np.array([r["sweep_s"] for r in scaling])
    slope = float(np.polyfit(np.log(ns), np.log(sweeps_s), 1)[0])
    per_point = [r["sweep_s"] / r["n"] * 1e6 for r in scaling]
    print(f"growth in n (Exp. A network): log-log slope {slope:.2f} (1 = linear); sweep time per training point "
          + ", ".join(f"n={int(n)}: {p:.3f} us" for n, p in zip(ns, per_point)))
    comparison = {}
    for case, (authors_s, authors_fwd) in AUTHORS.items():
        row = next((r for r in rows if r["case"] == case), None)
        if row is not None:
            comparison[case] = {"ours_ms": row["sweep_s"] * 1e3, "ours_fwd_equiv": row["sweep_fwd_equiv"],
                                "authors_ms": authors_s * 1e3, "authors_fwd_equiv": authors_fwd,
                                "target_fwd_equiv": TARGETS[case]}
            print(f"{case}: ours {row['sweep_s'] * 1e3:.2f} ms = {row['sweep_fwd_equiv']:.1f} fwd per sweep "
                  f"({row['step_fwd_equiv']:.1f} per training step, {row['warm_fwd_equiv']:.1f} warm); authors "
                  f"{authors_fwd:g} fwd "
                  f"({authors_s * 1e3:g} ms in issue 26's run); target <= {TARGETS[case]:g} fwd")
    burnt = next((r for r in rows if r["case"] == "exp_a_burnt"), None)
    if burnt is not None:
        print(f"exp_a after {burnt['burn_in']} sweeps (near stationarity, where a long run spends its sweeps): "
              f"{burnt['sweep_s'] * 1e3:.2f} ms = {burnt['sweep_fwd_equiv']:.1f} fwd per sweep")
    print(json.dumps({"benchmark": "noisy_gibbs_sweep", "dtype": args.dtype, "threads": args.threads,
                      "sweeps": args.sweeps, "rows": rows, "loglog_slope_n": slope,
                      "sweep_us_per_point": dict(zip(map(int, ns), per_point)), "comparison": comparison}))


if __name__ == "__main__":
    main()
