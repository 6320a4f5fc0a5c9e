"""The paper's two-stage baselines: MAP-HMC, SGSMC-HMC and SWAG on two moons and the synthetic regression, SWAG
on MNIST.

    python recipes/feynman_kac/run_baselines.py moons map_hmc --seeds 3
    python recipes/feynman_kac/run_baselines.py regression sgsmc_hmc --seeds 3
    python recipes/feynman_kac/run_baselines.py moons swag --seeds 3
    python recipes/feynman_kac/run_baselines.py mnist swag --seeds 10   (MNIST files under data/)

Each seed is two ``lit-bayes fit`` runs (feynman-kac spec §5):

1. psi: ``<table>_map.yaml`` (MAP jointly over (phi, psi), Adam at 0.01 (MNIST 0.002), a N(0, I) prior on phi and
   a flat one on psi; Sharma et al. 2023) or ``<table>_sgsmc.yaml`` (SGSMC, random-walk Metropolis
   of variance 0.05, 10 steps per move). Both validate after every step and keep the state with
   the best validation NLPD (the paper selects MAP by its validation MAP loss).
2. ``<table>_hmc.yaml``: full-batch HMC over phi with psi fixed at stage 1's
   (``lit_bayes.models.PartialFromRun``), 100 leapfrog steps of size 0.01, ``--hmc-steps`` steps
   (the paper: 3000) of which the first two thirds are burn-in, started at the MAP phi or the
   first SGSMC particle; predictions average the kept draws. For ``swag``, ``<table>_swag.yaml`` instead:
   from the MAP run's phi and psi (psi fixed), Adam at 0.01 for 200 more epochs (MNIST: 0.002 for 50), one
   snapshot of phi per epoch, and predictions from 1,000 draws (MNIST: 100 by default) of the SWAG Gaussian of
   the last 100 deviations (:class:`lit_bayes.SWAG`; Maddox et al. 2019).

Metrics are those of the OHSMC tables (per-sample ECE, accuracy and RMSE; RMSE against the
noise-free function), read from the stage-2 runs' ``summary.json``. Prints mean (std) beside the
paper's rows and writes ``<root>/<table>/<method>.json``. Arguments it does not know go to both
stages' ``lit-bayes`` runs. HMC makes this slow on CPU (minutes per seed). Finished runs are not
repeated.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from lit_bayes.recipe_runs import health_verdict, verdict_lines

# the sibling seed runner: this script runs as a file, so its folder is on sys.path
from run_table import beside_paper, run_seed

HERE = Path(__file__).resolve().parent

# (column, summary.json metric, paper mean, paper std) per table and method
PAPER = {
    "moons": {
        "map_hmc": [("NLPD", "test/nlpd", 0.28, 0.06), ("ECE", "test/ece_per_sample", 0.07, 0.01),
                    ("Acc.", "test/accuracy_per_sample", 0.87, 0.02)],
        "sgsmc_hmc": [("NLPD", "test/nlpd", 0.32, 0.08), ("ECE", "test/ece_per_sample", 0.08, 0.01),
                      ("Acc.", "test/accuracy_per_sample", 0.86, 0.03)],
        "swag": [("NLPD", "test/nlpd", 0.31, 0.06), ("ECE", "test/ece_per_sample", 0.07, 0.01),
                 ("Acc.", "test/accuracy_per_sample", 0.86, 0.03)],
    },
    "regression": {
        "map_hmc": [("NLPD", "test/nlpd", 1.53, 0.09), ("RMSE", "test/rmse_per_sample", 0.59, 0.11)],
        "sgsmc_hmc": [("NLPD", "test/nlpd", 1.65, 0.16), ("RMSE", "test/rmse_per_sample", 0.75, 0.14)],
        "swag": [("NLPD", "test/nlpd", 1.71, 0.14), ("RMSE", "test/rmse_per_sample", 0.82, 0.16)],
    },
    # Table 4, in units of 1e-2 (spec §6.4); the paper's NLPD is the diagonal variant's (mnist_swag.yaml)
    "mnist": {
        "swag": [("NLPD", "test/nlpd", 0.0427, 0.0083), ("ECE", "test/ece_per_sample", 0.0117, 0.0043),
                 ("Acc.", "test/accuracy_per_sample", 0.9776, 0.0071)],
    },
}
STAGE_1 = {"map_hmc": "map", "sgsmc_hmc": "sgsmc", "swag": "map"}
STAGE_2 = {"map_hmc": "HMC", "sgsmc_hmc": "HMC", "swag": "SWAG"}


def run_two_stage(table: str, method: str, seed: int, root: Path, args, overrides: list[str]) -> tuple[dict, dict]:
    """Stage 1 then stage 2 of one seed; the two runs' summaries."""
    stage_1 = list(overrides)
    if args.epochs is not None:
        stage_1 += ["--trainer.max_epochs", str(args.epochs)]
    if method == "sgsmc_hmc":
        stage_1 += ["--model.init_args.num_particles", str(args.particles)]
    first = run_seed(HERE / f"{table}_{STAGE_1[method]}.yaml", seed, root / "stage1", stage_1)
    from_stage_1 = ["--model.init_args.model.init_args.run_dir", str(root / "stage1" / f"seed_{seed}")]
    if method == "swag":
        epochs = [] if args.swag_epochs is None else ["--trainer.max_epochs", str(args.swag_epochs)]
        return first, run_seed(HERE / f"{table}_swag.yaml", seed, root / "swag", [*from_stage_1, *epochs, *overrides])
    burn_in = (2 * args.hmc_steps) // 3
    return first, run_seed(HERE / f"{table}_hmc.yaml", seed, root / "hmc", [
        *from_stage_1, "--trainer.max_epochs", str(args.hmc_steps), "--model.init_args.burn_in", str(burn_in),
        "--samples.max_draws", str(args.hmc_steps - burn_in), *overrides,
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", choices=sorted(PAPER))
    parser.add_argument("method", choices=sorted(STAGE_1))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--particles", type=int, default=1000, help="SGSMC particles (the paper's code: 1000)")
    parser.add_argument("--hmc-steps", type=int, default=3000, help="HMC steps, the first 2/3 burn-in")
    parser.add_argument("--epochs", type=int, help="stage-1 epochs (default: the recipe's, 100 / 200; MNIST 10)")
    parser.add_argument("--swag-epochs", type=int,
                        help="SWAG epochs, one snapshot each (default: the recipe's, 200; MNIST 50)")
    parser.add_argument("--root", default="runs/fk_baselines")
    args, overrides = parser.parse_known_args()  # the rest goes to both stages' lit-bayes runs
    if min(args.seeds, args.particles) < 1 or args.hmc_steps < 3:
        parser.error("--seeds and --particles must be positive, --hmc-steps at least 3")
    if args.method not in PAPER[args.table]:
        parser.error(f"{args.method} has no recipe for {args.table} (it has {sorted(PAPER[args.table])})")
    root = Path(args.root) / args.table / args.method
    stages = [run_two_stage(args.table, args.method, s, root, args, overrides) for s in range(args.seeds)]
    runs = [second["metrics"] for _, second in stages]
    verdicts = {f"seed {seed} {stage}": health_verdict(summary) for seed, pair in enumerate(stages)
                for stage, summary in zip(("stage 1", STAGE_2[args.method]), pair)}
    rows = {}
    print(f"\n{args.method}, {args.table}: ours over {len(runs)} seeds vs the paper")
    for column, key, paper_mean, paper_std in PAPER[args.table][args.method]:
        rows[column] = beside_paper(key, [r[key] for r in runs], paper_mean, paper_std)
        ours = rows[column]
        print(f"  {column:5s} ours {ours['ours_mean']:.4f} ({ours['ours_std']:.4f})   "
              f"paper {paper_mean:.4f} ({paper_std:.4f})")
    print(*verdict_lines(verdicts, "its metrics are not those of a converged run (a one-chain HMC run is a "
                         "warning by design: one chain cannot show convergence)"), sep="\n")
    root.mkdir(parents=True, exist_ok=True)
    (root.parent / f"{args.method}.json").write_text(json.dumps({"seeds": len(runs), "rows": rows,
                                                                  "verdicts": verdicts}, indent=2))
    print(json.dumps({c: round(r["ours_mean"], 4) for c, r in rows.items()} | {"seeds": len(runs)}))


if __name__ == "__main__":
    main()
