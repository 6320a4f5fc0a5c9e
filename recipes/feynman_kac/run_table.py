"""Run a Feynman-Kac recipe over several seeds and print mean (std) beside the paper's table.

    python recipes/feynman_kac/run_table.py moons --seeds 20
    python recipes/feynman_kac/run_table.py regression --seeds 20
    python recipes/feynman_kac/run_table.py mnist --seeds 10   (MNIST files under data/)
    python recipes/feynman_kac/run_table.py moons --method vb --seeds 20   (the VB baseline's row)

``--method``: ``ohsmc`` (default, ``<table>_ohsmc.yaml``) or ``vb`` (``<table>_vb.yaml``: mean-field Gaussian
VB over phi with psi fitted jointly, :class:`lit_bayes.MeanFieldVB`).

Each seed draws its own data, psi initialisation and particles (``seed_everything``, the
sampler's and the DataModule's seeds), as the paper's runs do (feynman-kac spec §6.0). Every
run writes its own ``summary.json``; this script writes ``table.json`` with every cell beside
the paper's value and every run's health verdict (counted under the table, the runs not ``ok``
named). Std is over runs with ddof 0 (``np.std``, the paper's); the paper's entries are truncated
to 2 decimals (spec §6.0), so allow about 0.01.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from lit_bayes.recipe_runs import fit_cell, health_verdict, verdict_lines

HERE = Path(__file__).resolve().parent

# per table: its title, then per method its recipe and (column, summary.json metric, paper mean, paper std)
TABLES = {
    "moons": ("Table 2 (two moons, 100 runs)", {
        "ohsmc": ("moons_ohsmc.yaml", [("NLPD", "test/nlpd", 0.28, 0.07), ("ECE", "test/ece_per_sample", 0.06, 0.01),
                                       ("Acc.", "test/accuracy_per_sample", 0.88, 0.02)]),
        "vb": ("moons_vb.yaml", [("NLPD", "test/nlpd", 0.29, 0.05), ("ECE", "test/ece_per_sample", 0.08, 0.01),
                                 ("Acc.", "test/accuracy_per_sample", 0.86, 0.03)]),
    }),
    "regression": ("Table 1 (synthetic regression, 100 runs)", {
        "ohsmc": ("regression_ohsmc.yaml", [("NLPD", "test/nlpd", 1.49, 0.07),
                                            ("RMSE", "test/rmse_per_sample", 0.53, 0.07)]),
        "vb": ("regression_vb.yaml", [("NLPD", "test/nlpd", 2.13, 0.15), ("RMSE", "test/rmse_per_sample", 1.46, 0.46)]),
    }),
    # Table 4's NLPD and ECE are in units of 1e-2 (spec §6.4); needs the MNIST files under data/
    "mnist": ("Table 4 (MNIST, 10 runs)", {
        "ohsmc": ("mnist_ohsmc.yaml", [("NLPD", "test/nlpd", 0.0287, 0.0024),
                                       ("ECE", "test/ece_per_sample", 0.0035, 0.0006),
                                       ("Acc.", "test/accuracy_per_sample", 0.9902, 0.0007)]),
        "vb": ("mnist_vb.yaml", [("NLPD", "test/nlpd", 0.0453, 0.0028), ("ECE", "test/ece_per_sample", 0.0044, 0.0008),
                                 ("Acc.", "test/accuracy_per_sample", 0.9851, 0.0009)]),
    }),
}
METHOD_NAMES = {"ohsmc": "OHSMC", "vb": "VB"}


#: what a run whose verdict is not ok means for a table of these scripts (:func:`verdict_lines`)
UNCONVERGED = "its metrics are not those of a converged run; see the run's advice"


def run_seed(recipe: Path, seed: int, root: Path, extra: list[str]) -> dict:
    """One seed's run in ``root/seed_<seed>`` (its data, psi initialisation and particles seeded),
    by :func:`lit_bayes.recipe_runs.fit_cell`: a run that finished is read, not repeated, so an
    interrupted table continues where it stopped. Returns its summary."""
    seeds = ["--seed_everything", str(seed), "--model.init_args.seed", str(seed), "--data.init_args.seed", str(seed)]
    return fit_cell(recipe, root / f"seed_{seed}", [*seeds, *extra])


def cell(metric: str, values: list[float]) -> dict:
    """Mean and std (ddof 0, the paper's ``np.std``) of one metric over runs."""
    return {"metric": metric, "mean": statistics.fmean(values), "std": statistics.pstdev(values), "values": values}


def beside_paper(metric: str, values: list[float], paper_mean: float, paper_std: float) -> dict:
    """One table cell of ``table.json``: our mean (std) over runs beside the paper's."""
    ours = cell(metric, values)
    return {"metric": metric, "ours_mean": ours["mean"], "ours_std": ours["std"], "paper_mean": paper_mean,
            "paper_std": paper_std, "values": values}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("--method", choices=sorted(METHOD_NAMES), default="ohsmc")
    parser.add_argument("--seeds", type=int, default=20, help="number of runs (seeds 0..n-1; the paper: 100)")
    parser.add_argument("--root", default="runs/fk_tables", help="where runs and table.json go")
    args, overrides = parser.parse_known_args()  # the rest goes to lit-bayes, e.g. --trainer.max_epochs=10
    title, methods = TABLES[args.table]
    if args.method not in methods:
        parser.error(f"--method {args.method} has no recipe for {args.table} (it has {sorted(methods)})")
    recipe, columns = methods[args.method]
    root = Path(args.root) / args.table / ("" if args.method == "ohsmc" else args.method)
    summaries = [run_seed(HERE / recipe, seed, root, overrides) for seed in range(args.seeds)]
    runs = [summary["metrics"] for summary in summaries]
    verdicts = {f"seed {seed}": health_verdict(summary) for seed, summary in enumerate(summaries)}
    rows = {}
    print(f"\n{METHOD_NAMES[args.method]}, {title}: ours over {len(runs)} seeds vs the paper")
    for column, key, paper_mean, paper_std in columns:
        rows[column] = beside_paper(key, [r[key] for r in runs], paper_mean, paper_std)
        ours = rows[column]
        print(f"  {column:5s} ours {ours['ours_mean']:.4f} ({ours['ours_std']:.4f})   paper {paper_mean:.4f} ({paper_std:.4f})")
    print(*verdict_lines(verdicts, UNCONVERGED), sep="\n")
    out = {"table": args.table, "method": args.method, "seeds": len(runs), "overrides": overrides, "rows": rows,
           "verdicts": verdicts}
    (root / "table.json").write_text(json.dumps(out, indent=2))
    print(json.dumps({c: round(r["ours_mean"], 4) for c, r in rows.items()} | {"seeds": len(runs)}))
    if not all(math.isfinite(r["ours_mean"]) for r in rows.values()):
        raise SystemExit("a metric is not finite")


if __name__ == "__main__":
    main()
