"""FNBG MNIST/FMNIST grids (spec fnbg.md §4): run them and print ours beside the paper's.

    python recipes/fnbg/tables.py batch         # Table 2 accuracy + Tables 5/6 acceptance by layer (--batches 600 3000)
    python recipes/fnbg/tables.py length        # Table 3: accuracy from the last 1K/10K/20K/30K draws
    python recipes/fnbg/tables.py augment       # Table 4: rotated / blurred / inverted training sets
    ... --sweeps 2200 for a short run (paper: 110,000), --datasets mnist, --root data, --out runs/fnbg
    ... --augmentations rotation inversion: a part of Table 4 (each in <out>/<dataset>/3000/<augmentation>)
    ... --resume: every cell continues from its newest checkpoint under --out (a stopped or killed grid)

Each cell is one ``lit-bayes fit`` run of one chain of recipes/fnbg/mnist_fnbg.yaml (batch size B:
floor(60000 / B) batches per epoch, as in the reference code, with Table 5's proposal variances);
Table 4's cells lay mnist_fnbg_<augmentation>.yaml over it. Accuracies are scored from each run's kept
draws (Tables 2 and 4: the last 10,000, as the paper; Table 3: the last 1K-30K), acceptance rates read
from its summary.json, with its health verdict (one chain: ``warning`` at best; the cells not ``ok`` are
named under the table). Writes <out>/<grid>.json with every cell and the paper's value.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import fit, kept_draws, scaled, show, summary

from lit_bayes.chain_metrics import chain_accuracies
from lit_bayes.recipe_runs import health_verdict, verdict_lines

CONFIG = "mnist_fnbg.yaml"
VARIANCES = {600: [5e-2, 5e-4, 5e-4, 5e-5], 1800: [2e-2, 2e-4, 2e-4, 2e-5],
             3000: [1e-2, 1e-4, 1e-4, 1e-5], 4200: [1e-2, 1e-4, 1e-4, 1e-5]}  # Table 5 (variances)
TABLE2 = {"mnist": {600: 85.99, 1800: 89.01, 3000: 90.75, 4200: 90.43},
          "fashion_mnist": {600: 71.50, 1800: 80.07, 3000: 80.89, 4200: 79.17}}
ACCEPT = {"mnist": {600: [45.56, 26.43, 26.28, 29.18], 1800: [41.41, 30.68, 31.92, 35.66],  # Table 5
                    3000: [54.95, 45.73, 44.98, 51.54], 4200: [31.68, 20.17, 19.76, 22.22]},
          "fashion_mnist": {600: [47.86, 34.61, 32.99, 37.73], 1800: [60.34, 46.78, 45.91, 52.07],  # Table 6
                            3000: [66.94, 57.40, 58.48, 64.64], 4200: [55.28, 47.10, 47.19, 52.75]}}
SCORED_DRAWS = 10_000  # Tables 2 and 4 score the last 10,000 draws (the config's max_draws; Table 3's 10K column)
TABLE3 = {"mnist": {1000: 88.31, 10000: 90.75, 20000: 91.12, 30000: 91.20},
          "fashion_mnist": {1000: 78.93, 10000: 80.89, 20000: 81.36, 30000: 81.53}}
TABLE4 = {"mnist": {"none": 90.75, "rotation": 86.19, "blur": 85.66, "inversion": 36.87},
          "fashion_mnist": {"none": 80.89, "rotation": 6.62, "blur": 7.46, "inversion": 8.61}}
AUGMENT = {"none": [], "rotation": ["mnist_fnbg_rotation.yaml"], "blur": ["mnist_fnbg_blur.yaml"],
           "inversion": ["mnist_fnbg_inversion.yaml"]}  # configs laid over CONFIG


def run(dataset: str, batch: int, sweeps: int, args, extra=(), name=None) -> Path:
    """One chain; its runs go to <out>/<dataset>/<batch>[/<name>] (``--resume`` continues from there).
    Returns the run's directory."""
    per_epoch, root = 60_000 // batch, Path(args.out) / dataset / str(batch) / (name or "")
    overrides = ["--data.init_args.name", dataset, "--data.init_args.root", args.root,
                 "--data.init_args.batch_size", str(batch), "--trainer.limit_train_batches", str(per_epoch),
                 "--model.init_args.proposal_variance", json.dumps(VARIANCES[batch]),
                 *scaled(sweeps, per_epoch), *extra]
    return fit([CONFIG, *AUGMENT[name or "none"]], root, overrides, resume=args.resume)


def last_draws_accuracy(run_dir: Path, last: int = SCORED_DRAWS) -> float:
    """Test accuracy % of the run's one chain over its last ``last`` kept draws (all of them when it kept
    fewer), the paper's Tables 2 and 4, whatever the cell kept: Table 3 keeps 30,000 draws in the same
    B = 3000 cell, and its summary's ``test/accuracy`` pools them all."""
    chain = kept_draws(run_dir)
    return 100 * chain_accuracies(chain, min(last, chain.num_draws))[0]


def show_verdicts(cells: list[dict], name) -> None:
    """Print the cells' health verdicts (``name(cell)`` names a cell) under their table."""
    print(*verdict_lines({name(c): c["verdict"] for c in cells}, "its accuracy is that of a chain not shown to have "
                         "converged (one chain is at best a warning; failed is most often the R-hat of its two "
                         "halves: the chain is not stationary. Run it longer, or again with another seed to compare)"),
          sep="\n")


def batch_grid(args) -> list[dict]:
    cells = []
    for dataset in args.datasets:
        for batch in args.batches:
            run_dir = run(dataset, batch, args.sweeps, args)
            finished = summary(run_dir)
            ours = [100 * finished["metrics"][f"accept/layer_net.layers.{j}"] for j in range(4)]
            cells.append({"dataset": dataset, "batch": batch, "accuracy": last_draws_accuracy(run_dir),
                          "paper_accuracy": TABLE2[dataset][batch], "accept": ours,
                          "paper_accept": ACCEPT[dataset][batch], "verdict": health_verdict(finished)})
    show("Table 2 (accuracy %) and Tables 5/6 (acceptance % by layer), ours / paper",
         ["dataset", "batch", "accuracy", "paper", "accept L1", "paper L1", "accept L4", "paper L4", "verdict"],
         [[c["dataset"], c["batch"], c["accuracy"], c["paper_accuracy"], c["accept"][0], c["paper_accept"][0],
           c["accept"][3], c["paper_accept"][3], c["verdict"]] for c in cells])
    show_verdicts(cells, lambda c: f"{c['dataset']} B={c['batch']}")
    return cells


def length_grid(args) -> list[dict]:
    cells = []
    for dataset in args.datasets:
        draws = min(30_000, args.sweeps - args.sweeps // 11)
        run_dir = run(dataset, 3000, args.sweeps, args, extra=["--samples.max_draws", str(draws)])
        chain, verdict = kept_draws(run_dir), health_verdict(summary(run_dir))
        for last, paper in TABLE3[dataset].items():
            cells.append({"dataset": dataset, "last": min(last, draws), "paper_last": last,
                          "accuracy": 100 * chain_accuracies(chain, min(last, draws))[0], "paper_accuracy": paper,
                          "verdict": verdict})
    show("Table 3 (accuracy % from the last draws), ours / paper",
         ["dataset", "draws", "accuracy", "paper draws", "paper", "verdict"],
         [[c["dataset"], c["last"], c["accuracy"], c["paper_last"], c["paper_accuracy"], c["verdict"]] for c in cells])
    show_verdicts(cells, lambda c: c["dataset"])  # one run per data set
    return cells


def augment_grid(args) -> list[dict]:
    cells = []
    for dataset in args.datasets:
        for name in args.augmentations:
            run_dir = run(dataset, 3000, args.sweeps, args, name=name)
            cells.append({"dataset": dataset, "augmentation": name, "accuracy": last_draws_accuracy(run_dir),
                          "paper_accuracy": TABLE4[dataset][name], "verdict": health_verdict(summary(run_dir))})
    show("Table 4 (accuracy % on the untransformed test set), ours / paper",
         ["dataset", "augmentation", "accuracy", "paper", "verdict"],
         [[c["dataset"], c["augmentation"], c["accuracy"], c["paper_accuracy"], c["verdict"]] for c in cells])
    show_verdicts(cells, lambda c: f"{c['dataset']} {c['augmentation']}")
    return cells


GRIDS = {"batch": batch_grid, "length": length_grid, "augment": augment_grid}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid", choices=sorted(GRIDS))
    parser.add_argument("--sweeps", type=int, default=110_000)
    parser.add_argument("--datasets", nargs="+", default=["mnist", "fashion_mnist"], choices=["mnist", "fashion_mnist"])
    parser.add_argument("--batches", nargs="+", type=int, default=list(VARIANCES), choices=list(VARIANCES),
                        help="Table 2's batch sizes to run (the batch grid)")
    parser.add_argument("--augmentations", nargs="+", default=list(AUGMENT), choices=list(AUGMENT),
                        help="Table 4's training-set transforms to run (the augment grid)")
    parser.add_argument("--root", default="data")
    parser.add_argument("--out", default="runs/fnbg")
    parser.add_argument("--resume", action="store_true", help="continue every cell from its newest checkpoint")
    arguments = parser.parse_args()
    results = GRIDS[arguments.grid](arguments)
    Path(arguments.out).mkdir(parents=True, exist_ok=True)
    (Path(arguments.out) / f"{arguments.grid}.json").write_text(json.dumps(results, indent=2))
