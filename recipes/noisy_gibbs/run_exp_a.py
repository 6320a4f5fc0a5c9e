"""Run Exp. A (noisy-gibbs spec §6.1, the paper's Fig. 1) and print ours beside the paper's numbers.

    python recipes/noisy_gibbs/run_exp_a.py                      # the recipe: 200,000 sweeps per init
    python recipes/noisy_gibbs/run_exp_a.py --steps 5000         # shortened
    python recipes/noisy_gibbs/run_exp_a.py --seed 1             # another teacher and data set
    python recipes/noisy_gibbs/run_exp_a.py --data released      # the paper's own teacher and data
    python recipes/noisy_gibbs/run_exp_a.py --inits zeros --num-train 200 --steps 300 --every 10
    python recipes/noisy_gibbs/run_exp_a.py --data released --steps 1000000 --resume   # extend a run
    python recipes/noisy_gibbs/run_exp_a.py --data released --report   # a running or killed run, as it stands
    python recipes/noisy_gibbs/run_exp_a.py --data released --inits prior --chains 1 \
        --informed-from runs/noisy_gibbs_exp_a/zeros/version_0/checkpoints/last.ckpt   # reuse its informed chain

For each uninformed start (``zeros``: the paper's Gibbs init; ``prior``: the paper's "random" inits,
W from the prior and latents through eq. 7) it runs ``exp_a.yaml`` through ``lit-bayes fit`` (chain 0
informed at the teacher, the others uninformed) and reads ``thermalization/*`` from the run's
``summary.json`` and the test-MSE traces from its ``metrics.csv``. It prints the informed test MSE,
the uninformed chains' last test MSE, the teacher-student merge step, the R-hat and score steps, and a
short log-spaced trace, beside the paper's values (informed ~1.5e-4; zero init merges at ~1e5 sweeps;
random inits stay on a plateau ~1e-3, App. B / [code data]), each run's health verdict (its summary.json's:
every chain, the informed one included, after the burn-in), the Fig. 4 data at log-spaced R-hat blocks
(the mean and 25/50/75/95th percentiles of the per-test-point R-hat; ``--rhat-block`` records per block,
default 50 as the paper), and writes ``exp_a.json`` with every cell.
``--data released`` swaps the recipe's random teacher for the one of the paper's runs, redrawn from
the seeds of its released script (``released_teacher.py``), for a like-for-like comparison with
the released logs.

``--informed-from CKPT`` runs no informed chain: every chain is uninformed and the informed records are
read from the checkpoint of an earlier run on the same teacher and data (``ThermalizationCheck``'s
``informed_run``), so a long run of one uninformed chain costs half as much. The trace's informed column
is then the earlier run's, ``-`` past its last sweep.

The paper's chains run 2e6 sweeps, days on a CPU. ``--resume`` continues each init from the newest
``last.ckpt`` under ``--root`` (written every 10,000 sweeps) up to ``--steps``; ``--report`` runs nothing
and prints the same table from the newest checkpoint's records (``ThermalizationCheck`` keeps every record
since sweep 0 in its checkpointed state), for a run still going or one that was killed.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path
from typing import NamedTuple

import torch
import yaml

from lit_bayes.callbacks.thermalization import RHAT_PERCENTILES, ThermalizationCheck, rhat_columns
from lit_bayes.cli import last_checkpoint
from lit_bayes.cli import main as lit_bayes
from released_teacher import RELEASED_NORMS, RELEASED_NORMS_SWEEP, released_test_mse  # this script's directory is on sys.path

HERE = Path(__file__).resolve().parent
PAPER = {
    "zeros": {"informed_test_mse": 1.5e-4, "uninformed_test_mse": 1.6e-4, "merged_fraction": 1.0, "merge_step": 1e5,
              "rhat_step": 6e4, "score_step": 20},
    "prior": {"informed_test_mse": 1.5e-4, "uninformed_test_mse": 1.1e-3, "merged_fraction": 0.0, "merge_step": None,
              "rhat_step": "~1 (false)", "score_step": None},
}
COLUMNS = ("informed_test_mse", "uninformed_test_mse", "merged_fraction", "merge_step", "rhat_step", "score_step")


def config(args: argparse.Namespace, init: str) -> dict:
    """exp_a.yaml with the command line's sizes."""
    cfg = yaml.safe_load((HERE / "exp_a.yaml").read_text())
    cfg["model"]["init_args"]["init"] = init
    check = cfg["trainer"]["callbacks"][0]["init_args"]
    for key, value in (("max_epochs", args.steps),):
        if value is not None:
            cfg["trainer"][key] = value
    if args.every is not None:
        check["every_n_steps"] = args.every
    if args.rhat_block is not None:
        check["rhat_block"] = args.rhat_block
    if args.chains is not None:
        cfg["model"]["init_args"]["num_chains"] = args.chains
    if args.informed_from is not None:
        check["informed_chains"] = cfg["model"]["init_args"]["informed_chains"] = 0
        check["informed_run"] = str(args.informed_from)
    if args.seed is not None:  # a new teacher and data set, and new chain streams
        cfg["seed_everything"] = cfg["model"]["init_args"]["seed"] = cfg["data"]["init_args"]["seed"] = args.seed
    if args.data == "released":  # importable: this script's directory is on sys.path
        cfg["data"] = {"class_path": "released_teacher.ReleasedExpATeacher",
                       "init_args": {"seed": cfg["data"]["init_args"]["seed"]}}
    for key, value in (("num_train", args.num_train), ("num_test", args.num_test)):
        if value is not None:
            cfg["data"]["init_args"][key] = value
    steps = cfg["trainer"]["max_epochs"]
    cfg["model"]["init_args"]["burn_in"] = min(cfg["model"]["init_args"]["burn_in"], steps // 2)
    cfg["checkpoint"]["every_n_epochs"] = min(cfg["checkpoint"]["every_n_epochs"], steps)
    return cfg


def log_spaced(count: int, points: int) -> list[int]:
    """About ``points`` indices into ``count`` records, denser at the start (quadratic spacing), in order."""
    return sorted({min(count - 1, round((count - 1) * (i / (points - 1)) ** 2)) for i in range(points)})


def trace_rows(directory: Path, informed: dict[int, float] | None = None, points: int = 8
               ) -> list[tuple[int, float | None, float]]:
    """(step, informed MSE, mean uninformed MSE) at about ``points`` log-spaced records of the metrics.csv
    of every ``version_*`` under ``directory`` (a resumed run writes one more). The informed MSE is chain
    0's, or with ``informed`` (step -> informed MSE, read from another run) the one recorded nearest the step,
    every chain of the run then being uninformed; ``None`` past the last step of that run (not recorded)."""
    rows = {}
    for path in sorted(directory.glob("version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1])):
        with path.open() as f:
            for row in csv.DictReader(f):
                values = {k: float(v) for k, v in row.items() if k.startswith("thermalization/test_mse/") and v}
                if values:
                    rows[int(row["step"])] = values
    steps = sorted(rows)
    out = []
    for step in (steps[i] for i in log_spaced(len(steps), points)):
        values = rows[step]
        if informed is None:
            uninformed = [v for k, v in values.items() if not k.endswith("/chain_0")]
            out.append((step, values["thermalization/test_mse/chain_0"], sum(uninformed) / len(uninformed)))
        else:
            nearest = min(informed, key=lambda s: abs(s - step))
            read = informed[nearest] if step <= max(informed) else None
            out.append((step, read, sum(values.values()) / len(values)))
    return out


def rhat_percentile_rows(check: ThermalizationCheck, points: int = 8) -> list[tuple[int, str, list[float]]]:
    """The paper's Fig. 4 at about ``points`` log-spaced R-hat blocks of ``check``'s records: (block end step,
    the chains it is over, [mean, then the 25/50/75/95th percentiles of the per-test-point R-hat]). Over all
    chains where the run has its informed chain's outputs, else over the uninformed ones; blocks recorded
    without percentiles (by an older version) are left out."""
    rows = check.traces()["rhat"]
    informed = bool(torch.isfinite(rows[:, rhat_columns("rhat")[0]]).any()) if len(rows) else False
    name, label = ("rhat", "all") if informed else ("rhat_uninformed", "uninformed")
    kept = [row for row in rows[:, [0, *rhat_columns(name)]].tolist() if all(math.isfinite(v) for v in row[2:])]
    if not kept:
        return []
    return [(int(kept[i][0]), label, kept[i][1:]) for i in log_spaced(len(kept), points)]


class Recorded(NamedTuple):
    """What the newest checkpoint of a run holds for the report."""

    checkpoint: Path
    step: int
    check: ThermalizationCheck  # the run's ThermalizationCheck with the checkpoint's records
    weight_norms: list[list[float]]  # per chain, |W1| and |W2| (the released logs' W_norm and a_norm)


def recorded_check(directory: Path) -> Recorded | None:
    """:class:`Recorded` from the newest checkpoint under ``directory`` and the run's ``exp_a.yaml``
    (``None`` without a checkpoint)."""
    checkpoint = last_checkpoint(directory)
    if checkpoint is None:
        return None
    cfg = yaml.safe_load((directory / "exp_a.yaml").read_text())
    (check_args,) = [c["init_args"] for c in cfg["trainer"]["callbacks"] if c["class_path"].endswith("ThermalizationCheck")]
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    check = ThermalizationCheck(**check_args)
    check.load_state_dict(state["callbacks"]["ThermalizationCheck"])
    first, second = (state["state_dict"][f"chains.net__layers__{j}__weight"].flatten(1).norm(dim=1) for j in (0, 1))
    return Recorded(checkpoint, state["global_step"], check, torch.stack([first, second], 1).tolist())


def informed_records(check: ThermalizationCheck) -> dict[int, float] | None:
    """step -> mean test MSE of the informed chains that ``check`` read from another run (``--informed-from``);
    ``None`` when its run ran its own."""
    traces = check.traces()
    if not traces["reference_test_mse"].numel():
        return None
    return dict(zip(traces["reference_steps"].tolist(), traces["reference_test_mse"].mean(0).tolist()))


def chain_settings(cfg: dict) -> dict:
    """What a continued run must share with the run it continues: teacher, data, target, chains, records
    (not its length, burn-in or checkpoint interval)."""
    model = {k: v for k, v in cfg["model"]["init_args"].items() if k != "burn_in"}
    return {"seed": cfg["seed_everything"], "data": cfg["data"], "model": model, "callbacks": cfg["trainer"]["callbacks"]}


def fit(directory: Path, cfg: dict, resume: bool) -> dict:
    """Run (or with ``resume`` continue) one init's chains; its summary.json's steps, time and metrics."""
    path = directory / "exp_a.yaml"
    if resume and path.exists() and chain_settings(yaml.safe_load(path.read_text())) != chain_settings(cfg):
        raise SystemExit(f"--resume: {path} was run with other settings; pass the same --data, --seed, --chains, "
                         "--every, --informed-from, --num-train and --num-test")
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    checkpoint = last_checkpoint(directory) if resume else None
    lit_bayes(["fit", "-c", str(path), "--wandb", "false", "--trainer.enable_progress_bar", "false",
               "--trainer.default_root_dir", str(directory), "--summary.directory", str(directory),
               *(["--ckpt_path", str(checkpoint)] if checkpoint else [])])
    summary = json.loads((directory / "summary.json").read_text())
    health = summary.get("health", {})
    return {"steps": summary["steps"], "wall_time_s": summary["wall_time_s"],
            "ours": {k.split("/", 1)[1]: v for k, v in summary["metrics"].items() if k.startswith("thermalization/")},
            "verdict": health.get("verdict"), "verdict_reasons": [f"{r['code']}: {r['message']}"
                                                                  for r in health.get("reasons", [])]}


def report(recorded: Recorded | None, directory: Path) -> dict:
    """The thermalization metrics of the records of :func:`recorded_check` (NaN as None, as summary.json
    has them)."""
    if recorded is None:
        raise SystemExit(f"--report: no version_*/checkpoints/last.ckpt under {directory}")
    metrics = recorded.check.summary_metrics()
    return {"steps": recorded.step, "wall_time_s": None, "checkpoint": str(recorded.checkpoint),
            "ours": {k.split("/", 1)[1]: v if math.isfinite(v) else None for k, v in metrics.items()},
            "verdict": None, "verdict_reasons": []}  # the health verdict is assessed when a fit ends


def show(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "never"
    return value if isinstance(value, str) else f"{value:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inits", nargs="+", default=["zeros", "prior"], choices=["zeros", "prior"])
    parser.add_argument("--steps", type=int, help="sweeps per run (default: the recipe's 200,000)")
    parser.add_argument("--every", type=int, help="sweeps between thermalization records (default 100)")
    parser.add_argument("--rhat-block", type=int, help="records per R-hat block (default the recipe's 50)")
    parser.add_argument("--chains", type=int,
                        help="chains per run, the first informed (default 4); all uninformed with --informed-from")
    parser.add_argument("--informed-from", type=Path, metavar="CKPT",
                        help="run no informed chain (every chain uninformed): read it from this checkpoint of an "
                             "earlier run on the same teacher and data")
    parser.add_argument("--seed", type=int, help="seed of the teacher, the data and the chains (default 0)")
    parser.add_argument("--data", choices=["random", "released"], default="random",
                        help="a teacher drawn from --seed (default) or the paper's own (released_teacher.py)")
    parser.add_argument("--num-train", type=int, help="training points (default the paper's 2084)")
    parser.add_argument("--num-test", type=int, help="test points (default 2000)")
    parser.add_argument("--root", default="runs/noisy_gibbs_exp_a", help="where runs and exp_a.json go")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--resume", action="store_true", help="continue each init from its newest checkpoint")
    action.add_argument("--report", action="store_true", help="run nothing: the table from the newest checkpoints")
    args = parser.parse_args()
    if args.data == "released" and (args.num_train is not None or args.num_test is not None):
        parser.error("--num-train and --num-test: the released data set has the paper's sizes only")
    root = Path(args.root)
    results = {}
    for init in args.inits:
        directory = root / init
        directory.mkdir(parents=True, exist_ok=True)
        fitted = None if args.report else fit(directory, config(args, init), args.resume)
        recorded = recorded_check(directory)
        informed = informed_records(recorded.check) if recorded is not None else None
        results[init] = {**(fitted or report(recorded, directory)), "paper": PAPER[init],
                         "trace": trace_rows(directory, informed), "informed_read": informed is not None,
                         "weight_norms": recorded.weight_norms if recorded is not None else None,
                         "rhat_percentiles": rhat_percentile_rows(recorded.check) if recorded is not None else []}
    print("\nExp. A (d = 50, K = 10, Delta = 1e-4): ours vs the paper (Fig. 1, App. B, released logs)")
    print(f"{'init':>6} {'sweeps':>7} {'':>6} " + " ".join(f"{c:>20}" for c in COLUMNS))
    for init, result in results.items():
        ours = result["ours"]
        cells = [show(ours.get(c)) for c in COLUMNS]
        if result["informed_read"]:  # R-hat with the informed chain needs its outputs, which a read run lacks
            cells[COLUMNS.index("rhat_step")] = "n/a (read)"
        print(f"{init:>6} {result['steps']:>7} {'ours':>6} " + " ".join(f"{c:>20}" for c in cells))
        print(f"{'':>6} {'':>7} {'paper':>6} " + " ".join(f"{show(result['paper'][c]):>20}" for c in COLUMNS))
    for init, result in results.items():  # over all chains, the informed one included, after the burn-in
        verdict = result["verdict"] or "not assessed (--report: assessed when a fit ends)"
        print(f"{init}: health verdict {verdict}" + "".join(f"\n  {r}" for r in result["verdict_reasons"]))
    for init, result in results.items():
        released = " | released logs: sweep, informed, uninformed" if args.data == "released" else ""
        took = f"{result['wall_time_s']:.0f} s" if result["wall_time_s"] is not None else result["checkpoint"]
        print(f"\n{init}: test MSE against the teacher (step, informed, uninformed mean{released}), {took}")
        for step, informed, uninformed in result["trace"]:
            paper = ""
            if args.data == "released":
                logged, paper_informed, paper_uninformed = released_test_mse(step, init)
                paper = f" | {logged:>8} {paper_informed:>11.3e} {paper_uninformed:>11.3e}"
            read = f"{informed:>11.3e}" if informed is not None else f"{'-':>11}"
            print(f"  {step:>8} {read} {uninformed:>11.3e}{paper}")
        if result["weight_norms"] is not None:
            norms = ", ".join(f"{w1:.3f} / {w2:.3f}" for w1, w2 in result["weight_norms"])
            print(f"  |W1| / |W2| of each chain at its last checkpoint: {norms}")
            if args.data == "released":
                print(f"  released logs at sweep {RELEASED_NORMS_SWEEP}: "
                      + ", ".join(f"{k} {w1:.3f} / {w2:.3f}" for k, (w1, w2) in RELEASED_NORMS.items()))
        if result["rhat_percentiles"]:
            print(f"  R-hat over the test points by block (Fig. 4; {result['rhat_percentiles'][0][1]} chains): "
                  "step, mean, " + " / ".join(f"p{q}" for q in RHAT_PERCENTILES))
            for step, _, values in result["rhat_percentiles"]:
                print(f"  {step:>8} " + " ".join(f"{v:>7.3f}" for v in values))
    (root / "exp_a.json").write_text(json.dumps(results, indent=2))
    print(json.dumps({init: {"steps": r["steps"], **{c: r["ours"].get(c) for c in COLUMNS}}
                      for init, r in results.items()}))


if __name__ == "__main__":
    main()
