"""Depth against prediction on noisy XOR (FNBG spec §4, E6 / Fig. 7): MLP(2, 2, 1) and
MLP(2, 2, 2, 2, 2, 2, 2, 1), minibatch NBG (batch 100, variance 0.04, recipes/fnbg/xor_nbg.yaml and
recipes/fnbg/xor_nbg_deep.yaml), 10 chains each, one ``lit-bayes fit`` run per net.

    python recipes/fnbg/xor_fig7.py            # the paper's 110,000 sweeps per chain
    python recipes/fnbg/xor_fig7.py --quick    # 2,000 sweeps per chain: the CI-sized run

Accuracy is per chain (each chain's own predictive from its last 10,000 draws, fewer in a shorter
run; lit_bayes.chain_metrics); the paper gives the median over the 10 chains, 86.75 % for
MLP(2, 2, 1) and 98.88 % for the deep net, and notes the deep net's smaller interquartile range. The deep net's chains are those of
Fig. 3's scenario 1 (xor_fig3.py). The acceptance rate of every layer is in each run's summary.json
and printed. Writes <out>/xor_fig7.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from common import CHAINS_UNCONVERGED, fit, kept_draws, scaled, show, summary

from lit_bayes.chain_metrics import chain_accuracies
from lit_bayes.recipe_runs import health_verdict, verdict_lines

PAPER = {"MLP(2,2,1)": ("xor_nbg", 86.75), "MLP(2,2,2,2,2,2,2,1)": ("xor_nbg_deep", 98.88)}  # median accuracy %
QUICK_SWEEPS = 2_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=110_000, help="sweeps per chain")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SWEEPS:,} sweeps per chain (overrides --sweeps)")
    parser.add_argument("--out", default="runs/fnbg")
    args = parser.parse_args()
    sweeps = QUICK_SWEEPS if args.quick else args.sweeps
    if sweeps < 11:
        parser.error(f"--sweeps must be >= 11 (1/11 of them burn-in), got {sweeps}")
    draws = min(10_000, sweeps - sweeps // 11)
    rows = []
    for net, (config, paper) in PAPER.items():
        run_dir = fit([f"{config}.yaml"], f"{args.out}/fig7_{config}", scaled(sweeps, 50))
        accuracy = [100 * a for a in chain_accuracies(kept_draws(run_dir), draws)]
        q1, median, q3 = statistics.quantiles(accuracy, n=4, method="inclusive")
        finished = summary(run_dir)
        metrics = finished["metrics"]
        acceptance = {name[len("accept/layer_"):]: rate for name, rate in metrics.items()
                      if name.startswith("accept/layer_")}
        rows.append({"net": net, "sweeps": sweeps, "chains": len(accuracy), "median": median, "iqr": q3 - q1,
                     "paper_median": paper, "accuracy": accuracy, "acceptance": acceptance,
                     "verdict": health_verdict(finished)})
    show(f"Fig. 7: test accuracy % per chain, {sweeps:,} sweeps, ours / paper",
         ["net", "chains", "median", "IQR", "paper median"],
         [[r["net"], r["chains"], r["median"], r["iqr"], r["paper_median"]] for r in rows])
    for r in rows:
        print(f"{r['net']} acceptance by layer: " + ", ".join(f"{k} {v:.3f}" for k, v in r["acceptance"].items()))
    print(*verdict_lines({r["net"]: r["verdict"] for r in rows}, CHAINS_UNCONVERGED), sep="\n")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "xor_fig7.json").write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
