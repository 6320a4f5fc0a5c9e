"""S_d mixing in function space (issue 28): ESS per gradient evaluation, S_d-pSGLD against pSGLD and SGLD.

The claim (structured SG-MCMC paper, §9.1 / Fig. 3; spec §6.2): S_d-pSGLD mixes faster than
pSGLD as the group count M grows, less so as the keep-probability rho grows (rho = 0.5 close to
pSGLD). Weight-space ESS says nothing here (the weights of every sampler drift: ESS ~4), so each
cell is judged on function-space traces that :class:`lit_bayes.callbacks.ChainDiagnostics`
records at every kept step: ``heldout_lpd`` (a chain's mean log predictive density over 256
held-out validation images) and ``point_lpd_0..3`` (4 fixed images of that batch).

Each cell is a ``lit-bayes fit`` of ``mnist_mlp.yaml`` (MLP(784, 50, 50, 10), batch 500, N(0, 0.3^2)
prior) in ``<out>/<cell>/e<epochs>``. Reported per cell: bulk ESS of ``heldout_lpd`` and the
smallest over ``point_lpd_*``, the largest function-space R-hat, the gradient evaluations of the
kept window (steps after the burn-in x K composites a step for S_d, x 1 for pSGLD), ESS per 1,000 of
them and its ratios to pSGLD's and SGLD's, the health verdict, test accuracy / NLPD and wall time.
``--cells`` runs some cells only; the grid's other cells are read back from their finished runs under
``--out`` (the longest of each; a cell without one is left out, and a ratio to it is ``-``).

Reduced setting (one CPU core, a few minutes a cell), against the paper's 500 epochs, K = 300 and
100,000 draws: 4 chains, ``--epochs`` (40) epochs of 118 steps, the second half kept (every step),
K = ``--num-masks`` (2) Bernoulli masks a step, a buffer of 1,000 past states, 1,000 training images
held out for validation. S_d starts after one epoch of plain pSGLD (the library's default
``buffer_start``, as in the authors' code; ``--buffer-start`` sets another count of steps): with K = 2 a
group is dropped by both masks with probability (1 - rho)^2, its gradient is then exactly 0, and a pSGLD
preconditioner that has seen only zeros is 1 / lambda = 1e5, noise of variance eps 1e5 (started
structured, S_d-pSGLD weights reached ~100 and the test NLPD 300-3000 at both 1e-2 and 1e-3). The
gradient evaluations counted lie after the burn-in, so after that epoch. ``--widths`` and
``--num-train`` reduce the network and the training set (RESULTS.md: at MLP(784, 50, 50, 10) the chains
sit in separate modes, so the study that reaches stationarity is that of the softmax regression
``--widths "[784, 10]"``).
The step: pSGLD 1e-2 (the paper's LR) with the RMSprop preconditioner adapted throughout, as in the
authors' code; frozen at the end of the burn-in (the library's default) the chains diverge within
~150 steps of the freeze at 1e-2 (``mnist_mlp.yaml`` header).
Plain SGLD (the cell ``SGLD``, the issue's other reference; ``--sgld-lr 0`` leaves it out): eps =
``--sgld-lr`` (1e-5) on the same N-scaled energy, no preconditioner. Chosen from 10-epoch runs of the
softmax regression (2026-12-01): test NLPD 0.278 at 1e-5 and 3e-6 (pSGLD's 2,560-epoch figure: 0.278),
0.346 at 3e-5 and 0.506 at 1e-4, where the step's bias widens the law; 1e-5 is the largest step tried
without that.

Stationarity: a cell whose verdict is not ``ok`` is run again, twice as long, in a new directory,
up to ``--max-epochs``; every attempt is kept in the JSON (``attempts``), the last one reported.
Finished runs are read back, not rerun, and an interrupted cell continues from its last checkpoint
(:func:`lit_bayes.recipe_runs.fit_cell`), so an interrupted study continues where it stopped.

``--data synthetic`` runs the same grid on MNIST-shaped class prototypes
(:class:`lit_bayes.data.ClassPrototypes`): a pipeline check, said so in the output. Arguments this
script does not know go to ``lit-bayes``.

Examples:
    python recipes/structured/mixing_study.py --root data --max-epochs 40 --groups all,32   # RESULTS.md (~23 min)
    python recipes/structured/mixing_study.py --root data --widths "[784, 10]" --groups all,32 \
        --epochs 320 --max-epochs 1280     # the softmax regression (RESULTS.md; ~6-11 min a cell at 320 epochs)
    python recipes/structured/mixing_study.py --root data     # M = 4, 512 too, cells not ok run 80 epochs
    python recipes/structured/mixing_study.py --data synthetic --epochs 2 --max-epochs 2
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml
from mnist_mlp import SYNTHETIC as FIG3_SYNTHETIC
from mnist_mlp import dropout_cell, parse_groups

from lit_bayes.models import MLP
from lit_bayes.recipe_runs import finished_summary, fit_cell, settings_overrides
from lit_bayes.samplers.base import sampling_steps

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "mnist_mlp.yaml"
BASE = "pSGLD"
SGLD = "SGLD"
SGLD_LR = 1e-5  # the plain SGLD cell's eps (module docstring)
REFERENCES = (BASE, SGLD)  # every cell's ESS per gradient evaluation is also given as a ratio to these cells
CLAIM = ("S_d-pSGLD mixes faster (higher ESS) as M grows, less so as rho grows (rho = 0.5 close to pSGLD); "
         "paper: Fig. 3 (b), (c), weight-space IAC / ESS, 500 epochs, K = 300")
SYNTHETIC = {**FIG3_SYNTHETIC, "data.init_args.num_test": 500}  # the Fig. 3 script's stand-in, a smaller test set


def checked_groups(text: str, num_params: int) -> list[int]:
    """``"4,32,all"`` to group counts (:func:`mnist_mlp.parse_groups`), each in 1..``num_params``."""
    groups = parse_groups(text, num_params)
    if any(not 1 <= m <= num_params for m in groups):
        raise ValueError(f"--groups must lie in 1..{num_params} (or 'all'), got {text!r}")
    return groups


def parse_keep_probs(text: str) -> list[float]:
    """``"0.1,0.5"`` to keep-probabilities in (0, 1]."""
    probs = [float(r) for r in text.split(",") if r.strip()]
    if any(not 0.0 < r <= 1.0 for r in probs):
        raise ValueError(f"--keep-probs must lie in (0, 1], got {text!r}")
    return probs


def grid(groups: list[int], keep_probs: list[float], num_masks: int,
         sgld_lr: float | None) -> list[tuple[str, int, dict, dict]]:
    """(name, gradient evaluations a step, class overrides of mnist_mlp.yaml, stepper overrides) of
    pSGLD, plain SGLD at step ``sgld_lr`` (none when ``None``), then S_d-pSGLD for each (M, rho), the
    finest partition first. The class overrides go before the common settings, the stepper ones after."""
    cells = [(BASE, 1, {}, {})]
    if sgld_lr is not None:
        cells.append((SGLD, 1, {}, {"model.init_args.stepper": "sgld", "model.init_args.step_size": sgld_lr,
                                    "model.init_args.stepper_options": {}}))
    for m in sorted(groups, reverse=True):
        for rho in keep_probs:
            cells.append((f"S_d-pSGLD M={m} rho={rho:g}", num_masks, dropout_cell(m, rho, num_masks), {}))
    return cells


def per_1000(ess: float | None, evaluations: int) -> float | None:
    """ESS per 1,000 gradient evaluations (``None`` without an ESS or evaluations)."""
    return 1000 * ess / evaluations if ess is not None and evaluations else None


def ratio(value: float | None, base: float | None) -> float | None:
    """``value / base``, ``None`` when either is missing or ``base`` is not positive."""
    return value / base if value is not None and base is not None and base > 0 else None


def fmt(value: float | None, spec: str) -> str:
    """``value`` formatted by ``spec``, ``-`` when missing."""
    return "-" if value is None else format(value, spec)


def function_space(summary: dict, passes_per_step: int, burn_in: float) -> dict:
    """One run's function-space mixing per gradient evaluation, verdict, accuracy and cost."""
    metrics = summary["metrics"]
    steps = summary["steps"]
    kept_from = sampling_steps(steps, burn_in, 1, None)[0]
    evaluations = (steps - kept_from) * passes_per_step
    points = [v for k, v in metrics.items() if k.startswith("diag/ess_bulk/point_lpd_")]
    heldout = metrics.get("diag/ess_bulk/heldout_lpd")  # None: too few draws to diagnose
    point_min = min(points) if points else None
    return {
        "steps": steps, "kept_steps": steps - kept_from, "grad_evals_kept": evaluations,
        "ess_heldout": heldout, "ess_point_min": point_min,
        "ess_heldout_per_1000": per_1000(heldout, evaluations),
        "ess_point_min_per_1000": per_1000(point_min, evaluations),
        "iat_heldout": metrics.get("diag/iat/heldout_lpd"), "rhat_max": metrics.get("diag/fs_rhat_max"),
        "verdict": summary["health"]["verdict"], "reasons": [r["message"] for r in summary["health"]["reasons"]],
        "test_accuracy": metrics["test/accuracy"], "test_nlpd": metrics["test/nlpd"],
        "wall_time_s": summary["wall_time_s"],
    }


def run_cell(directory: Path, overrides: list[str], passes: int, args) -> list[dict]:
    """Every attempt of one cell: ``--epochs``, doubled while the verdict is not ``ok`` and the next
    length is within ``--max-epochs``."""
    attempts, epochs = [], args.epochs
    while True:
        length = settings_overrides({"trainer.max_epochs": epochs, "trainer.check_val_every_n_epoch": epochs})
        summary = fit_cell(CONFIG, directory / f"e{epochs}", [*overrides, *length], args.rerun)
        attempts.append({"epochs": epochs, **function_space(summary, passes, args.burn_in)})
        if attempts[-1]["verdict"] == "ok" or 2 * epochs > args.max_epochs:
            return attempts
        epochs *= 2


def read_back_cell(directory: Path) -> list[dict]:
    """The finished attempts of a cell not run this time (``e<epochs>`` under ``directory``, shortest first),
    each judged with the burn-in and the K composites a step (1 without masks) its own run was given (its
    ``config.yaml``), not this invocation's."""
    runs = sorted((int(path.name[1:]), path) for path in directory.glob("e*") if path.name[1:].isdigit())
    attempts = []
    for epochs, path in runs:
        summary = finished_summary(path)
        if summary is not None:
            options = yaml.safe_load((path / "config.yaml").read_text())["model"]["init_args"]
            attempts.append({"epochs": epochs,
                             **function_space(summary, options.get("num_masks", 1), options["burn_in"])})
    return attempts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=["mnist", "synthetic"], default="mnist")
    parser.add_argument("--root", default="data")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--max-epochs", type=int, default=80, help="lengthen a cell whose verdict is not ok up to this")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--burn-in", type=float, default=0.5)
    parser.add_argument("--groups", default="all,512,32,4")
    parser.add_argument("--keep-probs", default="0.5,0.1")
    parser.add_argument("--num-masks", type=int, default=2)
    parser.add_argument("--buffer-size", type=int, default=1000)
    parser.add_argument("--buffer-start", type=int, default=None,
                        help="plain pSGLD steps before S_d (default: the library's, one epoch)")
    parser.add_argument("--widths", type=json.loads, default=None,
                        help='the MLP\'s layer widths as JSON, e.g. "[784, 10]" (default: the config\'s)')
    parser.add_argument("--num-train", type=int, default=None, help="training images kept (default: all)")
    parser.add_argument("--num-val", type=int, default=1000, help="training images held out (the held-out batch)")
    parser.add_argument("--out", type=Path, default=Path("runs/structured/mixing_study"))
    parser.add_argument("--sgld-lr", type=float, default=SGLD_LR,
                        help=f"step eps of the plain SGLD cell (default {SGLD_LR:g}); 0 leaves the cell out")
    parser.add_argument("--cells", type=lambda text: [c.strip() for c in text.split(",") if c.strip()], default=None,
                        help='run only these cells of the grid, by name, e.g. "SGLD" (default: all); the others '
                             'are read back from their finished runs under --out')
    parser.add_argument("--rerun", action="store_true", help="run cells again even when their summary exists")
    args, extra = parser.parse_known_args(argv)  # the rest goes to lit-bayes
    if args.epochs < 1 or args.max_epochs < args.epochs:
        parser.error(f"--epochs must be >= 1 and --max-epochs >= --epochs, got {args.epochs}, {args.max_epochs}")
    if args.num_masks < 1:
        parser.error(f"--num-masks must be >= 1, got {args.num_masks}")
    if args.sgld_lr < 0:
        parser.error(f"--sgld-lr must be >= 0 (0: no SGLD cell), got {args.sgld_lr}")

    widths = args.widths or yaml.safe_load(CONFIG.read_text())["model"]["init_args"]["model"]["init_args"]["widths"]
    num_params = sum(p.numel() for p in MLP(widths).parameters())
    data = SYNTHETIC if args.data == "synthetic" else {"data.init_args.root": args.root}
    if args.num_train is not None:
        data = {**data, "data.init_args.num_train": args.num_train}
    common = {**data, "data.init_args.num_val": args.num_val, "model.init_args.model.init_args.widths": widths,
              "model.init_args.stepper": "psgld",
              "model.init_args.step_size": args.lr, "model.init_args.stepper_options": {"adapt_steps": None},
              "model.init_args.num_chains": args.chains, "model.init_args.burn_in": args.burn_in,
              "trainer.callbacks": [], "diagnostics.heldout_size": 256, "diagnostics.num_fixed_inputs": 4}
    results = {}
    cells = grid(checked_groups(args.groups, num_params), parse_keep_probs(args.keep_probs), args.num_masks,
                 args.sgld_lr or None)
    if args.cells is not None:
        names = [c[0] for c in cells]
        unknown = sorted(set(args.cells) - set(names))
        if unknown:
            parser.error(f"--cells names cells not in this grid: {unknown}; the grid's cells: {names}")
    for name, passes, cell, stepper in cells:
        directory = args.out / name.replace(" ", "_")
        read_back = args.cells is not None and name not in args.cells
        if read_back:
            attempts = read_back_cell(directory)
            if not attempts:
                continue
        else:
            structured = {"model.init_args.buffer_size": args.buffer_size} if cell else {}
            if cell and args.buffer_start is not None:
                structured["model.init_args.buffer_start"] = args.buffer_start
            # the class switch comes first: the structured options then land on StructuredSGMCMC
            overrides = settings_overrides({**cell, **common, **structured, **stepper}) + extra
            attempts = run_cell(directory, overrides, passes, args)
        results[name] = r = {**attempts[-1], "attempts": attempts, "read_back": read_back}
        keys = ("ess_heldout_per_1000", "ess_point_min_per_1000")
        for reference in REFERENCES:
            for key in keys:
                r[f"{key}_vs_{reference}"] = ratio(r[key], results.get(reference, {}).get(key))
        ratios = ", ".join(" / ".join(f"x{fmt(r[f'{key}_vs_{reference}'], '.2f')}" for key in keys) + f" {reference}"
                           for reference in REFERENCES)
        print(f"{name:<28} e{r['epochs']:<3} grad evals {r['grad_evals_kept']:6d}  "
              f"ESS heldout {fmt(r['ess_heldout'], '7.1f')} "
              f"point min {fmt(r['ess_point_min'], '7.1f')}  per 1000 evals {fmt(r['ess_heldout_per_1000'], '6.2f')} / "
              f"{fmt(r['ess_point_min_per_1000'], '6.2f')} ({ratios})  R-hat {fmt(r['rhat_max'], '.3f')}  "
              f"{r['verdict']:<7} acc {r['test_accuracy']:.4f} NLPD {r['test_nlpd']:.4f}  {r['wall_time_s']:.0f} s"
              + ("  (read back, not run)" if read_back else ""), flush=True)
    print(f"claim: {CLAIM}")
    if args.data == "synthetic":
        print("NOTE: synthetic MNIST-shaped data (class prototypes + Gaussian noise), not MNIST")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(
        {"experiment": "structured-sgmcmc S_d mixing in function space (issue 28)", "data": args.data,
         "config": str(CONFIG), "overrides": settings_overrides(common) + extra,
         "reduction": {"widths": widths, "num_train": args.num_train, "chains": args.chains, "epochs": args.epochs,
                       "max_epochs": args.max_epochs,
                       "num_masks": args.num_masks, "burn_in": args.burn_in, "buffer_size": args.buffer_size,
                       "buffer_start": args.buffer_start},
         "claim": CLAIM, "results": results}, indent=2))
    print(f"wrote {args.out / 'summary.json'}")
    return results


if __name__ == "__main__":
    main()
