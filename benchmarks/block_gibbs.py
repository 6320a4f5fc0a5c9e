"""FNBG sweep cost: incremental (cached activations) vs naive full-forward, and chains/second.

MLP(784, 10, 10, 10, 10) with beta_1 = 10 (130 blocks: 100 of 79/78 parameters, 30 of 11),
batch 3000 of random inputs, the Table 5 variances for B = 3000. Both paths run in the same
process on the same data; the ratio is what matters. Run: ``python benchmarks/block_gibbs.py``
(``--sweeps`` per measurement, ``--chains`` and ``--naive-chains`` to list, ``--threads``).
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from lit_bayes import Categorical, GaussianPrior
from lit_bayes.models import MLP
from lit_bayes.samplers.block_gibbs import BlockGibbs

BATCH, WIDTHS, VARIANCES = 3000, [784, 10, 10, 10, 10], [1e-2, 1e-4, 1e-4, 1e-5]


def seconds_per_sweep(num_chains: int, incremental: bool, sweeps: int) -> tuple[float, float]:
    """Mean wall time of one sweep (block plans built beforehand) and the acceptance rate."""
    sampler = BlockGibbs(MLP(WIDTHS), Categorical(10), GaussianPrior(10.0), blocks="finer_node", beta=[10, 1, 1, 1],
                         proposal_variance=VARIANCES, incremental=incremental, num_chains=num_chains, seed=0)
    sampler.setup("fit")
    stepper = sampler.configure_optimizers()
    data = torch.Generator().manual_seed(1)
    x, y = torch.randn(BATCH, WIDTHS[0], generator=data), torch.randint(10, (BATCH,), generator=data)
    sampler.layout()
    start = time.perf_counter()
    for _ in range(sweeps):
        stepper.step(lambda: sampler.block_target(x, y))
    elapsed = (time.perf_counter() - start) / sweeps
    accepted, proposed = stepper.acceptance()
    return elapsed, float(accepted.mean()) / proposed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=2)
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--naive-chains", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    blocks = BlockGibbs(MLP(WIDTHS), Categorical(10), blocks="finer_node", beta=[10, 1, 1, 1]).partition.num_blocks
    print(f"MLP{tuple(WIDTHS)}, {blocks} blocks, batch {BATCH}, {args.threads} threads, {args.sweeps} sweeps each")
    print(f"{'chains':>6} {'path':>11} {'s/sweep':>9} {'chain-sweeps/s':>15} {'accept':>7}")
    rows = []
    for chains in args.chains:
        for incremental in (True, False):
            if not incremental and chains not in args.naive_chains:
                continue
            sec, rate = seconds_per_sweep(chains, incremental, args.sweeps)
            path = "incremental" if incremental else "naive"
            rows.append({"chains": chains, "path": path, "s_per_sweep": sec, "chain_sweeps_per_s": chains / sec})
            print(f"{chains:>6} {path:>11} {sec:>9.4f} {chains / sec:>15.2f} {rate:>7.3f}")
    speedups = {}
    for row in rows:
        if row["path"] == "naive":
            fast = next(r for r in rows if r["chains"] == row["chains"] and r["path"] == "incremental")
            speedups[str(row["chains"])] = row["s_per_sweep"] / fast["s_per_sweep"]
            print(f"speed-up (naive / incremental), {row['chains']} chains: {speedups[str(row['chains'])]:.1f}x")
    print(json.dumps({"benchmark": "block_gibbs", "blocks": blocks, "batch": BATCH, "threads": args.threads,
                      "sweeps": args.sweeps, "rows": rows, "speedup_naive_over_incremental": speedups}))


if __name__ == "__main__":
    main()
