"""Exp. C of "Gibbs Sampling the Posterior of Neural Networks" (noisy-gibbs spec §6.3, Sec. V.2, Fig. 3,
App. J): the Gibbs sampler on the MNIST MLP or CNN, or its HMC / MALA baseline on the classical posterior
(spec §5), the test accuracy of the chain's state against steps and wall time, beside the paper's stationary
accuracies.

    python recipes/noisy_gibbs/exp_c.py --model mlp --sweeps 40000             # needs data/MNIST/raw
    python recipes/noisy_gibbs/exp_c.py --model mlp --sweeps 80000 --resume    # continue the same chain
    python recipes/noisy_gibbs/exp_c.py --model mlp --sampler mala             # the MALA baseline
    python recipes/noisy_gibbs/exp_c.py --model cnn --num-train 10000          # a seeded 10,000-image subset
    python recipes/noisy_gibbs/exp_c.py --sampler hmc --model.init_args.num_chains 4 --trainer.accelerator gpu
                                                   # other arguments go to lit-bayes: 4 chains for R-hat

It runs ``exp_c_<model>.yaml`` (Gibbs: zero init, Delta = 2 for the MLP, 100 for the CNN) or
``exp_c_<model>_<sampler>.yaml`` (HMC, MALA: the paper's fixed steps and starts, classical Delta = 2 and 10)
with no burn-in and a draw kept every ``--thinning`` steps (a Gibbs sweep or an HMC / MALA transition):
Fig. 3 plots the test error of the current state against time, so the trace from step 1 is the point. Every
kept draw's noiseless network (§3) is scored on the first ``--test-images`` test images (the paper: 5000,
[code]); the script prints a log-spaced trace and the mean accuracy of the third and the last quarter of the
draws (the chain counts as stationary when they differ by at most ``--tolerance``), beside the stationary
per-sample test accuracy of the paper's released logs (MLP: Gibbs 0.91, MALA 0.914, HMC 0.912; CNN: 0.874,
0.869, 0.871) and the times it reports (MLP: all three stationary at ~500 s; CNN: Gibbs ~800 s, HMC and MALA
~100 s; its hardware is not stated). The accuracy of the predictive averaged over all kept draws is the
run's ``test/accuracy``. Everything goes to ``exp_c_<run>.json`` under ``--out``, ``<run>`` being the
config's name without ``exp_c_``, with ``_n<N>`` appended for a ``--num-train N`` subset (a reduction of the
paper's full 60,000-image batch, stated in the JSON as ``num_train``; the test set is unchanged). The trace
is chain 0's. The health verdict (over all the run's chains, with R-hat when it has several) is that of the
last ``--verdict-last`` fraction of the kept draws (default the second half), the draws before it being the
transient the trace shows; it is printed with its reasons and stored as ``verdict`` (``verdict_all_draws``:
that of every kept draw, as the run's summary.json has it).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from lit_bayes.callbacks import PosteriorSamples, RunHealth
from lit_bayes.cli import LitBayesCLI, fit_and_test, last_checkpoint, run_summary

HERE = Path(__file__).resolve().parent
PAPER = {"mlp": {"gibbs": 0.91, "mala": 0.914, "hmc": 0.912, "stationary_s": {"gibbs": 500, "hmc": 500, "mala": 500}},
         "cnn": {"gibbs": 0.874, "mala": 0.869, "hmc": 0.871, "stationary_s": {"gibbs": 800, "hmc": 100, "mala": 100}}}
SAMPLERS = {"gibbs": "Gibbs", "hmc": "HMC", "mala": "MALA"}
# default (steps, thinning): Gibbs ~0.3 s per MLP sweep on one core here; one HMC step is 200 (MLP) or 50
# (CNN) full-batch gradients; MALA one, run as long as the paper's released MALA files (~2e6 steps)
DEFAULT_LENGTH = {"gibbs": (40_000, 500), "hmc": (2_000, 20), "mala": (2_000_000, 20_000)}


@torch.no_grad()
def draw_accuracies(cli: LitBayesCLI, test_images: int, chunk: int = 100) -> list[float]:
    """Test accuracy of every kept draw of chain 0 on its own: the argmax of its noiseless class scores
    (``sampler.outputs``; the probit class probabilities rank the classes as the scores do, so their
    quadrature, ~C^2 normal CDFs per draw and image, is not needed)."""
    (store,) = [c for c in cli.trainer.callbacks if isinstance(c, PosteriorSamples)]
    sampler, draws = cli.model, store.trace()[0]
    x, y = (t[:test_images].to(sampler.device) for t in cli.datamodule.test_data.tensors)
    out = []
    for start in range(0, len(draws), chunk):
        samples = sampler.chains.unflatten(draws[start:start + chunk].to(sampler.device))
        out += (sampler.outputs(samples, x).argmax(-1) == y).float().mean(1).tolist()
    return out


def log_spaced(count: int, points: int = 12) -> list[int]:
    """Indices 0 .. count - 1 at about ``points`` log-spaced positions, the last included."""
    return sorted({min(count - 1, round(math.exp(k * math.log(count) / (points - 1))) - 1) for k in range(points)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(PAPER), default="mlp")
    parser.add_argument("--sampler", choices=list(SAMPLERS), default="gibbs",
                        help="Gibbs on the intermediate posterior, or HMC / MALA on the classical one")
    parser.add_argument("--sweeps", type=int, default=None,
                        help="steps in all (default: Gibbs 40,000, the paper's run 300,000; HMC 2,000; MALA 2,000,000)")
    parser.add_argument("--thinning", type=int, default=None,
                        help="steps between kept draws (default: Gibbs 500, HMC 20, MALA 20,000)")
    parser.add_argument("--test-images", type=int, default=5000, help="the first N test images score each draw")
    parser.add_argument("--tolerance", type=float, default=0.005,
                        help="largest difference of the third and last quarter's mean accuracy of a stationary chain")
    parser.add_argument("--num-train", type=int, default=None,
                        help="train on a seeded random subset of this many images (default: all 60,000)")
    parser.add_argument("--root", default="data", help="the folder holding MNIST/raw")
    parser.add_argument("--out", default="runs/noisy_gibbs_exp_c")
    parser.add_argument("--resume", action="store_true", help="continue the chain from its last.ckpt under --out")
    parser.add_argument("--verdict-last", type=float, default=0.5,
                        help="the health verdict is of this last fraction of the kept draws (the rest: the transient)")
    args, extra = parser.parse_known_args()  # the rest goes to lit-bayes, e.g. --model.init_args.num_chains 4
    default_sweeps, default_thinning = DEFAULT_LENGTH[args.sampler]
    args.sweeps = default_sweeps if args.sweeps is None else args.sweeps
    args.thinning = default_thinning if args.thinning is None else args.thinning
    for name in ("sweeps", "thinning", "test_images", "num_train"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not 0.0 < args.verdict_last <= 1.0:
        parser.error(f"--verdict-last must be in (0, 1], got {args.verdict_last}")
    if args.sweeps < 4 * args.thinning:
        parser.error(f"--sweeps {args.sweeps} keeps fewer than 4 draws at --thinning {args.thinning}")
    config = args.model if args.sampler == "gibbs" else f"{args.model}_{args.sampler}"
    run = config if args.num_train is None else f"{config}_n{args.num_train}"
    root = Path(args.out) / run
    checkpoint = last_checkpoint(root) if args.resume else None
    start = torch.load(checkpoint, map_location="cpu", weights_only=True)["global_step"] if checkpoint else 0
    subset = [] if args.num_train is None else ["--data.init_args.num_train", str(args.num_train)]
    cli = fit_and_test(HERE / f"exp_c_{config}.yaml", [*subset,
        "--data.init_args.root", args.root, "--trainer.max_epochs", str(args.sweeps),
        "--model.init_args.burn_in", "0", "--model.init_args.thinning", str(args.thinning),
        "--samples.max_draws", str(math.ceil(args.sweeps / args.thinning)),
        "--checkpoint.every_n_epochs", str(min(args.sweeps, 4 * args.thinning)),
        "--trainer.default_root_dir", str(root), *extra],
        ckpt_path=checkpoint)
    summary = run_summary(cli)
    (monitor,) = [c for c in cli.trainer.callbacks if isinstance(c, RunHealth)]
    health = monitor.assess_last(cli.trainer, cli.model, args.verdict_last)
    accuracy = draw_accuracies(cli, args.test_images)
    ran = summary["steps"] - start  # this process's sweeps: their time (with the test's) gives the time axis;
    # a resume that ran none (to report a finished chain again) takes the average over the run's segments
    seconds_per_sweep = (summary["wall_time_segment_s"] / ran if ran > 0
                         else summary["wall_time_s"] / summary["steps"] if summary["steps"] else None)
    sweeps = [1 + i * args.thinning for i in range(len(accuracy))]  # SamplerModule.is_sample_step, burn-in 0
    quarter = len(accuracy) // 4  # 0 when a run stopped early (--trainer.max_time) kept fewer than 4 draws
    third, last = (sum(part) / len(part) if quarter else None
                   for part in (accuracy[2 * quarter:3 * quarter], accuracy[-quarter:]))
    paper = PAPER[args.model]
    result = {"model": args.model, "sampler": args.sampler, "num_train": len(cli.datamodule.train_data),
              "sweeps": summary["steps"],
              "seconds_per_sweep": seconds_per_sweep,
              "trace": [{"sweep": s, "accuracy": a} for s, a in zip(sweeps, accuracy)],
              "third_quarter": third, "last_quarter": last,
              "stationary": abs(last - third) <= args.tolerance if quarter else None,
              "predictive_accuracy": summary["metrics"]["test/accuracy"], "verdict": health.verdict,
              "verdict_reasons": health.reason_lines(),
              "verdict_all_draws": summary["health"]["verdict"], "paper": paper}
    print(f"\nExp. C ({args.model.upper()}, {SAMPLERS[args.sampler]}): test accuracy of the kept draws on the first "
          f"{min(args.test_images, len(cli.datamodule.test_data))} test images")
    print(f"{'step':>8} {'~seconds':>9} {'accuracy':>9}")
    for i in log_spaced(len(accuracy)):
        seconds = f"{sweeps[i] * seconds_per_sweep:.0f}" if seconds_per_sweep else "-"
        print(f"{sweeps[i]:>8} {seconds:>9} {accuracy[i]:>9.4f}")
    stationarity = (f"third / last quarter of the draws: {third:.4f} / {last:.4f} "
                    f"({'stationary' if result['stationary'] else 'not stationary'} at tolerance {args.tolerance})"
                    if quarter else f"{len(accuracy)} draws kept, fewer than 4: stationarity not assessed")
    print(f"{stationarity}; predictive over all draws ({len(cli.datamodule.test_data)} test images): "
          f"{result['predictive_accuracy']:.4f}")
    reasons = "".join(f"\n  {reason}" for reason in result["verdict_reasons"])
    print(f"health verdict of the last {args.verdict_last:g} of the draws ({health.chains} chain(s), "
          f"{health.draws_per_chain} draws each): {health.verdict}{reasons}")
    print(f"paper (released logs, stationary): Gibbs {paper['gibbs']}, MALA {paper['mala']}, HMC {paper['hmc']}; "
          f"stationary after ~{paper['stationary_s']['gibbs']} s (Gibbs), "
          f"~{paper['stationary_s']['hmc']} s (HMC, MALA)")
    (Path(args.out) / f"exp_c_{run}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
