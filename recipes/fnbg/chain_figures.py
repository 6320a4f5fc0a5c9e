"""FNBG Figs. 5 and 8 (spec fnbg.md §4, E4 and E10) from a finished MNIST chain of tables.py.

    python recipes/fnbg/chain_figures.py runs/fnbg/mnist/3000/version_0    # writes fig5/fig8 .png and .json there
    ... --last 10000: only the last 10,000 kept draws (a Table 3 chain keeps 30,000; Table 2 scores 10,000)

Fig. 5, trace plots: the paper's coordinates theta_1005 (hidden layer 1), theta_7872 (2), theta_8008 (3)
and theta_8107 (output), indices into the flat parameter vector in ``nn.Linear`` order (each layer's
weight row-major, then its bias), read here as 0-based; printed over the run's kept draws (the last
10,000 sweeps of a Table 2 cell): mean, standard deviation, range and bulk ESS. The paper's claims: the
chain's scale shrinks with depth, and no trace is trapped in a local mode.

Fig. 8, predictive uncertainty on test images: the posterior predictive (Eq. 3.6 over the kept draws)
of the run's test set. Printed: for every digit, the median predictive probability of the true class
among its correctly classified images (the paper: a "0" at 0.98, a "7" at 0.97), and the correctly
classified images with the lowest top probability, with their two most probable classes (the paper:
an ambiguous "9" at p(9) = 0.35, p(4) = 0.28). The paper used its B = 3000 chain; any MNIST run of
tables.py reads the same way.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from common import kept_draws
from matplotlib.figure import Figure

from lit_bayes.callbacks.plots import trace_plot
from lit_bayes.chains import flat_rows
from lit_bayes.diagnostics import ess_bulk
from lit_bayes.run_loading import RunPosterior

COORDINATES = (1005, 7872, 8008, 8107)  # the paper's Fig. 5 (spec E4)


def flat_draws(run: RunPosterior) -> torch.Tensor:
    """The kept draws as ``(S, P)`` flat parameter vectors, in the network's ``nn.Linear`` order."""
    names = list(run.module.template_parameters())
    return flat_rows(run.samples[name] for name in names)


def last_draws(run: RunPosterior, last: int | None) -> RunPosterior:
    """The one-chain ``run`` restricted to its last ``last`` kept draws (all of them when ``None`` or more)."""
    if last is None or last >= run.num_draws:
        return run
    if run.module.num_chains != 1:
        raise ValueError(f"--last reads one chain's draws; the run at {run.run_dir} has {run.module.num_chains} chains")
    return run.equally_weighted(slice(run.num_draws - last, None))


def layer_of(index: int, run: RunPosterior) -> str:
    """The parameter tensor holding flat coordinate ``index``."""
    start = 0
    for name, p in run.module.template_parameters().items():
        if index < start + p.numel():
            return name
        start += p.numel()
    raise ValueError(f"coordinate {index} is beyond the network's {start} parameters")


def trace_summaries(draws: torch.Tensor, coordinates=COORDINATES) -> list[dict]:
    """Mean, standard deviation, range and bulk ESS of each coordinate's trace ``draws[:, i]``."""
    rows = []
    for index in coordinates:
        trace = draws[:, index].double()
        rows.append({"index": index, "mean": float(trace.mean()), "std": float(trace.std()),
                     "min": float(trace.min()), "max": float(trace.max()), "ess_bulk": float(ess_bulk(trace[None]))})
    return rows


def class_confidence(probs: torch.Tensor, labels: torch.Tensor) -> dict[int, float]:
    """For every class, the median predictive probability of the true class over its correctly
    classified points (classes with none left out)."""
    correct = probs.argmax(-1) == labels
    true_prob = probs.gather(-1, labels[:, None]).squeeze(-1)
    return {c: float(true_prob[correct & (labels == c)].median()) for c in range(probs.shape[-1])
            if bool((correct & (labels == c)).any())}


def most_ambiguous(probs: torch.Tensor, labels: torch.Tensor, count: int) -> list[dict]:
    """The ``count`` correctly classified points with the lowest top probability, each with its two
    most probable classes."""
    top = probs.topk(2, dim=-1)
    correct = (top.indices[:, 0] == labels).nonzero().squeeze(-1)
    order = correct[top.values[correct, 0].argsort()[:count]]
    return [{"index": int(i), "label": int(labels[i]), "classes": top.indices[i].tolist(),
             "probs": top.values[i].tolist()} for i in order]


def plot_images(images: torch.Tensor, picked: list[dict], path: Path) -> None:
    """The ``picked`` test images, each titled with its two most probable classes (Fig. 8)."""
    figure = Figure(figsize=(1.8 * len(picked), 2.2), layout="constrained")
    for axis, item in zip(figure.subplots(1, len(picked), squeeze=False)[0], picked):
        axis.imshow(images[item["index"]].reshape(28, 28).numpy(), cmap="gray")
        (a, b), (pa, pb) = item["classes"], item["probs"]
        axis.set_title(f"p({a})={pa:.2f}\np({b})={pb:.2f}", fontsize=8)
        axis.axis("off")
    figure.savefig(path, dpi=120)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a finished MNIST run of tables.py (<out>/mnist/<B>/version_<n>)")
    parser.add_argument("--ambiguous", type=int, default=5, help="correctly classified images to list, least sure first")
    parser.add_argument("--last", type=int, help="read only the run's last LAST kept draws (default: all)")
    args = parser.parse_args(argv)
    if args.ambiguous < 1:
        parser.error("--ambiguous must be positive")
    if args.last is not None and args.last < 1:
        parser.error("--last must be positive")
    run = last_draws(kept_draws(args.run_dir), args.last)
    draws = flat_draws(run)
    traces = trace_summaries(draws)
    print(f"Fig. 5: the paper's coordinates over the run's {run.num_draws} kept draws")
    print(f"{'theta':>6} {'tensor':>22} {'mean':>8} {'std':>8} {'min':>8} {'max':>8} {'ESS bulk':>9}")
    for row in traces:
        row["tensor"] = layer_of(row["index"], run)
        print(f"{row['index']:>6} {row['tensor']:>22} {row['mean']:>8.3f} {row['std']:>8.3f} {row['min']:>8.3f} "
              f"{row['max']:>8.3f} {row['ess_bulk']:>9.1f}")
    data = run.datamodule()
    data.setup("test")
    batches = list(data.test_dataloader())
    images, labels = torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])
    probs = run.predict(images, transformed=True).probs
    confidence = class_confidence(probs, labels)
    ambiguous = most_ambiguous(probs, labels, args.ambiguous)
    print("\nFig. 8: median predictive probability of the true class, correctly classified test images")
    print("  " + "  ".join(f"{c}: {p:.3f}" for c, p in confidence.items()))
    print("least sure correctly classified test images (index: label, two most probable classes)")
    for item in ambiguous:
        (a, b), (pa, pb) = item["classes"], item["probs"]
        print(f"  {item['index']:>5}: {item['label']}, p({a}) = {pa:.3f}, p({b}) = {pb:.3f}")
    trace_plot({f"theta_{i}": draws[None, :, i] for i in COORDINATES}).savefig(args.run_dir / "fig5.png", dpi=120)
    if ambiguous:  # none when the run classified no test image correctly
        plot_images(images, ambiguous, args.run_dir / "fig8.png")
    result = {"draws": run.num_draws, "traces": traces, "class_confidence": confidence, "ambiguous": ambiguous}
    (args.run_dir / "chain_figures.json").write_text(json.dumps(result, indent=1))
    print(f"wrote fig5.png, fig8.png (with a correct image) and chain_figures.json in {args.run_dir}")


if __name__ == "__main__":
    main()
