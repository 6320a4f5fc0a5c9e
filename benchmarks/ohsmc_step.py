"""Benchmark: one OHSMC step (move, reweight, resample, psi update) on the two-moons pBNN.

Setting (feynman-kac spec §1, §6.2): the pBNN Dense100-GELU -> Dense20-GELU -> Dense5-GELU ->
Dense1 with the third layer stochastic (105 stochastic, 2,326 deterministic parameters),
``Bernoulli`` likelihood, a batch of 20 two-moons points, N = 100, random-walk move of
variance 0.01, stratified resampling every step, Adam on psi. For each J in ``--particles``
and each dtype (float64, float32):

  * ``batched``: :meth:`lit_bayes.OHSMC.transition` as it runs by default: the network's outputs for the J
    particles and psi's gradient in one C call each (``fused``, :mod:`lit_bayes.models.particle_kernel`: the trunk
    once per point, the layers from the stochastic one up once per particle and point);
  * ``unfused``: the same with ``fused=False``: the trunk once per batch, the stochastic layer as one batched
    product over particles, the layers above on all J x B rows, psi's gradient by the hand-written backward
    (``hand_backprop``, :mod:`lit_bayes.models.sequential_backprop`), all as torch operations
    (``fused/unfused``: the ratio to ``batched``);
  * ``autograd``: the same with ``hand_backprop=False`` (the gradient through autograd; ``hand/auto``: the ratio
    of ``batched`` to it); the three timed in turn;
  * ``loop``: the same step with ``vectorize=False``: one full forward pass per particle
    (the reference), timed for J <= ``--loop-max`` only.

Times are medians of ``--repeats`` steps after ``--warmup`` steps, each step timed once after a block of
forwards and the other paths' steps; ``warm`` times the batched step again in blocks of 10 steps in a row (a loop
of steps alone), beside its own forwards: on a step of ~1 ms the two read 1.0-1.3x apart. After timing, the batched,
fused and loop paths' per-particle log-likelihoods are checked to agree. ``fwd`` is the plain forward-equivalent
of ``plain_forward.py`` (the moons network as ``F.linear`` + tanh-GELU layers, the GELU of
``PartialMLP`` and of the authors' Flax network, and a summed Bernoulli loss on the batch of 20, one
network, same dtype), warm: the median of blocks of 10 calls timed before each step pair
(``plain_forward.unit_and_call_seconds``; before 2026-11-29 200 calls before and 200 after a row's
steps). For comparison (issue 26, timed side by side on this 2-vCPU machine): the authors' compiled
JAX step takes 2.86 ms = 26.7 fwd (J = 100) and 62.9 ms (J = 1,000) in float64; the target is J = 100
float64 <= 13 fwd. Nothing asserts on time.

``--jax-python PYTHON`` (an interpreter with ``jax`` and ``optax``) also times
``ohsmc_step_jax.py``, the same step written in JAX and jitted whole, one-threaded, in a subprocess
right after each float64 row, and prints it in ms and fwd and ours over it (``ours/jax``). On the 2-core
AMD EPYC Zen4 with AVX-512 (2026-11-28, jax 0.10.2, three runs, the other core running a long job), float64:
J = 100, JAX 0.79-0.82 ms = 17.7-18.2 fwd, ours 0.97-1.00 ms = 21.6-22.6 fwd (ours/jax 1.19-1.25); J = 1,000, JAX
7.3-7.9 ms, ours 3.0-3.4 ms (ours/jax 0.40-0.45). A whole-step jit is ~3.5x faster than the authors'
step at J = 100 and ~8x at J = 1,000; ours is 2.9x faster than the authors' at J = 100 but ~20 % slower
than that jit. On the Zen3 EPYC (AVX2; 2026-11-29, no JAX run): J = 100 float64 3.56 ms = 21.4 fwd (fwd 0.166
ms), float32 2.96 ms = 20.0 fwd, through autograd; later that day with the hand-written psi-gradient (two runs,
the other core's jobs paused), float64 1.62-1.72 ms = 17.0-17.6 fwd (fwd 0.095-0.097 ms) against 1.87-1.96 ms
through autograd in turn with it (hand/auto 0.87-0.88), float32 0.86-0.90.

2026-12-02, the Zen3 EPYC idle, one thread, ``--jax-python`` a venv with ``pip install jax jaxlib optax``
(jax 0.10.2), two runs: J = 100 float64 ours 1.16 / 0.98 ms = 16.9 / 20.0 fwd (warm 16.7 / 16.3), the whole-step
jit 1.16 / 0.98 ms (ours/jax 1.00 / 0.99); J = 1,000 ours/jax 0.81 / 0.83. The unit moved between 0.049 and 0.098
ms within that hour (0.107 ms in issue 26's run), so the fwd figures of one row are only comparable within the
row; the same-run ratio to the jit is the steadier figure. The authors' own step is not runnable here (their code
is not in the seeds); issue 26's side-by-side run on this Zen3 put it at 2.86 ms, about 2.5-2.9x this jit's time
today (a ratio across days).
2026-12-04, the same machine: moving the cloud in place (float32 noise promoted by the add, no widened copy)
and one read for the finiteness check cut the step from 106 to 98 aten operations; in one process, interleaved with
the previous code, J = 100 steps 0.976-0.978x (float64) and 0.970-0.976x (float32) as long; this benchmark then read
J = 100 float64 14.0 fwd (fwd 0.134 ms; warm 15.9), float32 14.4: still above the 13 fwd target. At J = 1 a step
costs ~0.9-1.0 ms (~10 fwd): the floor is per-operation and Python cost, not arithmetic.
2026-12-04, later: the moons network's tanh GELU as x sigma(2u) on the float64 upper layer
(``lit_bayes.models.TanhGELU``; the backward from the saved sigma(2u)), in one process interleaved with the
previous code: J = 100 float64 steps 0.95-0.98x as long (six runs), float32 0.99-1.01x (aten's form kept there);
this benchmark then read J = 100 float64 14.5 / 14.6 fwd (fwd 0.100 / 0.107 ms; warm 13.1 / 11.5), float32 13.6
(warm 10.3); J = 1,000 float64 4.5 / 5.0 ms. The 13 fwd target is met by the warm column only.
Tried the same day, not kept: the taped forward and the hand-written backward as two ``torch.compile`` graphs
(fullgraph, static shapes; ~20 s first compile). Each compiled call costs ~35-90 us of Dynamo and AOT wrappers on
this machine, which eats most of what the fused kernels save at J = 100: steps 0.89-0.95x as long in float64
(13.5 fwd in this benchmark), 1.06x in float32; 0.86-0.90x at J = 1,000 and 0.76x at J = 10,000 in float64.
2026-12-04, later still: ``DirectFusedAdam`` (psi's default optimiser) without torch's step wrapper when no hook or
profiler needs it, and its step counters one tensor: its step ~33 against ~75 us; in one process, interleaved with
the previous code, J = 100 steps 0.93 / 0.95x as long in float64, 0.94x in float32, the same parameters to the bit.
This benchmark then read J = 100 float64 14.3 / 13.5 fwd (``--particles 100``, fwd 0.104 / 0.105 ms; warm 11.4 / 9.9),
and in two runs twenty minutes later 16.8 / 16.1 (fwd 0.110 / 0.095 ms; warm 13.2 / 13.0). The main column (a step
timed once, after forwards and the autograd step) took 1.0-1.5x the warm one's milliseconds in these runs.
2026-12-06, the same 2-core AMD EPYC (Zen4, AVX-512), one thread on CPU 1, the other core running single-threaded
jobs: fewer operations and less Python per step, the same draws and values to the bit. A py-spy profile of a loop
of steps (J = 100, float64) put ~23 % of the time in Python lines, ~14 % in torch's argument parsing, ~30 % in
the dispatcher, TensorIterator and malloc, ~25 % in kernels and MKL; each operation costs ~2.5x its isolated time
inside a step, so the work went into operations and Python, not arithmetic: ``lit_bayes.grad_mode.without_grad``
for the step's seven ``@torch.no_grad()`` calls, and the hand-written path's whole step with grad mode off;
``index_select`` for the resampled rows, one kept ``arange(J)``; integer labels to Bernoulli by type promotion
(no copy), no dtype no-ops, ``.to(dtype=...)`` (parsed in ~0.4 against ~0.9 us), ``Tensor.is_cpu`` for
``device.type``, the particles' product as ``F.linear``, a plain ``nn.Linear``'s parameters from its parameter
table, ``DirectFusedAdam``'s loop trimmed. In one process, old code (f9a387f) and new interleaved
(400-600 steps each, medians): J = 100 float64 0.882-0.887x as long (0.72 -> 0.64 ms), float32 0.885x, J = 1,000
float64 0.937x (before the last two changes); timed as this benchmark times (each step after 10 forwards and the
autograd step) 0.897-0.899x. This benchmark, J = 100 (batched / warm fwd): 03:18, new float64 15.3 / 12.7, 15.6 /
12.7, 14.6 / 12.9 (fwd 0.046-0.047 ms), float32 14.5 / 13.7, 15.8 / 14.1, 14.4 / 13.5; then old and new in turn,
float64: old 16.8 / 14.9, 19.2 / 15.9, 16.9 / 14.4 against new 12.6 / 11.9, 14.0 / 12.8, 13.9 / 11.8 (fwd
0.046-0.063 ms). With the unit at ~0.047 ms (it read 0.105 ms at 02:02 the same day, when the old code read 13.1)
the batched column is still above 13 fwd; the warm one is below. Tried, not kept: the stochastic layer's bias
through ``addmm`` (MKL accumulates into the bias: float64 values differ by ~1e-14); ``addcmul`` for two steps of
the logistic GELU's backward (contracted to FMA: not the same bits); the output layer's outer product in the
transposed layout (7.3 -> 4.5 us, but the strided read in the next product gave it back: 33.2 against 32.7 us);
``bincount`` with kept float weights for the copy shares (~0.3 %, new dtype cases); a linear layer's parameters
kept on its tape record (an existing test reads the records). Left as they are: the backward's (20 x 500) x
(500 x 20) product (~28 us in MKL for 0.4 MFLOP), torch's float32 normals (~36 us for 10,000) and the trunk's
tanh GELU in aten's form (a change of form changes the bits).
The same day at 03:20, the machine idle, this benchmark three times on the merged main (``--particles 100``):
J = 100 float64 15.2 / 12.8, 13.8 / 12.9, 15.0 / 13.2 fwd (0.71 / 0.59, 0.64 / 0.60, 0.70 / 0.61 ms; fwd
0.046-0.047 ms), float32 15.1 / 13.8, 15.0 / 14.0, 15.2 / 13.8: the 13 fwd target is not met in this unit on
this machine, where the plain forward costs 0.046 ms against 0.107 ms on the Zen3 of issue 26's table, and the
step, mostly per-operation cost, shrinks less than that from one machine to the other.
2026-12-06, later, the same machine, one thread: the network's forward for the J particles and psi's gradient as
one C call each (``fused``, :mod:`lit_bayes.models.particle_kernel`; 62 torch operations a step left of 104), the
values within ~1e-15 relative of the torch path's in float64. In one process, 100-step loops interleaved with
``fused=False``: J = 100 float64 0.485 against 0.628 ms (0.77x), float32 0.79x; J = 1,000 float64 0.43x, J = 10,000
0.61x, with two threads 0.41x and 0.62x. The kernel's exponential had first been clamped to e^-708 instead of
giving 0, so the saturated GELU units of a trained network took subnormal factors, whose arithmetic runs on the
processor's slow path: fixed, a trained step's two C calls 61 / 107 -> 38 / 80 us. This benchmark,
``--particles 100``, J = 100 float64 batched / warm fwd (fwd 0.046-0.048 ms): 12.8 / 9.9, 11.8 / 10.4, 12.2 / 10.1,
11.9 / 10.2 on the idle machine (0.54-0.59 ms), 15.5 and 16.4 in the two runs started right after the test suite
and a package install; fused/unfused 0.81-0.85; J = 1,000 float64 2.49 ms (unfused 4.30), J = 10,000 23.5 against
52.1 ms. With ``--jax-python`` (jax 0.10.2): the whole-step jit 0.71-0.88 ms = 15.3-19.0 fwd in the same runs,
ours/jax 0.80, 0.63 (idle) and 1.02 (the run after the install). Then the kernel's backward skipped the particles
without weight (all output gradients 0: ~40 % of them after resampling), which also keeps a NaN particle out of
psi's gradient; three runs on the idle machine: J = 100 float64 11.2 / 9.8, 11.2 / 10.2, 11.3 / 9.8 (0.52-0.53 ms),
fused/unfused 0.76-0.80, float32 12.0-12.3 / 10.6-12.3; J = 1,000 float64 1.75 ms (unfused 2.24), float32 1.28.
The J = 100 float64 target of 13 fwd is met on the idle machine, by ~13 %.
Run from the repository root:  python benchmarks/ohsmc_step.py [--device cpu|cuda] [--threads N] (one thread by default)
[--jax-python PATH]. The last line printed is one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import torch

from plain_forward import median_seconds, plain_forward, unit_and_call_seconds

from lit_bayes import OHSMC, Bernoulli
from lit_bayes.data import TwoMoons
from lit_bayes.models import PartialMLP

JAX_REFERENCE_MS = {100: 2.86, 1000: 62.9}  # float64, issue 26's side-by-side run
JAX_REFERENCE_FWD = {100: 26.7}  # the same, in plain forward-equivalents of that run
TARGET_FWD = 13.0  # J = 100, float64 (issue 26)
WARM_BLOCK = 10  # steps in a row of the ``warm`` column


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--particles", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--loop-max", type=int, default=1000, help="largest J timed with the loop")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: issue 26's unit is one thread)")
    parser.add_argument("--jax-python", default=None,
                        help="a Python with jax and optax: also time ohsmc_step_jax.py (float64) beside each J")
    args = parser.parse_args(argv)
    if min(*args.particles, args.repeats, args.threads) < 1 or args.warmup < 0:
        parser.error("--particles, --repeats and --threads must be positive, --warmup non-negative")
    return args


def build(num_particles: int, dtype: torch.dtype, device: str, vectorize: bool, hand_backprop: bool = True,
          fused: bool = True):
    torch.manual_seed(0)
    sampler = OHSMC(PartialMLP([2, 100, 20, 5, 1], 2), Bernoulli(), num_particles=num_particles,
                    num_data=100, seed=0, vectorize=vectorize, hand_backprop=hand_backprop, fused=fused)
    sampler = sampler.to(device=device, dtype=dtype)
    sampler.setup("fit")
    optimizer = sampler.configure_optimizers()
    return sampler, optimizer


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def synced(call, device: str):
    """``call`` followed by a device synchronisation (timed whole)."""
    def run():
        call()
        sync(device)
    return run


def jax_step_ms(python: str, num_particles: int, threads: int) -> float:
    """Median ms of ``ohsmc_step_jax.py``'s step at J = ``num_particles`` under ``python``, ``threads`` threads."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if threads == 1:
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    script = Path(__file__).with_name("ohsmc_step_jax.py")
    done = subprocess.run([python, str(script), "--particles", str(num_particles)], capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        raise SystemExit(f"{script.name} failed under {python}:\n{done.stderr[-2000:]}")
    return float(done.stdout.split("jax_ms")[-1])


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    data = TwoMoons(batch_size=20, seed=0)
    data.setup("fit")
    x0, y0 = next(iter(data.train_dataloader()))
    results = []
    print(f"device {args.device}, {args.threads} threads; ms per OHSMC step, batch 20")
    print(f"{'J':>6} {'dtype':>8} {'fwd':>7} {'batched':>9} {'in fwd':>7} {'warm':>7} {'in fwd':>7} {'unfused':>9} "
          f"{'fused/unfused':>13} {'autograd':>9} {'hand/auto':>9} {'loop':>9} {'loop/batched':>12} "
          f"{'JAX f64 ref':>11}")
    for num in args.particles:
        for dtype in (torch.float64, torch.float32):
            x, y = x0.to(args.device, dtype), y0.to(args.device)
            fast, fast_opt = build(num, dtype, args.device, True)
            unfused, unfused_opt = build(num, dtype, args.device, True, fused=False)
            auto, auto_opt = build(num, dtype, args.device, True, hand_backprop=False)
            row = {"particles": num, "dtype": str(dtype).split(".")[-1]}
            forward = plain_forward([2, 100, 20, 5, 1], "gelu_tanh", "bernoulli", x, y.to(dtype))
            unit, steps = unit_and_call_seconds(
                forward, {"batched": synced(lambda: fast.transition(x, y, fast_opt), args.device),
                          "unfused": synced(lambda: unfused.transition(x, y, unfused_opt), args.device),
                          "autograd": synced(lambda: auto.transition(x, y, auto_opt), args.device)},
                args.repeats, warmup=args.warmup)
            row["batched_ms"], row["autograd_ms"] = 1e3 * steps["batched"], 1e3 * steps["autograd"]
            row["unfused_ms"] = 1e3 * steps["unfused"]
            row["fused_over_unfused"] = row["batched_ms"] / row["unfused_ms"]
            row["hand_over_autograd"] = row["batched_ms"] / row["autograd_ms"]
            row["fwd_ms"] = 1e3 * unit
            row["batched_fwd_equiv"] = row["batched_ms"] / row["fwd_ms"]
            warm_unit, warm = unit_and_call_seconds(
                forward, {"batched": synced(lambda: fast.transition(x, y, fast_opt), args.device)},
                max(3, args.repeats // WARM_BLOCK), warmup=args.warmup, call_block=WARM_BLOCK)
            row["warm_ms"], row["warm_fwd_ms"] = 1e3 * warm["batched"], 1e3 * warm_unit
            row["warm_fwd_equiv"] = row["warm_ms"] / row["warm_fwd_ms"]
            if num <= args.loop_max:
                slow, slow_opt = build(num, dtype, args.device, False)
                with torch.no_grad():  # same particles and psi: same log-likelihoods
                    params = slow.particles()
                    ll_slow = slow.point_log_likelihoods(params, x, y)
                    fast.model.load_state_dict(slow.model.state_dict())
                    ll_fast = fast.point_log_likelihoods(params, x, y)
                    ll_fused = fast.taped_point_log_likelihoods(params, x, y)  # the kernel's, where it applies
                tol = 1e-9 if dtype == torch.float64 else 1e-4
                if not (torch.allclose(ll_fast, ll_slow, atol=tol, rtol=tol)
                        and torch.allclose(ll_fused, ll_slow, atol=tol, rtol=tol)):
                    raise SystemExit(f"batched, fused and loop log-likelihoods differ for J={num}, {dtype}")
                repeats = max(3, args.repeats // 10)
                loop_step = synced(lambda: slow.transition(x, y, slow_opt), args.device)
                row["loop_ms"] = 1e3 * median_seconds({"loop": loop_step}, repeats, warmup=1)["loop"]
                row["loop_over_batched"] = row["loop_ms"] / row["batched_ms"]
            reference = JAX_REFERENCE_MS.get(num)
            if reference is not None:
                row["jax_f64_reference_ms"] = reference
                row["over_reference"] = row["batched_ms"] / reference
                if num in JAX_REFERENCE_FWD:
                    row["jax_f64_reference_fwd_equiv"] = JAX_REFERENCE_FWD[num]
            if args.jax_python and dtype == torch.float64:
                row["jax_f64_ms"] = jax_step_ms(args.jax_python, num, args.threads)
                row["over_jax"] = row["batched_ms"] / row["jax_f64_ms"]
                row["jax_f64_fwd_equiv"] = row["jax_f64_ms"] / row["fwd_ms"]
            results.append(row)
            loop = f"{row['loop_ms']:9.2f}" if "loop_ms" in row else f"{'-':>9}"
            ratio = f"{row['loop_over_batched']:12.1f}" if "loop_over_batched" in row else f"{'-':>12}"
            ref = f"{reference:11.1f}" if reference is not None else f"{'-':>11}"
            print(f"{num:6d} {row['dtype']:>8} {row['fwd_ms']:7.3f} {row['batched_ms']:9.2f} "
                  f"{row['batched_fwd_equiv']:7.1f} {row['warm_ms']:7.2f} {row['warm_fwd_equiv']:7.1f} "
                  f"{row['unfused_ms']:9.2f} {row['fused_over_unfused']:13.2f} "
                  f"{row['autograd_ms']:9.2f} {row['hand_over_autograd']:9.2f} "
                  f"{loop} {ratio} {ref}")
            if "jax_f64_ms" in row:
                print(f"{num:6d} {'jax f64':>8} {'':7} {row['jax_f64_ms']:9.2f} {row['jax_f64_fwd_equiv']:7.1f}"
                      f"   ours/jax {row['over_jax']:.2f}")
    print(f"JAX f64 reference at J = 100: {JAX_REFERENCE_FWD[100]} fwd; target for ours (J = 100, float64): "
          f"<= {TARGET_FWD:g} fwd. 'batched': each step timed once after the forwards (and the other paths' steps); "
          f"'warm': {WARM_BLOCK} steps in a row, then forwards, in turn (a loop of steps alone)")
    print(json.dumps({"benchmark": "ohsmc_step", "device": args.device, "threads": args.threads, "results": results}))


if __name__ == "__main__":
    main()
