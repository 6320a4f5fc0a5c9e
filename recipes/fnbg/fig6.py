"""FNBG Fig. 6 (spec fnbg.md §4, E5): the minibatch log-likelihood against the batch size, MNIST.

    python recipes/fnbg/fig6.py                       # --root data, writes runs/fnbg/fig6.json and fig6.png

One parameter vector theta drawn from the recipes' prior N(0, 10) (the paper's code: one prior draw) for
the MLP(784, 10, 10, 10, 10) of mnist_fnbg.yaml, with its data settings (flattened images, globally
standardised by their own statistics). For every batch size B (default 5,000 to 60,000 in steps of
5,000, as in the paper's code) ``--repeats`` batches (default 10) of B distinct training images drawn at
random, each one's log-likelihood divided by B (the paper's ``reduction='mean'``), beside the full
training set's (the figure's gray line). The paper states no numbers; what the figure shows is the
spread of the minibatch values around the full-data one, narrowing as B grows (the minibatch target
of FNBG's ``sum`` scaling moves with the batch). Takes seconds.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from lit_bayes.data import TorchvisionImages
from lit_bayes.models import MLP

WIDTHS = [784, 10, 10, 10, 10]
PRIOR_VARIANCE = 10.0  # mnist_fnbg.yaml's GaussianPrior


def prior_draw(seed: int) -> MLP:
    """The recipes' MLP with every weight and bias drawn from N(0, PRIOR_VARIANCE)."""
    model = MLP(WIDTHS, activation="sigmoid")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, math.sqrt(PRIOR_VARIANCE), generator=generator)
    return model


@torch.no_grad()
def mean_log_likelihood(model: MLP, x: torch.Tensor, y: torch.Tensor) -> float:
    """log p(y | x, theta) / B, summed over the B points."""
    return -float(F.cross_entropy(model(x), y, reduction="mean"))


def batch_values(model: MLP, x: torch.Tensor, y: torch.Tensor, batch: int, repeats: int,
                 generator: torch.Generator) -> list[float]:
    """:func:`mean_log_likelihood` of ``repeats`` batches of ``batch`` distinct points drawn at random."""
    rows = [torch.randperm(len(y), generator=generator)[:batch] for _ in range(repeats)]
    return [mean_log_likelihood(model, x[r], y[r]) for r in rows]


def plot(rows: list[dict], full: float, path: Path) -> None:
    """Every batch's value against B, the full-data value as a gray line (Fig. 6)."""
    figure = Figure(figsize=(6, 3.5), layout="constrained")
    axes = figure.subplots()
    for row in rows:
        axes.scatter([row["batch"]] * len(row["values"]), row["values"], s=8, color="tab:blue")
    axes.axhline(full, color="gray", label="full training set")
    axes.set(xlabel="batch size B", ylabel="log-likelihood / B")
    axes.legend()
    figure.savefig(path, dpi=120)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="data", help="folder holding MNIST/raw (the recipes' --root)")
    parser.add_argument("--batches", type=int, nargs="+", default=list(range(5000, 60001, 5000)))
    parser.add_argument("--repeats", type=int, default=10, help="batches per batch size")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prior draw and of the batches")
    parser.add_argument("--out", default="runs/fnbg", help="folder of fig6.json and fig6.png")
    args = parser.parse_args(argv)
    if args.repeats < 1 or min(args.batches) < 1:
        parser.error("--repeats and every --batches value must be positive")
    x, y = TorchvisionImages("mnist", args.root, flatten=True, standardize="global", stats_from="own").load()["train"]
    if max(args.batches) > len(y):
        parser.error(f"--batches must not exceed the {len(y)} training images")
    model = prior_draw(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    full = mean_log_likelihood(model, x, y)
    rows = []
    print(f"one prior draw (seed {args.seed}); log-likelihood / B over {args.repeats} random batches")
    print(f"{'B':>6} {'mean':>10} {'std':>9} {'min':>10} {'max':>10} {'mean - full':>12}")
    for batch in args.batches:
        values = batch_values(model, x, y, batch, args.repeats, generator)
        spread = torch.tensor(values, dtype=torch.float64)
        row = {"batch": batch, "values": values, "mean": float(spread.mean()),
               "std": float(spread.std()) if len(values) > 1 else 0.0}
        rows.append(row)
        print(f"{batch:>6} {row['mean']:>10.4f} {row['std']:>9.4f} {min(values):>10.4f} {max(values):>10.4f} "
              f"{row['mean'] - full:>12.4f}")
    print(f"full training set ({len(y)} images): {full:.4f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fig6.json").write_text(json.dumps({"seed": args.seed, "full": full, "rows": rows}, indent=1))
    plot(rows, full, out / "fig6.png")
    print(f"wrote {out / 'fig6.json'} and {out / 'fig6.png'}")


if __name__ == "__main__":
    main()
