"""FNBG Figs. 9 and 10 (spec fnbg.md, App. B and D): the noisy XOR training set, and MNIST training images
under Table 4's rotation, blur and inversion.

    python recipes/fnbg/data_figures.py      # --root data; writes fig9.png, fig10.png, data_figures.json
                                             # in runs/fnbg/data_figures

Fig. 9: the training set of the XOR recipes (xor_nbg*.yaml: ``NoisyXOR`` with its defaults, 5,000 points,
offset 0.55, no validation split, data seed ``--seed``), taken from the DataModule after ``setup("fit")``,
every point coloured by its label. Printed and written: the points and labels of each of the four clusters.

Fig. 10: for the first training image of each digit 0 .. ``--images`` - 1, the image and its rotated,
blurred and inverted copies made by ``lit_bayes.data.transforms`` (the functions that
mnist_fnbg_{rotation,blur,inversion}.yaml name), seeded as ``TorchvisionImages`` seeds them: torch's global
RNG seeded with the data seed inside a forked state, the training images transformed in their order. With
``--seed 0`` (the configs' data seed) these are the very training inputs of the Table 4 runs, in [0, 1]
before standardisation. The rotation angle drawn for every image is recorded; blur is applied with
probability 0.9 and inversion with 0.5, so some copies are unchanged, and the JSON says which. Takes seconds.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch
import torchvision.transforms as T
from matplotlib.figure import Figure

from lit_bayes.data import NoisyXOR, TorchvisionImages
from lit_bayes.data.transforms import ROTATION_DEGREES, fnbg_blur, fnbg_inversion, fnbg_rotation

AUGMENTATIONS = {"rotated": fnbg_rotation, "blurred": fnbg_blur, "inverted": fnbg_inversion}


def xor_training_set(num_train: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The training points ``(x, y)`` of ``NoisyXOR(num_train, num_val=0, seed=seed)``, as its DataModule holds them."""
    data = NoisyXOR(num_train=num_train, num_val=0, seed=seed)
    data.setup("fit")
    return data.train_data.tensors


def xor_clusters(x: torch.Tensor, y: torch.Tensor) -> list[dict]:
    """For every bit pair (b1, b2), the points whose coordinate i exceeds 0.5 exactly when b_i = 1: their
    count, labels and coordinate ranges (the clusters are U[0, 1) -/+ the offset: apart, none empty, for
    the recipes' offset 0.55)."""
    bits = (x > 0.5).long()
    rows = []
    for b1 in (0, 1):
        for b2 in (0, 1):
            inside = (bits[:, 0] == b1) & (bits[:, 1] == b2)
            points = x[inside]
            rows.append({"bits": [b1, b2], "count": int(inside.sum()), "labels": sorted(set(y[inside].tolist())),
                         "x1": [float(points[:, 0].min()), float(points[:, 0].max())],
                         "x2": [float(points[:, 1].min()), float(points[:, 1].max())]})
    return rows


def xor_figure(x: torch.Tensor, y: torch.Tensor) -> Figure:
    """Fig. 9: the points coloured by label, one scatter per label (0, then 1)."""
    figure = Figure(figsize=(4.5, 4.5), layout="constrained")
    axes = figure.subplots()
    for label, color in ((0, "tab:blue"), (1, "tab:orange")):
        points = x[y == label]
        axes.scatter(points[:, 0].numpy(), points[:, 1].numpy(), s=3, alpha=0.5, color=color, label=f"XOR {label}")
    axes.set(xlabel="x1", ylabel="x2", title=f"noisy XOR training set, n = {len(y)}", aspect="equal")
    axes.legend(loc="center", markerscale=4)
    return figure


def first_of_each_digit(labels: torch.Tensor, count: int) -> list[int]:
    """The index of the first image of each digit 0 .. ``count`` - 1."""
    indices = []
    for digit in range(count):
        (where,) = torch.nonzero(labels == digit, as_tuple=True)
        if len(where) == 0:
            raise ValueError(f"no training image of digit {digit}")
        indices.append(int(where[0]))
    return indices


def augmented(images: torch.Tensor, transform: Callable[[torch.Tensor], torch.Tensor], seed: int) -> torch.Tensor:
    """``transform`` of every image in order, torch's RNG seeded with ``seed`` in a forked state, as
    ``TorchvisionImages`` transforms its training split."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.stack([transform(image) for image in images])


def rotation_angles(count: int, seed: int) -> list[float]:
    """The angles :func:`augmented` of ``fnbg_rotation`` draws for its first ``count`` images (one uniform
    draw per image, as ``RandomRotation`` makes)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return [T.RandomRotation.get_params(ROTATION_DEGREES) for _ in range(count)]


def augmentation_figure(originals: torch.Tensor, copies: dict[str, torch.Tensor], labels: list[int],
                        notes: list[dict[str, str]]) -> Figure:
    """Fig. 10: a row per image, the original then each of ``copies``, grey levels 0 (black) to 1 (white),
    each copy titled with its note."""
    columns = {"original": originals, **copies}
    figure = Figure(figsize=(1.6 * len(columns), 1.7 * len(labels)), layout="constrained")
    grid = figure.subplots(len(labels), len(columns), squeeze=False)
    for row, (axes_row, label) in enumerate(zip(grid, labels)):
        for axis, (name, images) in zip(axes_row, columns.items()):
            axis.imshow(images[row, 0].numpy(), cmap="gray", vmin=0.0, vmax=1.0)
            axis.set_xticks([])
            axis.set_yticks([])
            axis.set_title(name if name == "original" else f"{name}: {notes[row][name]}", fontsize=7)
        axes_row[0].set_ylabel(f"digit {label}")
    return figure


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="data", help="folder holding MNIST/raw (the recipes' --root)")
    parser.add_argument("--num-train", type=int, default=5000, help="XOR training points, a multiple of 4")
    parser.add_argument("--images", type=int, default=10, help="MNIST rows: the first image of each digit 0 .. N-1")
    parser.add_argument("--seed", type=int, default=0, help="data seed of both sets (the recipes': 0)")
    parser.add_argument("--out", default="runs/fnbg/data_figures", help="folder of the PNGs and data_figures.json")
    args = parser.parse_args(argv)
    if args.num_train < 4 or args.num_train % 4:
        parser.error(f"--num-train must be a positive multiple of 4 (four equal clusters), got {args.num_train}")
    if not 1 <= args.images <= 10:
        parser.error(f"--images must be between 1 and 10 (one per digit), got {args.images}")
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    x, y = xor_training_set(args.num_train, args.seed)
    clusters = xor_clusters(x, y)
    print(f"Fig. 9: {len(y)} noisy XOR training points (seed {args.seed}), {int((y == 1).sum())} labelled 1")
    for c in clusters:
        print(f"  bits {c['bits']}: {c['count']} points, labels {c['labels']}, "
              f"x1 in [{c['x1'][0]:.3f}, {c['x1'][1]:.3f}], x2 in [{c['x2'][0]:.3f}, {c['x2'][1]:.3f}]")
    xor_figure(x, y).savefig(out / "fig9.png", dpi=120)

    images, labels = TorchvisionImages("mnist", args.root, standardize="none").load()["train"]
    indices = first_of_each_digit(labels, args.images)
    prefix = images[:max(indices) + 1]  # the draws of image i depend on the images before it
    copies = {name: augmented(prefix, transform, args.seed)[indices] for name, transform in AUGMENTATIONS.items()}
    angles = rotation_angles(len(prefix), args.seed)
    originals = images[indices]
    rows = [{"index": i, "label": int(labels[i]), "angle": angles[i],
             "blurred": not torch.equal(copies["blurred"][k], originals[k]),
             "inverted": torch.equal(copies["inverted"][k], 1 - originals[k])} for k, i in enumerate(indices)]
    notes = [{"rotated": f"{r['angle']:+.1f} deg", "blurred": "yes" if r["blurred"] else "not applied",
              "inverted": "yes" if r["inverted"] else "not applied"} for r in rows]
    print(f"\nFig. 10: the first training image of digits 0-{args.images - 1} (seed {args.seed})")
    for r in rows:
        print(f"  digit {r['label']} (image {r['index']}): rotated {r['angle']:+.1f} degrees, "
              f"blurred {'yes' if r['blurred'] else 'no'}, inverted {'yes' if r['inverted'] else 'no'}")
    augmentation_figure(originals, copies, [r["label"] for r in rows], notes).savefig(out / "fig10.png", dpi=120)

    result = {"seed": args.seed, "xor": {"num_train": len(y), "clusters": clusters},
              "mnist": {"pixel_scale": "[0, 1], before standardisation", "images": rows}}
    (out / "data_figures.json").write_text(json.dumps(result, indent=1))
    print(f"wrote fig9.png, fig10.png and data_figures.json in {out}")


if __name__ == "__main__":
    main()
