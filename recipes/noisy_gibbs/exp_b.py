"""Exp. B of "Gibbs Sampling the Posterior of Neural Networks" (noisy-gibbs spec §6.2, Sec. V.2, Fig. 2,
App. I): which samplers thermalize, against the noise level, on teacher-student data.

    python recipes/noisy_gibbs/exp_b.py                                  # reduced: 4 teachers, 2 noise levels, 5 s
    python recipes/noisy_gibbs/exp_b.py --teachers 72 --deltas all --budget-s 19800 --max-leapfrog 0   # the paper

Every run is a ``lit-bayes fit`` of one config per sampler family, ``exp_b_gibbs.yaml``,
``exp_b_hmc_intermediate.yaml``, ``exp_b_hmc_classical.yaml`` and ``exp_b_mala_classical.yaml``, with the
run's settings as overrides (Delta, step size, leapfrog count, teacher seed, sizes, budget as the Trainer's
``max_time``, the records' spacing); its ``summary.json`` holds the records this script reads
(``thermalization_records`` of ``ThermalizationCheck``), under ``--root``/teacher_<t>/delta_<Delta>/<algorithm>.

Setting (spec §6.1-6.2): teacher = student = 1-hidden-layer ReLU MLP with biases, d = 50 inputs, 10 hidden
units, scalar output, lambda = fan-in (50 / 10); n = 2084 training inputs X ~ N(0, 1) per teacher, noiseless
labels y = f(X, W*) (as in the paper's Fig. 2, so the informed start is only approximately at equilibrium);
2000 noiseless test points. For every teacher and noise level Delta four samplers run, each for the same
wall-clock budget on one CPU thread (the paper: 5:30 h on one core):

* ``gibbs``: NoisyGibbs on the intermediate posterior, Delta_Z = Delta_X = Delta at every layer, zero init;
* ``hmc_intermediate``: IntermediateHMC on the same joint, weights and latents from N(0, 1e-4^2);
* ``hmc_classical``: HMC on the classical posterior P(W) exp(-sum (y - f)^2 / (2 Delta)) (§3), weights N(0, 1e-4^2);
* ``mala_classical``: MALA on the classical posterior, same init (eta of Table 4 is step^2 / 2 here).

HMC and MALA use the paper's fixed step sizes and leapfrog counts per Delta (Tables 1, 2 and 4, no
adaptation, §5); ``--max-leapfrog`` caps the leapfrog count (default 100: the paper's 1000-step trajectories
take seconds per transition on this CPU, longer than the default budget). Each run holds two chains: chain 0
starts at the teacher (weights and, for the intermediate posterior, its noiseless latents; spec §4 step 4),
chain 1 is the uninformed start above. Their test MSE against the teacher, (1/n_test) sum (f(x, W*) - f(x, W))^2
(§3), is recorded at ``--records`` evenly spaced wall-clock times (``ThermalizationCheck`` with
``every_n_seconds``, and once more at the end of the run).

Thermalization (spec §4; the paper merges by eye and does not state its rule, these numbers are ours): the
merge rule of ``ThermalizationCheck`` with its defaults (:func:`lit_bayes.callbacks.thermalization.merge_band`
and :func:`~lit_bayes.callbacks.thermalization.merge_indices`, traces smoothed over ``--window`` records): the
informed chain's last half gives the equilibrium test MSE phi-bar and the band [min(q_0.05, 0.8 phi-bar),
max(q_0.95, 1.2 phi-bar)]; the uninformed chain has thermalized if from some record on its smoothed MSE stays
in the band up to 10% of the records and that record lies in the first 90% of the run. The informed chain
counts as stationary if the mean test MSE of its third and last quarter differ by at most 20%; where it is
not, the budget was too short to settle phi-bar, and the table marks the cell with *.
Printed per (algorithm, Delta): thermalized runs / teachers, mean equilibrium test MSE, mean thermalization
time of the runs that did, beside the paper's released Fig. 2-left numbers (spec §6.2 table; the paper's
equilibrium MSE is about 0.5 Delta on the intermediate and 0.33 Delta on the classical posterior).
Under the table every run's health verdict is counted and the runs not ``ok`` are named: the merge rule
and the health checks judge different things and can disagree. Everything goes to ``exp_b.json`` under ``--root``.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from lit_bayes.callbacks import AcceptanceMonitor
from lit_bayes.callbacks.thermalization import merge_band, merge_indices, trailing_mean
from lit_bayes.cli import fit_and_test, run_summary
from lit_bayes.recipe_runs import health_verdict, settings_overrides, verdict_lines

HERE = Path(__file__).resolve().parent
ALGORITHMS = ("gibbs", "hmc_intermediate", "hmc_classical", "mala_classical")
CONFIGS = {algorithm: HERE / f"exp_b_{algorithm}.yaml" for algorithm in ALGORITHMS}
DELTAS = [10 ** (-k / 3) for k in range(17)]  # 1, 4.64e-1, ..., 1e-5, 4.64e-6: three per decade (App. I)
DEFAULT_DELTAS = [1.0, 1e-1]
# Table 4 (MALA, zero init) in Delta order, the Delta-column typos fixed as in spec §6.2
MALA_ETA = [1e-5, 1e-5, 1e-5, 1e-5, 1e-5, 1e-6, 1e-7, 1e-7, 1e-7, 1e-8, 1e-8, 1e-9, 1e-9, 1e-10, 1e-10, 1e-11, 1e-11]
# spec §6.2, Fig. 2-left from the released repository: (thermalized, runs, equilibrium test MSE or None)
PAPER = {
    "1": {"hmc_intermediate": (72, 72, 0.214), "hmc_classical": (72, 72, 0.107), "mala_classical": (72, 72, 0.107)},
    "0.464": {"hmc_intermediate": (72, 72, 0.114), "hmc_classical": (70, 72, 0.0711), "mala_classical": (72, 72, None)},
    "0.215": {"hmc_intermediate": (70, 72, 0.0724), "hmc_classical": (72, 72, 0.0432), "mala_classical": (72, 72, None)},
    "0.1": {"hmc_intermediate": (72, 72, 0.0411), "hmc_classical": (72, 72, 0.0248), "mala_classical": (71, 72, None)},
    "0.0464": {"hmc_intermediate": (67, 72, 0.0218), "hmc_classical": (67, 72, 0.0132), "mala_classical": (68, 72, None)},
    "0.0215": {"hmc_intermediate": (72, 72, 0.0109), "hmc_classical": (71, 72, 0.00672), "mala_classical": (69, 72, None)},
    "0.01": {"gibbs": (72, 72, 0.00512), "hmc_intermediate": (61, 72, 0.00507), "hmc_classical": (61, 72, 0.00327),
             "mala_classical": (67, 72, None)},
    "0.00464": {"gibbs": (72, 72, 2.40e-3), "hmc_intermediate": (8, 72, 2.41e-3), "hmc_classical": (57, 72, 1.51e-3),
                "mala_classical": (59, 72, None)},
    "0.00215": {"gibbs": (70, 72, 1.11e-3), "hmc_intermediate": (16, 72, 1.13e-3), "hmc_classical": (44, 72, 7.10e-4),
                "mala_classical": (52, 72, None)},
    "0.001": {"gibbs": (59, 72, 5.13e-4), "hmc_intermediate": (16, 72, 5.19e-4), "hmc_classical": (37, 72, 3.29e-4),
              "mala_classical": (33, 72, None)},
    "0.000464": {"gibbs": (43, 72, 2.36e-4), "hmc_intermediate": (18, 72, 2.39e-4), "hmc_classical": (21, 72, 1.53e-4),
                 "mala_classical": (28, 72, None)},
    "0.000215": {"gibbs": (33, 72, 1.09e-4), "hmc_intermediate": (19, 72, 1.10e-4), "hmc_classical": (11, 72, 7.10e-5),
                 "mala_classical": (12, 72, None)},
    "0.0001": {"gibbs": (30, 72, 5.04e-5), "hmc_intermediate": (22, 72, 5.07e-5), "hmc_classical": (0, 72, 3.29e-5),
               "mala_classical": (15, 72, None)},
    "4.64e-05": {"gibbs": (17, 72, 2.36e-5), "hmc_intermediate": (16, 70, 2.20e-5), "mala_classical": (12, 72, 1.53e-5)},
    "2.15e-05": {"gibbs": (10, 72, 1.09e-5), "hmc_intermediate": (12, 72, 1.10e-5), "mala_classical": (8, 72, 7.11e-6)},
    "1e-05": {"gibbs": (4, 72, 5.54e-6), "hmc_intermediate": (4, 72, 5.0e-6), "mala_classical": (3, 66, 3.04e-6)},
    "4.64e-06": {"gibbs": (0, 72, 2.8e-6)},
}
# Fig. 2-right (classical Delta = 1e-3, intermediate 4.64e-4): mean thermalization time of the runs that did
PAPER_TIMES_S = {"hmc_classical": 130, "mala_classical": 2700, "gibbs": 3200, "hmc_intermediate": 12500}


def key(delta: float) -> str:
    """Delta to 3 significant digits, the PAPER keys."""
    return f"{float(f'{delta:.3g}'):g}"


def hyperparameters(algorithm: str, delta: float, max_leapfrog: int) -> dict:
    """The paper's fixed step size and leapfrog count at ``delta`` (Tables 1, 2, 4), L capped by ``max_leapfrog``."""
    index = min(range(len(DELTAS)), key=lambda k: abs(math.log(DELTAS[k] / delta)))
    if algorithm == "gibbs":
        return {}
    if algorithm == "mala_classical":
        return {"step_size": math.sqrt(2 * MALA_ETA[index]), "num_leapfrog": 1, "eta": MALA_ETA[index]}
    if algorithm == "hmc_intermediate":  # Table 1
        step, leapfrog = (5e-4 if index <= 6 else 5e-5), 1000
    else:  # Table 2
        step, leapfrog = ((5e-4, 20) if index <= 4 else (5e-5, 100) if index <= 6 else (5e-5, 1000))
    return {"step_size": step, "num_leapfrog": min(leapfrog, max_leapfrog) if max_leapfrog else leapfrog,
            "paper_num_leapfrog": leapfrog}


def thermalization(times: list[float], mse: torch.Tensor, window: int) -> dict:
    """Equilibrium test MSE of the informed chain and the merge of the uninformed one (module docstring)."""
    reference, low, high = merge_band(mse[:1], window)
    (merged,) = merge_indices(mse[1:], low, high, window)
    smooth = trailing_mean(mse[1:], window)
    half = len(times) // 2
    thermalized = merged is not None and merged <= 0.9 * (len(times) - 1)
    quarter = len(times) // 4
    third, fourth = float(mse[0, half:half + quarter].mean()), float(mse[0, -quarter:].mean())
    return {"equilibrium_test_mse": reference, "uninformed_final_test_mse": float(smooth[0, -1]),
            "thermalized": thermalized, "thermalization_time_s": times[merged] if thermalized else None,
            "band": [low, high], "informed_stationary": abs(third - fourth) <= 0.2 * fourth}


def overrides(algorithm: str, delta: float, teacher: int, args: argparse.Namespace, hyper: dict) -> list[str]:
    """The ``--key value`` settings of one run of ``CONFIGS[algorithm]``: Delta, the paper's step size and
    leapfrog count, the teacher (data and chain seeds), the sizes, the budget and the records' spacing."""
    model = "model.init_args."
    settings: dict = {"seed_everything": teacher, f"{model}seed": teacher, "data.init_args.seed": teacher,
                      "data.init_args.num_train": args.num_train, "data.init_args.num_test": args.num_test,
                      "trainer.max_time": {"milliseconds": max(1, round(1000 * args.budget_s))},
                      # ThermalizationCheck, the configs' last callback
                      "trainer.callbacks.init_args.every_n_seconds": args.budget_s / args.records,
                      "trainer.callbacks.init_args.window": args.window}
    if algorithm in ("gibbs", "hmc_intermediate"):  # Delta_Z = Delta_X = Delta at every layer
        settings.update({f"{model}model.init_args.delta_z": delta, f"{model}model.init_args.delta_x": delta})
    else:  # the classical posterior's Gaussian likelihood of variance Delta
        settings[f"{model}likelihood.init_args.noise_std"] = math.sqrt(delta)
    if "step_size" in hyper:
        settings[f"{model}step_size"] = hyper["step_size"]
    if algorithm in ("hmc_intermediate", "hmc_classical"):
        settings[f"{model}num_leapfrog"] = hyper["num_leapfrog"]
    return settings_overrides(settings)


def run(algorithm: str, delta: float, teacher: int, args: argparse.Namespace) -> dict:
    """One ``lit-bayes fit`` run of ``algorithm`` at ``delta`` on teacher ``teacher``: two chains (informed,
    uninformed) for the budget; its records read back from its ``summary.json`` and judged by the merge rule."""
    hyper = hyperparameters(algorithm, delta, args.max_leapfrog)
    directory = Path(args.root) / f"teacher_{teacher}" / f"delta_{key(delta)}" / algorithm
    (directory / "summary.json").unlink(missing_ok=True)  # a run of an earlier call would be merged into
    cli = fit_and_test(CONFIGS[algorithm], [*overrides(algorithm, delta, teacher, args, hyper),
                                            "--trainer.logger", "false", "--trainer.default_root_dir", str(directory),
                                            "--summary.directory", str(directory)])
    summary = run_summary(cli)
    records = summary["thermalization_records"]
    times, mse = records["times_s"], torch.tensor(records["test_mse"], dtype=torch.float64)
    result = thermalization(times, mse, args.window)
    monitors = [c for c in cli.trainer.callbacks if isinstance(c, AcceptanceMonitor)]
    last = monitors[0].last if monitors else None
    acceptance = None if last is None or not last["proposed"] else (last["accepted"][:, 0] / last["proposed"]).tolist()
    result.update(algorithm=algorithm, delta=delta, steps=summary["steps"], wall_s=times[-1], hyperparameters=hyper,
                  verdict=health_verdict(summary),
                  trace_s=times, trace_test_mse=mse.tolist(), acceptance=acceptance, directory=str(directory))
    return result


def summarize(runs: list[dict]) -> dict:
    """Per (Delta, algorithm): thermalized / runs, mean equilibrium test MSE, mean thermalization time."""
    table: dict = {}
    for r in runs:
        table.setdefault(key(r["delta"]), {}).setdefault(r["algorithm"], []).append(r)
    out = {}
    for delta, by_algorithm in table.items():
        for algorithm, rows in by_algorithm.items():
            times = [r["thermalization_time_s"] for r in rows if r["thermalized"]]
            out.setdefault(delta, {})[algorithm] = {
                "thermalized": sum(r["thermalized"] for r in rows), "runs": len(rows),
                "equilibrium_test_mse": sum(r["equilibrium_test_mse"] for r in rows) / len(rows),
                "mean_thermalization_time_s": sum(times) / len(times) if times else None,
                "informed_not_stationary": sum(not r["informed_stationary"] for r in rows),
                "mean_steps": sum(r["steps"] for r in rows) / len(rows)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teachers", type=int, default=4, help="teachers (data sets) per Delta; the paper: 72")
    parser.add_argument("--deltas", nargs="+", default=[str(d) for d in DEFAULT_DELTAS],
                        help="noise levels, or 'all' for the paper's grid 1 ... 4.64e-6 (three per decade)")
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    parser.add_argument("--budget-s", type=float, default=5.0, help="wall-clock seconds per run (the paper: 19800)")
    parser.add_argument("--max-leapfrog", type=int, default=100, help="cap on HMC leapfrog steps (0: the paper's)")
    parser.add_argument("--records", type=int, default=100, help="test-MSE records per run")
    parser.add_argument("--window", type=int, default=5, help="records in the trailing mean of the merge rule")
    parser.add_argument("--num-train", type=int, default=2084, help="training points per teacher (the paper: 2084)")
    parser.add_argument("--num-test", type=int, default=2000, help="test points (the paper's code: 2000)")
    parser.add_argument("--root", default="runs/noisy_gibbs_exp_b", help="where the runs and exp_b.json go")
    args = parser.parse_args()
    for name in ("teachers", "records", "window", "num_train", "num_test"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.budget_s <= 0 or args.max_leapfrog < 0:
        parser.error("--budget-s must be > 0 and --max-leapfrog >= 0")
    deltas = DELTAS if args.deltas == ["all"] else [float(d) for d in args.deltas]
    if any(not d > 0 for d in deltas):
        parser.error("--deltas must be positive numbers or 'all'")
    root = Path(args.root)  # each config runs on one CPU thread (its `threads: 1`), as the paper's one core
    root.mkdir(parents=True, exist_ok=True)
    runs, started = [], time.perf_counter()
    for teacher in range(args.teachers):  # the teacher and data of seed `teacher`, noiseless labels
        for delta in deltas:
            for algorithm in args.algorithms:
                result = run(algorithm, delta, teacher, args)
                runs.append({**result, "teacher": teacher})
                print(f"teacher {teacher} Delta {key(delta)} {algorithm}: {result['steps']} steps, equilibrium test "
                      f"MSE {result['equilibrium_test_mse']:.3g}, uninformed {result['uninformed_final_test_mse']:.3g}"
                      f", thermalized {result['thermalized']}, verdict {result['verdict']}", flush=True)
    summary = summarize(runs)
    print(f"\nExp. B ({args.teachers} teachers, {args.budget_s:g} s per run, n = {args.num_train}): thermalized / runs "
          "(equilibrium test MSE) [mean thermalization time], ours vs the paper (72 teachers, 19800 s per run)")
    print(f"{'Delta':>9} {'':>6} " + " ".join(f"{a:>30}" for a in args.algorithms))
    for delta in map(key, deltas):
        ours = summary[delta]
        cells = []
        for a in args.algorithms:
            s = ours[a]
            t = s["mean_thermalization_time_s"]
            cells.append(f"{s['thermalized']}/{s['runs']} ({s['equilibrium_test_mse']:.3g})"
                         + (f" [{t:.2g} s]" if t is not None else " [-]")
                         + ("*" * bool(s["informed_not_stationary"])))
        print(f"{delta:>9} {'ours':>6} " + " ".join(f"{c:>30}" for c in cells))
        paper = PAPER.get(delta, {})
        cells = [f"{paper[a][0]}/{paper[a][1]}" + (f" ({paper[a][2]:.3g})" if paper[a][2] else "")
                 if a in paper else "-" for a in args.algorithms]
        print(f"{'':>9} {'paper':>6} " + " ".join(f"{c:>30}" for c in cells))
    print("* some informed chains not yet stationary (mean test MSE of their third and last quarter differ by "
          "> 20%): the equilibrium value and the merge are not settled there; run longer (--budget-s)")
    print("paper trends: every algorithm thermalizes in nearly every run at high noise (equilibrium MSE >~ 5e-3), "
          "the fractions fall as Delta falls, Gibbs highest over most of the range; equilibrium test MSE ~0.5 Delta "
          "(intermediate), ~0.33 Delta (classical); Fig. 2-right mean thermalization times (s): "
          + ", ".join(f"{a} {t}" for a, t in PAPER_TIMES_S.items()))
    verdicts = {f"teacher {r['teacher']} Delta {key(r['delta'])} {r['algorithm']}": r["verdict"] for r in runs}
    print(*verdict_lines(verdicts,
                         "the health checks do not pass its two chains, whatever the merge rule says of them (the "
                         "informed and uninformed starts disagreeing is what thermalization means); run longer "
                         "(--budget-s)"), sep="\n")
    ratio = {a: [s[a]["equilibrium_test_mse"] / float(d) for d, s in summary.items() if a in s] for a in args.algorithms}
    print("ours, equilibrium test MSE / Delta: " + ", ".join(
        f"{a} {sum(v) / len(v):.2f}" for a, v in ratio.items() if v))
    payload = {"settings": {**vars(args), "deltas": deltas}, "wall_time_s": time.perf_counter() - started,
               "summary": summary, "paper": PAPER, "paper_thermalization_times_s": PAPER_TIMES_S, "runs": runs}
    (root / "exp_b.json").write_text(json.dumps(payload, indent=1))
    print(f"wrote {root / 'exp_b.json'} ({payload['wall_time_s']:.0f} s)")


if __name__ == "__main__":
    main()
