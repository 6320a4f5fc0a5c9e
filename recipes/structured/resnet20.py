"""Tables 2 and 5-8 of the structured SG-MCMC paper: ResNet-20 on CIFAR-10, SVHN, FashionMNIST.

Setting (structured-sgmcmc spec §6.3): ResNet-20 (:class:`lit_bayes.models.resnet.ResNet20`,
CIFAR variant; BatchNorm with frozen statistics, see its docstring), 300 epochs, batch 128
(CIFAR-10, SVHN) or 500 (FashionMNIST). Per base sampler (``--family psgld`` or ``sghmc``):
the base sampler and S_d (fully factorised, Bernoulli(rho), rho in {0.1, 0.5}) over the
learning-rate grid of the tables, and S-SGMCMC with M in {2, 4, 8, 16} equal interleaved
groups at the paper's fixed learning rate. K = 2 masks (stated for S_d-SGHMC; unstated for
S_d-pSGLD, the same is used).

Not stated, chosen here: the prior N(0, 0.3^2) (the authors' code); every parameter sampled
(the authors' code freezes BN and biases at the MAP); the SGHMC friction ``--friction``
(default 5; the authors' "base_C = 0.05" belongs to a scale-adapted SGHMC that the
library does not implement; friction x lr must stay below 1); no augmentation
(the paper uses AutoAugment on CIFAR-10); start from the network's initialisation unless
``--map-epochs`` pretrains a MAP with Adam (the authors' code pretrains with RMSprop).
The accuracy is measured once at the end (Tables 7-8 report the maximum over training).
ESS/IAC: see ``common.py``; they are not on the paper's scale.

Data: torchvision's files under ``--root`` (``--download`` to fetch them).
``--synthetic`` replaces the data set by random images of its shape (a pipeline check,
said so in the output), e.g.:

    python recipes/structured/resnet20.py --dataset cifar10 --root data --family psgld
    python recipes/structured/resnet20.py --dataset fashion_mnist --synthetic --epochs 1 --lrs 1e-3 \\
        --keep-probs 0.5 --s-groups 2
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from common import PAPER_NOTE, SyntheticClassification, fit_and_test, pretrain_map, write_json
from lit_bayes import SGMCMC, Categorical, GaussianPrior
from lit_bayes.data import TorchvisionImages
from lit_bayes.models.resnet import ResNet20
from lit_bayes.samplers.structured_sgmcmc import StructuredSGMCMC

DATASETS = {  # input shape, batch size, LR grid, S-pSGLD LR, S-SGHMC LR (spec §6.3 table)
    "cifar10": ((3, 32, 32), 128, [1e-2, 1e-3, 1e-4, 1e-5], 1e-3, 1e-2),
    "svhn": ((3, 32, 32), 128, [1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6], 1e-4, 1e-2),
    "fashion_mnist": ((1, 28, 28), 500, [1e-2, 1e-3, 1e-4, 1e-5], 1e-3, 1e-2),
}
# Table 2: (IAC, ESS); S_d rows are fully factorised, Bernoulli masks.
TABLE2 = {
    "cifar10": {"pSGLD": (842, 6.79), "S-pSGLD M=2": (777, 7.34), "S-pSGLD M=4": (783, 7.26),
                "S-pSGLD M=8": (833, 6.86), "S_d-pSGLD": (816, 7.05), "SGHMC": (916, 6.14),
                "S-SGHMC M=2": (874, 6.37), "S-SGHMC M=4": (875, 6.37), "S-SGHMC M=8": (1195, 4.68),
                "S_d-SGHMC": (1079, 5.28)},
    "svhn": {"pSGLD": (839, 6.82), "S-pSGLD M=2": (840, 6.80), "S-pSGLD M=4": (834, 6.83),
             "S-pSGLD M=8": (857, 6.67), "S_d-pSGLD": (803, 7.00), "SGHMC": (858, 6.59),
             "S-SGHMC M=2": (949, 5.74), "S-SGHMC M=4": (961, 5.66), "S-SGHMC M=8": (1056, 5.30),
             "S_d-SGHMC": (828, 6.56)},
    "fashion_mnist": {"pSGLD": (779, 7.09), "S-pSGLD M=2": (740, 7.55), "S-pSGLD M=4": (751, 7.45),
                      "S-pSGLD M=8": (776, 7.24), "S_d-pSGLD": (677, 8.24), "SGHMC": (795, 6.83),
                      "S-SGHMC M=2": (928, 5.67), "S-SGHMC M=4": (915, 5.77), "S-SGHMC M=8": (1142, 4.87),
                      "S_d-SGHMC": (782, 7.08)},
}
# Tables 5-8: accuracy by (method, rho, lr); Table 8 is printed with pSGLD labels but holds SGHMC rows.
ACCURACY = {
    ("fashion_mnist", "psgld"): {
        ("S_d", 0.1, 1e-5): 0.918, ("S_d", 0.1, 1e-4): 0.925, ("S_d", 0.1, 1e-3): 0.924, ("S_d", 0.1, 1e-2): 0.911,
        ("S_d", 0.5, 1e-5): 0.923, ("S_d", 0.5, 1e-4): 0.923, ("S_d", 0.5, 1e-3): 0.924, ("S_d", 0.5, 1e-2): 0.91,
        ("base", None, 1e-5): 0.924, ("base", None, 1e-4): 0.911, ("base", None, 1e-3): 0.809,
        ("base", None, 1e-2): 0.724, ("S2", None, 1e-3): 0.918, ("S4", None, 1e-3): 0.919,
        ("S8", None, 1e-3): 0.919, ("S16", None, 1e-3): 0.916},
    ("fashion_mnist", "sghmc"): {
        ("S_d", 0.1, 1e-5): 0.412, ("S_d", 0.1, 1e-4): 0.796, ("S_d", 0.1, 1e-3): 0.92, ("S_d", 0.1, 1e-2): 0.922,
        ("S_d", 0.5, 1e-5): 0.207, ("S_d", 0.5, 1e-4): 0.758, ("S_d", 0.5, 1e-3): 0.92, ("S_d", 0.5, 1e-2): 0.927,
        ("base", None, 1e-5): 0.206, ("base", None, 1e-4): 0.751, ("base", None, 1e-3): 0.92,
        ("base", None, 1e-2): 0.928, ("S2", None, 1e-2): 0.928, ("S4", None, 1e-2): 0.927,
        ("S8", None, 1e-2): 0.919, ("S16", None, 1e-2): 0.906},
    ("cifar10", "psgld"): {
        ("S_d", 0.1, 1e-2): 0.191, ("S_d", 0.1, 1e-3): 0.896, ("S_d", 0.1, 1e-4): 0.921, ("S_d", 0.1, 1e-5): 0.922,
        ("S_d", 0.5, 1e-2): 0.768, ("S_d", 0.5, 1e-3): 0.918, ("S_d", 0.5, 1e-4): 0.926, ("S_d", 0.5, 1e-5): 0.927,
        ("base", None, 1e-2): 0.666, ("base", None, 1e-3): 0.866, ("base", None, 1e-4): 0.914,
        ("base", None, 1e-5): 0.926, ("S2", None, 1e-3): 0.894, ("S4", None, 1e-3): 0.905,
        ("S8", None, 1e-3): 0.881, ("S16", None, 1e-3): 0.836},
    ("cifar10", "sghmc"): {
        ("S_d", 0.1, 1e-2): 0.91, ("S_d", 0.1, 1e-3): 0.922, ("S_d", 0.1, 1e-4): 0.869, ("S_d", 0.1, 1e-5): 0.724,
        ("S_d", 0.5, 1e-2): 0.918, ("S_d", 0.5, 1e-3): 0.927, ("S_d", 0.5, 1e-4): 0.886, ("S_d", 0.5, 1e-5): 0.778,
        ("base", None, 1e-2): 0.86, ("base", None, 1e-3): 0.926, ("base", None, 1e-4): 0.885,
        ("base", None, 1e-5): 0.746, ("S2", None, 1e-3): 0.913, ("S4", None, 1e-3): 0.919,
        ("S8", None, 1e-3): 0.908, ("S16", None, 1e-3): 0.774},
}
LABEL = {"psgld": "pSGLD", "sghmc": "SGHMC"}


def grid(args, s_lr):
    """(key, name, class, lr, options) of every run of the family."""
    family = LABEL[args.family]
    runs = []
    for lr in args.lr_grid:
        runs.append((("base", None, lr), f"{family} lr={lr:g}", SGMCMC, lr, {}))
        for rho in args.rhos:
            runs.append((("S_d", rho, lr), f"S_d-{family} rho={rho:g} lr={lr:g}", StructuredSGMCMC, lr,
                         {"mode": "dropout", "partition": "fully_factorised", "keep_prob": rho,
                          "num_masks": args.num_masks, "mask": "bernoulli"}))
    for m in args.groups:
        runs.append(((f"S{m}", None, s_lr), f"S-{family} M={m} lr={s_lr:g}", StructuredSGMCMC, s_lr,
                     {"mode": "structured", "partition": "modulo", "num_groups": m}))
    return runs


def table2_key(key, family):
    kind, _, _ = key
    if kind == "base":
        return family
    return f"S_d-{family}" if kind == "S_d" else f"S-{family} M={kind[1:]}"


def floats(text):
    return [float(v) for v in text.split(",") if v.strip()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="cifar10")
    parser.add_argument("--root", default="data")
    parser.add_argument("--download", action="store_true")
    parser.add_argument("--synthetic", action="store_true", help="random images of the data set's shape")
    parser.add_argument("--family", choices=sorted(LABEL), default="psgld")
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--burn-in", type=int, default=None, help="steps; default: half of the run")
    parser.add_argument("--lrs", default=None, help="comma-separated; default: the table's grid")
    parser.add_argument("--keep-probs", default="0.1,0.5")
    parser.add_argument("--s-groups", default="2,4,8,16")
    parser.add_argument("--num-masks", type=int, default=2)
    parser.add_argument("--buffer-size", type=int, default=1000)
    parser.add_argument("--friction", type=float, default=5.0)
    parser.add_argument("--prior-var", type=float, default=0.09)
    parser.add_argument("--map-epochs", type=int, default=0)
    parser.add_argument("--trace-draws", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    shape, batch, lr_grid, s_psgld_lr, s_sghmc_lr = DATASETS[args.dataset]
    args.lr_grid = floats(args.lrs) if args.lrs else lr_grid
    args.rhos = floats(args.keep_probs)
    args.groups = [int(m) for m in args.s_groups.split(",") if m.strip()]
    out = args.out or Path(f"runs/structured_resnet20_{args.dataset}_{args.family}")

    if args.synthetic:
        data = SyntheticClassification(shape, 10, num_train=4 * batch, num_test=200, batch_size=batch, seed=args.seed)
    else:
        data = TorchvisionImages(args.dataset, root=args.root, download=args.download, batch_size=batch,
                                 seed=args.seed)
    data.setup()
    steps = args.epochs * -(-data.num_train // batch)
    burn_in = steps // 2 if args.burn_in is None else args.burn_in
    prior = GaussianPrior(args.prior_var)
    start = pretrain_map(ResNet20(10, shape[0]), Categorical(10), prior, data, args.map_epochs)
    stepper_options = {"friction": args.friction} if args.family == "sghmc" else {}
    paper_accuracy = ACCURACY.get((args.dataset, args.family), {})

    results = {}
    s_lr = s_psgld_lr if args.family == "psgld" else s_sghmc_lr
    for key, name, cls, lr, options in grid(args, s_lr):
        model = ResNet20(10, shape[0])
        model.load_state_dict(start.state_dict())
        if cls is StructuredSGMCMC:
            options = {**options, "buffer_size": args.buffer_size}
        sampler = cls(model, Categorical(10), prior, stepper=args.family, step_size=lr,
                      stepper_options=stepper_options, burn_in=burn_in, seed=args.seed, init="template", **options)
        run, _ = fit_and_test(sampler, data, max_epochs=args.epochs, trace_draws=args.trace_draws)
        paper_iac_ess = TABLE2[args.dataset].get(table2_key(key, LABEL[args.family]))
        run["paper"] = {"accuracy": paper_accuracy.get(key), "table2_iac_ess": paper_iac_ess}
        results[name] = run
        mix = run["mixing"] or {"iac_median": float("nan"), "ess_median": float("nan")}
        acc = run["metrics"]["test/accuracy"]
        paper_acc = run["paper"]["accuracy"]
        print(f"{name:<34} acc {acc:.3f} (paper {paper_acc if paper_acc is not None else '-'})  "
              f"exp.acc {run['metrics']['test/expected_accuracy']:.3f}  IAC {mix['iac_median']:.1f}  "
              f"ESS {mix['ess_median']:.1f}  (Table 2, this method's row: IAC/ESS {paper_iac_ess or '-'})  "
              f"{run['wall_time_s']:.0f} s",
              flush=True)
    if args.synthetic:
        print(f"NOTE: synthetic {args.dataset}-shaped data, not {args.dataset}: the paper's numbers do not apply")
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    write_json(out / "summary.json", {"experiment": f"structured-sgmcmc ResNet-20 {args.dataset} {args.family}",
                                      "synthetic": args.synthetic, "settings": settings, "steps": steps,
                                      "burn_in": burn_in, "results": results, "note": PAPER_NOTE})
    return results


if __name__ == "__main__":
    main()
