"""Tables 2 and 5-8 of the structured SG-MCMC paper: ResNet-20 on CIFAR-10, SVHN, FashionMNIST.

Runs ``resnet20.yaml`` through ``lit-bayes fit`` for every cell of a family's grid (``--family
psgld`` or ``sghmc``): the base sampler and S_d (fully factorised, Bernoulli(rho), rho in
{0.1, 0.5}, K = 2 masks) over the learning-rate grid of the tables, and S-SGMCMC with M in
{2, 4, 8, 16} equal interleaved groups at the paper's fixed learning rate. The choices the paper
leaves open are stated in ``resnet20.yaml``. Each cell writes ``<out>/<cell>/summary.json``; this
script prints the accuracy (and the mean of the kept draws' own accuracies), IAC and ESS beside
Tables 5-8 and Table 2, and writes ``<out>/summary.json``.

Data: torchvision's files under ``--root`` (``--download`` to fetch them). ``--synthetic`` uses
images of the data set's shape around one random prototype per class
(:class:`lit_bayes.data.ClassPrototypes`, four batches): a pipeline check, said so in the output.
Arguments this script does not know go to ``lit-bayes``. E.g.:

    python recipes/structured/resnet20.py --dataset cifar10 --root data --family psgld
    python recipes/structured/resnet20.py --dataset fashion_mnist --synthetic --epochs 1 --lrs 1e-3 \\
        --keep-probs 0.5 --s-groups 2
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from lit_bayes.recipe_runs import fit_cell, health_verdict, settings_overrides, verdict_lines

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "resnet20.yaml"
STRUCTURED = "lit_bayes.samplers.structured_sgmcmc.StructuredSGMCMC"
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


def grid(args, s_lr) -> list[tuple[tuple, str, dict]]:
    """(key of the paper's tables, name, overrides of resnet20.yaml) of every cell of the family."""
    family = LABEL[args.family]
    cells = []
    for lr in args.lr_grid:
        cells.append((("base", None, lr), f"{family} lr={lr:g}", {"model.init_args.step_size": lr}))
        for rho in args.rhos:
            cells.append((("S_d", rho, lr), f"S_d-{family} rho={rho:g} lr={lr:g}", {
                "model.class_path": STRUCTURED, "model.init_args.step_size": lr, "model.init_args.mode": "dropout",
                "model.init_args.partition": "fully_factorised", "model.init_args.keep_prob": rho,
                "model.init_args.num_masks": args.num_masks, "model.init_args.mask": "bernoulli"}))
    for m in args.groups:
        cells.append(((f"S{m}", None, s_lr), f"S-{family} M={m} lr={s_lr:g}", {
            "model.class_path": STRUCTURED, "model.init_args.step_size": s_lr, "model.init_args.mode": "structured",
            "model.init_args.partition": "modulo", "model.init_args.num_groups": m}))
    return cells


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
    parser.add_argument("--synthetic", action="store_true", help="images of the data set's shape around class prototypes")
    parser.add_argument("--family", choices=sorted(LABEL), default="psgld")
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--lrs", default=None, help="comma-separated; default: the table's grid")
    parser.add_argument("--keep-probs", default="0.1,0.5")
    parser.add_argument("--s-groups", default="2,4,8,16")
    parser.add_argument("--num-masks", type=int, default=2)
    parser.add_argument("--buffer-size", type=int, default=1000)
    parser.add_argument("--friction", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rerun", action="store_true", help="run cells again even when their summary exists")
    args, extra = parser.parse_known_args(argv)  # the rest goes to lit-bayes
    shape, batch, lr_grid, s_psgld_lr, s_sghmc_lr = DATASETS[args.dataset]
    args.lr_grid = floats(args.lrs) if args.lrs else lr_grid
    args.rhos = floats(args.keep_probs)
    args.groups = [int(m) for m in args.s_groups.split(",") if m.strip()]
    out = args.out or Path(f"runs/structured/resnet20_{args.dataset}_{args.family}")

    if args.synthetic:
        data = {"data.class_path": "lit_bayes.data.ClassPrototypes", "data.init_args.input_shape": list(shape),
                "data.init_args.num_train": 4 * batch, "data.init_args.num_test": 200}
    else:
        data = {"data.init_args.name": args.dataset, "data.init_args.root": args.root,
                "data.init_args.download": args.download}
    common = {**data, "data.init_args.batch_size": batch, "model.init_args.model.init_args.in_channels": shape[0],
              "trainer.max_epochs": args.epochs, "trainer.check_val_every_n_epoch": args.epochs,
              "model.init_args.stepper": args.family}
    if args.family == "sghmc":
        common["model.init_args.stepper_options"] = {"friction": args.friction}
    paper_accuracy = ACCURACY.get((args.dataset, args.family), {})
    s_lr = s_psgld_lr if args.family == "psgld" else s_sghmc_lr

    results = {}
    for key, name, cell in grid(args, s_lr):
        structured = {"model.init_args.buffer_size": args.buffer_size} if "model.class_path" in cell else {}
        # the class switch comes first: the structured options then land on StructuredSGMCMC
        overrides = settings_overrides({**cell, **common, **structured})
        summary = fit_cell(CONFIG, out / name.replace(" ", "_"), [*overrides, *extra], args.rerun)
        metrics = summary["metrics"]
        paper_iac_ess = TABLE2[args.dataset].get(table2_key(key, LABEL[args.family]))
        results[name] = {"metrics": metrics, "steps": summary["steps"], "wall_time_s": summary["wall_time_s"],
                         "verdict": health_verdict(summary),
                         "paper": {"accuracy": paper_accuracy.get(key), "table2_iac_ess": paper_iac_ess}}
        paper_acc = paper_accuracy.get(key)
        nan = float("nan")
        print(f"{name:<34} acc {metrics['test/accuracy']:.3f} (paper {paper_acc if paper_acc is not None else '-'})  "
              f"exp.acc {metrics['test/accuracy_per_sample']:.3f}  IAC {metrics.get('mixing/iac_median', nan):.1f}  "
              f"ESS {metrics.get('mixing/ess_median', nan):.1f}  (Table 2, this method's row: IAC/ESS "
              f"{paper_iac_ess or '-'})  {results[name]['verdict']}  {summary['wall_time_s']:.0f} s", flush=True)
    print(*verdict_lines({name: run["verdict"] for name, run in results.items()},
                         "its accuracy and ESS are not yet those of its posterior; run longer (--epochs)"), sep="\n")
    if args.synthetic:
        print(f"NOTE: synthetic {args.dataset}-shaped data, not {args.dataset}: the paper's numbers do not apply")
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(
        {"experiment": f"structured-sgmcmc ResNet-20 {args.dataset} {args.family}", "synthetic": args.synthetic,
         "config": str(CONFIG), "overrides": settings_overrides(common) + extra, "results": results}, indent=2))
    print(f"wrote {out / 'summary.json'}")
    return results


if __name__ == "__main__":
    main()
