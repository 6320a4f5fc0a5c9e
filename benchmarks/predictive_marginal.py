"""Benchmark: vectorised ``marginal_predictive`` against a plain Python loop over samples.

Setting (the issue's): MLP(784, 10, 10, 10, 10) with sigmoid activations, Categorical(10)
likelihood, ``--samples`` parameter draws (default 1,000) and ``--points`` random inputs
(default 10,000), float32. The reference path loops over samples: one
``torch.func.functional_call`` forward over all points per sample, softmax, running sum,
divided by S at the end. The vectorised paths call
:func:`lit_bayes.predictive.marginal_predictive` with each ``--chunk-sizes`` value on tiles of
``--tile-points`` points (``auto``: the defaults it picks for the device, on CPU tiles of 2,000 points
and chunks of 100 samples), once untiled (one tile of all points) with the chunk size it picked
before tiles existed (chunks of 20 for 10,000 points), and once at the first chunk size with ``fused=False``
(``,eager``): on CPU the other paths take :class:`lit_bayes.predictive_kernel.FusedPredictive` (the first
layer's products in torch, everything above them in one compiled C loop), where it can be built; a line says
which ran.

Each path runs in its own subprocess (same inputs, same seed, same thread count), so the
peak memory of one path cannot hide in another's. Peak memory is measured as:
  * CPU: the rise of the process's peak resident set size (VmHWM) over its resident size
    just before the timed call; the peak is reset first through /proc/self/clear_refs
    (Linux). Where that is not allowed, the rise of ``ru_maxrss`` over its value before the
    call (an under-estimate if setup peaked higher). The method used is printed.
  * CUDA: ``torch.cuda.max_memory_allocated`` minus the allocation before the call
    (after ``reset_peak_memory_stats``).
Each path is warmed up on a small slice first (which also builds the fused kernel); wall time is one timed call
(``--repeats`` takes the minimum of several). Times are ratios within this run only; nothing asserts on them.

Fraction of peak (issue 26, target >= 0.85): the matrix-product FLOPs of the predictive,
2 S P sum_l d_l d_(l+1), per second, over the machine's sgemm rate: the best of five 2048 x 2048 float32
products (same device and thread count) measured in every path's own process right after its timed calls and
around the ceilings below, the best of all these in the run (on this machine the rate moves between ~50 and ~95
GFLOP/s within minutes, and the best rate of the run is the conservative denominator). Not before a path's calls:
their freed matrices would be reused by the path's allocations and hide its peak memory. The same products timed
alone, in the eager path's layout with no elementwise work (the small layers as batched products), give the
ceiling of the eager path's fraction; the first layer's products alone, the fused path's (its kernel free). Both
multiply every chunk's own weights (until 2026-12-04 one chunk's weights, kept in the caches, served every chunk:
the ceilings quoted before that were optimistic).

Figures, 2-core AMD EPYC Zen3 (AVX2), 2026-12-04:
  * Before the fused kernel (eager only), one thread: the best path (chunk 100, tile 2,000) read 0.55-0.77 of the
    run's sgemm peak in five runs, its products alone 0.78-0.94; the eager elementwise passes over
    (chunk, 10, tile) tensors (activations ~0.15-0.25 of peak, marginalisation ~0.05) were what it lost.
  * With the fused kernel (``--repeats 3``, idle machine), chunk 100, tile 2,000. One thread
    (``OMP_NUM_THREADS=1``): 2.11 s = 0.82 of the run's peak (94.1 GFLOP/s) against 2.70 s = 0.64 eager (0.78x the
    time), peak memory 26 against 108 MiB, max |dp| 2.3e-7, products alone (eager layout) 0.89; a later run 2.05 s =
    0.837 against 2.72 s = 0.63, the first layer's products alone 1.04 (all the FLOPs over their time). Two threads:
    1.07 s = 0.80 (peak 191.1) against 1.43 s = 0.60 (0.75x), products alone 0.82; a later run 1.00 s = 0.848
    against 1.33 s = 0.64, the first layer's products alone 0.90. In one process, best of three calls interleaved:
    0.83-0.84 on one thread and on two. So the 0.85 target is reached to within 0.01-0.03 and not reliably: the
    first layer's product runs at ~0.93-0.96 of the square-sgemm rate on one thread (~0.85-0.95 on two, its weights
    new to the caches at every chunk), and the kernel takes ~14 % of the time (~30 ns per sample and point on one
    thread: 30 sigmoids, 10 exponentials, 300 multiply-adds; its exponentials, ~17 vector operations each, are about
    half of it).
  * The same at 19:39, the ceilings now multiplying every chunk's own weights: one thread 2.00 s = 0.844 against
    2.62 s = 0.643 eager, products alone (eager layout) 0.90, the first layer's products alone 0.96; two threads
    1.07 s = 0.824 against 1.41 s = 0.624, ceilings 0.91 and 0.96. The fused path reaches 0.86-0.88 of its own
    ceiling.
    Tried and not kept: Estrin's scheme for the exponential's polynomial, two outputs per pass over the inputs,
    software prefetch of the next points (each within the noise), vectors of 16 or 32 lanes (GCC spills them: 2x
    slower), each activation consumed by all outputs at once (input-major loops: 1.8x slower); a log-space sum over
    samples (a second exponential per class and a stored row) cost ~20 % more.
  * 2026-12-06, a 2-core AMD EPYC whose compiler targets AVX-512 (GCC 12 reads it as znver3 with AVX-512; the
    kernel's vectors are 16 lanes there, 8 elsewhere): the kernel reworked (activation constants folded into the
    samples' weights, so a sigmoid or tanh unit is one 2^t, one add and one division; 2^t by one shifted add and a
    degree-5 polynomial; base-2 softmax; two vectors in flight). The kernel alone (chunk 100, tile 2,000, one
    thread, interleaved): sigmoid 22.7-27.2 -> 14.5-18.2 ns per sample and point, tanh 24.3-25.8 -> 14.7-15.7,
    ReLU 13.4 -> 9.7; built without AVX-512 (8 lanes, the AVX2 machines' build) sigmoid 28.0-29.6 -> 21.1-24.3.
    Idle machine, one thread, --repeats 3: the previous kernel (f9a387f) 1.935 s = 0.84 of the run's peak
    (100.5 GFLOP/s), the first layer's products alone 0.96; this one 1.724 s = 0.95 (peak 99.6), against eager
    2.194 s = 0.75 (0.79x the time), the first layer's products alone 1.00. Two threads: 0.943 s = 0.91 (peak
    190.5) against eager 1.294 s = 0.66. In one process, interleaved, whole tiles: 0.949-0.959x the time of the
    previous kernel; the products and the Python alone 1.688 s, so the kernel went from ~0.17 s to ~0.09 s in place.
    Tried and not kept: the reciprocal by rcp and one Newton step instead of the division (1.03-1.04x the time
    with and without AVX-512), the layers as an explicitly unrolled sequence of inlined calls (within the noise:
    GCC merges the identical layer bodies again), one, three or four vectors in flight (two is best with 8 and with
    16 lanes, 0.95x of four with 8 lanes).

Run from the repository root:  python benchmarks/predictive_marginal.py [--device cpu|cuda]
The last line printed is one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOLERANCE = 1e-6
WIDTHS = [784, 10, 10, 10, 10]


def parse_args(argv=None) -> argparse.Namespace:
    import torch  # noqa: F401  (only to pick the default device)

    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=default_device, choices=["cpu", "cuda"])
    parser.add_argument("--samples", type=int, default=1000, help="number of parameter samples S")
    parser.add_argument("--points", type=int, default=10_000, help="number of input points")
    parser.add_argument("--chunk-sizes", default="auto,20,1000",
                        help="comma-separated chunk sizes of the vectorised path; auto: the library's default for "
                             "a tile on --device (lit_bayes.predictive.default_chunk_size)")
    parser.add_argument("--tile-points", default="auto",
                        help="points per tile of the vectorised paths; auto: the library's default on --device "
                             "(lit_bayes.predictive.default_tile_points)")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per path (the minimum is reported)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.samples < 1 or args.points < 1 or args.repeats < 1:
        parser.error("--samples, --points and --repeats must be positive")
    from lit_bayes.predictive import default_chunk_size, default_tile_points

    try:
        tile = default_tile_points(args.points, args.device) if args.tile_points == "auto" else int(args.tile_points)
        auto = default_chunk_size(min(args.points, tile), args.device)
        chunks = [auto if c.strip() == "auto" else int(c) for c in args.chunk_sizes.split(",") if c.strip()]
    except ValueError:
        parser.error("--chunk-sizes must list positive integers or auto, --tile-points a positive integer or auto")
    if not chunks or min(chunks) < 1 or tile < 1:
        parser.error("--chunk-sizes must list positive integers or auto, --tile-points a positive integer or auto")
    # (chunk, tile, fused) of every vectorised path: the eager one at the first chunk size, the untiled one last
    args.paths = list(dict.fromkeys([(c, tile, True) for c in chunks] + [(chunks[0], tile, False)]
                                    + [(default_chunk_size(args.points, args.device), args.points, True)]))
    return args


# ---------------------------------------------------------------------- worker side
def build(args):
    import torch

    from lit_bayes import SGMCMC, Categorical, GaussianPrior
    from lit_bayes.models import MLP

    device = torch.device(args.device)
    sampler = SGMCMC(MLP(WIDTHS, activation="sigmoid"), Categorical(WIDTHS[-1]), num_data=args.points).to(device)
    template = {n: p.detach() for n, p in sampler.template_parameters().items()}
    stacked = {n: p.unsqueeze(0).expand(args.samples, *p.shape) for n, p in template.items()}
    generator = torch.Generator().manual_seed(args.seed)
    samples = {n: p.to(device) for n, p in GaussianPrior(1.0).sample(stacked, generator).items()}
    x = torch.rand(args.points, WIDTHS[0], generator=generator).to(device)
    return sampler, samples, x


def loop_path(sampler, samples, x):
    """Reference: one forward per sample, softmax, running average of probabilities."""
    import torch
    from torch.func import functional_call

    net, _ = sampler.split_parameters(samples)
    num = next(iter(net.values())).shape[0]
    total = None
    with torch.no_grad():
        for s in range(num):
            probs = torch.softmax(functional_call(sampler.model, {n: p[s] for n, p in net.items()}, (x,)), dim=-1)
            total = probs if total is None else total + probs
    return total / num


def vectorised_path(sampler, samples, x, chunk_size, tile_points, fused):
    from lit_bayes.predictive import marginal_predictive, uniform_log_weights

    num = next(iter(samples.values())).shape[0]
    return marginal_predictive(sampler, samples, uniform_log_weights(num, x.device), x, chunk_size=chunk_size,
                               tile_points=tile_points, fused=fused).probs


def path_name(chunk: int, tile: int, fused: bool) -> str:
    return f"chunk={chunk},tile={tile}" + ("" if fused else ",eager")


def parse_path(name: str) -> tuple[int, int, bool]:
    """``(chunk, tile, fused)`` of a :func:`path_name`."""
    parts = name.split(",")
    return int(parts[0].split("=")[1]), int(parts[1].split("=")[1]), parts[-1] != "eager"


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class PeakMemory:
    """Peak extra memory of the code run between ``start`` and ``stop`` (see module docstring)."""

    def __init__(self, device):
        self.device = device
        self.method = None

    def start(self):
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            self.method = "cuda max_memory_allocated - allocated before"
            return
        try:
            Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
            self.base = _status_kib("VmRSS") * 1024
            self.method = "VmHWM (reset via clear_refs) - VmRSS before"
        except OSError:
            self.base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            self.method = "ru_maxrss after - ru_maxrss before"

    def stop(self) -> int:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.base
        if self.method.startswith("VmHWM"):
            return _status_kib("VmHWM") * 1024 - self.base
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.base


def worker(args) -> None:
    import torch
    from safetensors.torch import save_file

    sampler, samples, x = build(args)
    if args.worker == "loop":
        run = lambda s, xx: loop_path(sampler, s, xx)  # noqa: E731
    else:
        chunk, tile, fused = parse_path(args.worker)
        run = lambda s, xx: vectorised_path(sampler, s, xx, chunk, tile, fused)  # noqa: E731

    def sync():
        if x.device.type == "cuda":
            torch.cuda.synchronize()

    # warm-up on a small slice (allocator, kernels, vmap tracing)
    run({n: p[: min(4, args.samples)] for n, p in samples.items()}, x[:64])
    sync()
    memory = PeakMemory(x.device)
    memory.start()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        probs = run(samples, x)
        sync()
        times.append(time.perf_counter() - start)
    peak = memory.stop()
    rate = sgemm_flops_per_second(args.device)  # after the peak memory is read: its matrices stay out of it
    save_file({"probs": probs.float().cpu().contiguous()}, args.out)
    print(json.dumps({"seconds": min(times), "peak_bytes": peak, "method": memory.method,
                      "threads": torch.get_num_threads(), "sgemm_flops": rate}))


def sgemm_flops_per_second(device: str, size: int = 2048, repeats: int = 5) -> float:
    """The best float32 matrix-product rate of ``repeats`` square products of ``size`` on ``device``."""
    import torch

    a, b = (torch.rand(size, size, device=device) for _ in range(2))
    best = float("inf")
    for _ in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def products_only_seconds(device: str, samples: int, points: int, chunk: int, tile: int, first_only: bool = False,
                          repeats: int = 3) -> float:
    """The predictive's matrix products alone, ``tile`` points and ``chunk`` samples at a time in the layout
    of ``MLP.stacked_forward`` (first layer one product over the chunk, then batched products; ``first_only``:
    the first layer's products alone, as the fused path makes them), with no activation, softmax or averaging:
    the best of ``repeats`` passes over all samples. All the predictive's FLOPs over that time, over the sgemm
    peak, is the ceiling of "of peak" for this layout on this device (``first_only``: the fused path's, were its
    kernel free)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    tiles = [torch.rand(WIDTHS[0], min(tile, points - first), generator=generator).to(device)
             for first in range(0, points, tile)]
    # every sample's own weights, as in the predictive: a chunk's weights are new to the caches
    weights = [torch.randn(samples, b, a, generator=generator).to(device) for a, b in zip(WIDTHS[:-1], WIDTHS[1:])]
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for x_t in tiles:
            for first in range(0, samples, chunk):
                chunk_weights = [w[first:first + chunk] for w in weights]
                h = torch.mm(chunk_weights[0].reshape(-1, WIDTHS[0]), x_t).reshape(len(chunk_weights[0]), WIDTHS[1], -1)
                for w in chunk_weights[1:] if not first_only else ():
                    h = torch.bmm(w, h)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def timed_beside_sgemm(seconds, device: str, rates: list[float]) -> float:
    """``seconds()`` (a timing), the sgemm rate measured right before and right after it appended to ``rates``."""
    rates.append(sgemm_flops_per_second(device))
    taken = seconds()
    rates.append(sgemm_flops_per_second(device))
    return taken


# ---------------------------------------------------------------------- driver side
def run_path(args, name: str, out: Path) -> dict:
    command = [
        sys.executable, os.path.abspath(__file__), "--worker", name, "--out", str(out),
        "--device", args.device, "--samples", str(args.samples), "--points", str(args.points),
        "--repeats", str(args.repeats), "--seed", str(args.seed),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"path {name} failed with exit code {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    args = parse_args()
    if args.worker is not None:
        worker(args)
        return 0

    import platform

    import torch
    from safetensors.torch import load_file

    from lit_bayes.predictive_kernel import LOGISTIC, fused_tile_kernel

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but CUDA is not available")
    names = ["loop"] + [path_name(*path) for path in args.paths]
    results, probs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            out = Path(tmp) / f"{name.replace('=', '_').replace(',', '_')}.safetensors"
            results[name] = run_path(args, name, out)
            probs[name] = load_file(str(out))["probs"]

    torch.set_num_threads(results["loop"]["threads"])
    rates = [r["sgemm_flops"] for r in results.values()]  # the rates measured after every path, and below
    flops = 2 * args.samples * args.points * sum(a * b for a, b in zip(WIDTHS[:-1], WIDTHS[1:]))
    reference = probs["loop"]
    loop_s = results["loop"]["seconds"]
    cpu_name = platform.processor() or platform.machine()
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else cpu_name
    print(f"predictive_marginal: MLP{tuple(WIDTHS)} sigmoid, {args.samples} samples x {args.points} points, "
          f"float32, device={args.device} ({device_name}), torch threads={results['loop']['threads']}, "
          f"os.cpu_count()={os.cpu_count()}")
    print(f"peak memory = extra memory at the path's peak: {results['loop']['method']}")
    kernel = args.device == "cpu" and fused_tile_kernel(tuple(WIDTHS[1:]), LOGISTIC) is not None
    print("paths without ',eager': " + ("lit_bayes.predictive_kernel's fused kernel above the first layer's products"
                                       if kernel else "the eager path (no fused kernel on this device or machine)"))
    one = {path_name(c, t, f): min(c, args.samples) * min(t, args.points) * WIDTHS[-1] * 4 / 2**20
           for c, t, f in args.paths}
    print("for scale, one (chunk x tile x 10) float32 activation: "
          + ", ".join(f"{name}: {mib:.1f} MiB" for name, mib in one.items())
          + f"; the loop's per-sample (points x 10) activation: {args.points * WIDTHS[-1] * 4 / 2**20:.2f} MiB")
    best = min((n for n in names if n != "loop"), key=lambda n: results[n]["seconds"])
    chunk, tile, _ = parse_path(best)
    products_s = timed_beside_sgemm(lambda: products_only_seconds(args.device, args.samples, args.points, chunk,
                                                                  tile), args.device, rates)
    first_s = timed_beside_sgemm(lambda: products_only_seconds(args.device, args.samples, args.points, chunk, tile,
                                                               first_only=True), args.device, rates)
    peak_rate = max(rates)
    print(f"sgemm peak (2048^2 float32, the best of {len(rates)} measurements in this run, {min(rates) / 1e9:.1f}"
          f"-{peak_rate / 1e9:.1f} GFLOP/s): {peak_rate / 1e9:.1f} GFLOP/s; the predictive's products: "
          f"{flops / 1e9:.1f} GFLOP; 'of peak' = their rate over that peak (target >= 0.85); 'sgemm GF/s': the "
          "rate measured right after the path in its process")
    header = (f"{'path':<46}{'seconds':>10}{'speed-up':>10}{'of peak':>9}{'sgemm GF/s':>11}{'peak MiB':>11}"
              f"{'max |dp|':>12}")
    print(header)
    print("-" * len(header))
    figures = {"benchmark": "predictive_marginal", "device": args.device, "samples": args.samples,
               "points": args.points, "widths": WIDTHS, "threads": results["loop"]["threads"],
               "memory_method": results["loop"]["method"], "loop_s": round(loop_s, 4),
               "loop_peak_mib": round(results["loop"]["peak_bytes"] / 2**20, 1),
               "sgemm_gflops": round(peak_rate / 1e9, 2), "sgemm_gflops_lowest": round(min(rates) / 1e9, 2),
               "predictive_gflop": round(flops / 1e9, 3), "fused_kernel": kernel}
    fraction = {name: flops / results[name]["seconds"] / peak_rate for name in names}
    max_diff = 0.0
    for name in names:
        seconds = results[name]["seconds"]
        diff = float((probs[name] - reference).abs().max())
        max_diff = max(max_diff, diff)
        label = "python loop over samples" if name == "loop" else f"marginal_predictive {name}"
        print(f"{label:<46}{seconds:>10.3f}{loop_s / seconds:>9.2f}x{fraction[name]:>9.2f}"
              f"{results[name]['sgemm_flops'] / 1e9:>11.1f}{results[name]['peak_bytes'] / 2**20:>11.1f}{diff:>12.2e}")
        if name != "loop":
            chunk_n, tile_n, fused_n = parse_path(name)
            key = f"vectorised_c{chunk_n}_t{tile_n}" + ("" if fused_n else "_eager")
            figures[f"{key}_s"] = round(seconds, 4)
            figures[f"{key}_speedup"] = round(loop_s / seconds, 3)
            figures[f"{key}_peak_mib"] = round(results[name]["peak_bytes"] / 2**20, 1)
            figures[f"{key}_max_abs_diff"] = diff
            figures[f"{key}_sgemm_gflops"] = round(results[name]["sgemm_flops"] / 1e9, 2)
            figures[f"{key}_fraction_of_sgemm_peak"] = round(fraction[name], 3)
    figures["vectorised_s"] = round(results[best]["seconds"], 4)
    figures["vectorised_best_chunk"], figures["vectorised_best_tile"] = chunk, tile
    figures["speedup"] = round(loop_s / results[best]["seconds"], 3)
    figures["fraction_of_sgemm_peak"] = round(fraction[best], 3)
    figures["max_abs_diff"] = max_diff
    figures["within_tolerance"] = max_diff <= TOLERANCE
    ceiling = flops / products_s / peak_rate
    figures["products_only_fraction_of_sgemm_peak"] = round(ceiling, 3)
    print(f"the matrix products alone at {best} (no activation, softmax or averaging): {ceiling:.2f} of peak, "
          "the ceiling of 'of peak' for this layout here")
    first_ceiling = flops / first_s / peak_rate
    figures["first_products_only_fraction_of_sgemm_peak"] = round(first_ceiling, 3)
    print(f"the first layer's products alone at {best}: {first_ceiling:.2f} of peak, the fused path's ceiling "
          "(its kernel free)")
    print(f"max abs difference of probabilities vs loop: {max_diff:.2e} "
          f"({'OK' if max_diff <= TOLERANCE else 'ABOVE'} tolerance {TOLERANCE:g})")
    print(json.dumps(figures))
    return 0 if max_diff <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
