"""The real-data suite: the recommended recipe against MAP and a deep ensemble on data no recipe was tuned on.

Data sets (fixed seeded splits; nothing is downloaded):
  * scikit-learn's bundled ``digits`` (1,797 8x8 images, 10 classes; one input scale, as pixels),
    ``breast_cancer`` (569 x 30, 2 classes) and ``diabetes`` (442 x 10, regression), each split 50 / 20 / 30 %
    into train / validation / test (:class:`lit_bayes.data.ScikitLearnData`), with ``recipes/real/tabular.yaml``;
  * MNIST from the files under ``data/MNIST/raw`` (``recipes/ood/README.md`` says where to get them): a seeded
    10,000-image training subset, 1,000 validation images, the official 10,000 test images, with an MLP
    (``recipes/real/mnist_mlp.yaml``) and a small CNN (``recipes/real/mnist_cnn.yaml``); skipped, with a line
    saying so, when the files are missing.

Each data set is one ``lit-bayes fit`` of its recipe (:func:`lit_bayes.recipe_runs.fit_cell`, in
``<root>/<name>``; a finished cell is read back, not run again, unless ``--rerun``). Its ``MAPBaseline`` fits
the MAP estimate of the same energy and a deep ensemble with as many members as the recipe has chains, and
scores both on the test split beside the posterior. Printed: NLPD, ECE (classification), accuracy or RMSE of
the three, the verdict, the worst function-space R-hat and lowest bulk ESS, and the wall time of the cell
(sampling, the MAP-started chains' fits and the baselines). Targets of the issue that asked for it: the
posterior's test NLPD below MAP's, its ECE at most MAP's + 0.01, verdict ``ok`` on the scikit-learn sets,
each data set within 10 minutes on a 2-core CPU.

Run from the repository root:  python benchmarks/real_data.py [--datasets digits,mnist_mlp] [--rerun]
[--epochs E] [--set KEY VALUE ...] (a recipe setting for every data set, as ``lit-bayes fit`` takes it)
The last line printed is one JSON object: ``{"benchmark": "real_data", "rows": [...]}``.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from lit_bayes.recipe_runs import fit_cell, health_verdict, settings_overrides

RECIPES = Path(__file__).resolve().parents[1] / "recipes" / "real"
MNIST_FILES = Path("data/MNIST/raw/train-images-idx3-ubyte")


def _classifier(name: str, widths: list[int], classes: int, **data) -> dict:
    return {"config": "tabular.yaml", "settings": {
        "data.init_args.name": name, "model.init_args.model.init_args.widths": widths,
        "model.init_args.likelihood": {"class_path": "lit_bayes.Categorical", "init_args": {"num_classes": classes}},
        **{f"data.init_args.{key}": value for key, value in data.items()}}}


#: name -> the recipe and its overrides
DATASETS = {
    # 18 batches an epoch: 2,000 epochs (36,000 steps) keep it within 10 minutes
    "digits": {**_classifier("digits", [64, 50, 10], 10, standardize="global"),
               "epochs": 2000},
    "breast_cancer": _classifier("breast_cancer", [30, 50, 2], 2),
    "diabetes": {"config": "tabular.yaml", "settings": {
        "data.init_args.name": "diabetes", "model.init_args.model.init_args.widths": [10, 50, 1],
        "model.init_args.likelihood": {"class_path": "lit_bayes.Gaussian", "init_args": {"learn_noise": True}}}},
    "mnist_mlp": {"config": "mnist_mlp.yaml", "settings": {}},
    "mnist_cnn": {"config": "mnist_cnn.yaml", "settings": {}},
}


def row(name: str, summary: dict) -> dict:
    """One table row from a cell's ``summary.json``."""
    metrics, health = summary["metrics"], summary.get("health", {})
    classification = "test/accuracy" in metrics

    def metric(key: str) -> float | None:
        value = metrics.get(key)
        return None if value is None or not math.isfinite(value) else float(value)

    score = "accuracy" if classification else "rmse"
    return {
        "dataset": name,
        "nlpd": metric("test/nlpd"), "map_nlpd": metric("baseline/map/test/nlpd"),
        "ensemble_nlpd": metric("baseline/ensemble/test/nlpd"),
        "ece": metric("test/ece"), "map_ece": metric("baseline/map/test/ece"),
        "ensemble_ece": metric("baseline/ensemble/test/ece"),
        "score": score, score: metric(f"test/{score}"), f"map_{score}": metric(f"baseline/map/test/{score}"),
        f"ensemble_{score}": metric(f"baseline/ensemble/test/{score}"),
        "verdict": health_verdict(summary), "reasons": [r["code"] for r in health.get("reasons", [])],
        "rhat_max": metric("diag/fs_rhat_max"), "ess_bulk_min": metric("diag/fs_ess_bulk_min"),
        "wall_s": summary.get("wall_time_s"),
    }


def _cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(rows: list[dict]) -> None:
    print(f"{'data set':>14} | {'NLPD ours':>9} {'MAP':>7} {'ens.':>7} | {'ECE ours':>8} {'MAP':>6} {'ens.':>6} | "
          f"{'acc/RMSE':>8} {'MAP':>6} {'ens.':>6} | {'verdict':>8} {'R-hat':>6} {'ESS':>5} | {'wall s':>6}")
    for r in rows:
        if r["verdict"] == "error":
            print(f"{r['dataset']:>14} | error: {r['error']}")
            continue
        score = r["score"]
        print(f"{r['dataset']:>14} | {_cell(r['nlpd']):>9} {_cell(r['map_nlpd']):>7} {_cell(r['ensemble_nlpd']):>7} | "
              f"{_cell(r['ece']):>8} {_cell(r['map_ece']):>6} {_cell(r['ensemble_ece']):>6} | "
              f"{_cell(r[score]):>8} {_cell(r['map_' + score]):>6} {_cell(r['ensemble_' + score]):>6} | "
              f"{r['verdict']:>8} {_cell(r['rhat_max']):>6} {_cell(r['ess_bulk_min'], 0):>5} | "
              f"{_cell(r['wall_s'], 0):>6}")
        if r["reasons"]:
            print(f"{'':>14}   reasons: {', '.join(r['reasons'])}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated names: " + ", ".join(DATASETS))
    parser.add_argument("--root", default="runs/real_data", help="where each data set's run directory goes")
    parser.add_argument("--rerun", action="store_true", help="run every cell again instead of reading finished ones")
    parser.add_argument("--epochs", type=int, help="override every data set's max_epochs (a quick check)")
    parser.add_argument("--set", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                        help="override one recipe setting for every data set, e.g. --set model.init_args.step_size 0.01")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.datasets.split(",") if name.strip()]
    unknown = sorted(set(names) - set(DATASETS))
    if unknown:
        parser.error(f"unknown data sets {unknown}; the suite has {', '.join(DATASETS)}")
    rows, skipped = [], []
    for name in names:
        if name.startswith("mnist") and not MNIST_FILES.exists():
            skipped.append(name)
            print(f"{name}: skipped, no MNIST files at {MNIST_FILES} (recipes/ood/README.md says how to get them)")
            continue
        settings = dict(DATASETS[name]["settings"])
        epochs = args.epochs or DATASETS[name].get("epochs")
        if epochs is not None:
            settings.update({"trainer.max_epochs": epochs, "trainer.check_val_every_n_epoch": epochs})
        settings.update({f"--{key}": value for key, value in args.set})
        try:
            summary = fit_cell(RECIPES / DATASETS[name]["config"], Path(args.root) / name,
                               settings_overrides(settings), rerun=args.rerun)
        except (Exception, SystemExit) as error:  # a failed run (lit-bayes exits 2 on a diverged chain) is a row
            print(f"{name}: the run failed: {type(error).__name__}: {error}")
            rows.append({"dataset": name, "verdict": "error", "error": f"{type(error).__name__}: {error}"})
            continue
        rows.append(row(name, summary))
    print_table(rows)
    result = {"benchmark": "real_data", "rows": rows, "skipped": skipped}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
