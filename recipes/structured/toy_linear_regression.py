"""Fig. 2 of the structured SG-MCMC paper: imposed independence on a linear-regression toy.

Runs ``toy_sd_sgld.yaml`` (S_d-SGLD, partition (ii)) and its other columns through ``lit-bayes fit``
(the overrides of ``METHODS``): SGLD; S-SGLD and S_d-SGLD (Bernoulli, rho = 0.5, K = 4) with the
partitions (i) theta_1 = (w1, w2), theta_2 = (w3, b) and (ii) fully factorised. Each run keeps its
draws on disk (``<out>/<method>/samples``) and writes its ``summary.json`` (with the
:class:`lit_bayes.callbacks.CoordinateMixing` ESS/IAC); this script reads them and prints the
sampled correlations of (w1, w2) and (w1, w3) (pooled over chains and within chains) and standard
deviations beside their targets: the exact posterior for SGLD, the optimum of Theorem 1/2 for the
partition (blocks independent, each with the inverse of its precision block) for S-SGLD and S_d-SGLD.
The choices the paper leaves open are stated in ``toy_sd_sgld.yaml``. Fig. 2 holds no numbers;
the paper's qualitative claims are printed beside ours. Writes ``<out>/summary.json`` and the
scatter plots ``<out>/fig2.png``. Each column shows its run's health verdict; a line in capitals names the
columns whose verdict is not ok (at the default length all five: their chains do not yet agree).

    python recipes/structured/toy_linear_regression.py [--steps 4000] [--out runs/structured/toy]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import yaml

from lit_bayes.callbacks import read_disk_store
from lit_bayes.data import CorrelatedLinearRegression
from lit_bayes.recipe_runs import fit_cell, health_verdict, settings_overrides, verdict_lines

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "toy_sd_sgld.yaml"
PAPER = {
    "map": [0.52, 0.31, 0.47, 0.84],
    "claims": {
        "SGLD": "joint: correlations of (w1,w2) and (w1,w3) kept",
        "S-SGLD (i)": "(w1,w2) same group: correlation kept; (w1,w3) across groups: vanishes",
        "S-SGLD (ii)": "fully factorised: both vanish, smallest variances (VI-like)",
        "S_d-SGLD (i)": "like S-SGLD (i), slightly higher variance, very minor residual cross-group correlation",
        "S_d-SGLD (ii)": "like S-SGLD (ii), slightly higher variance",
    },
}
GROUPS_I = [0, 0, 1, 1]  # flat order of nn.Linear(3, 1): w1, w2, w3, b
PARTITION_I = {"model.init_args.partition": "user", "model.init_args.group_ids": GROUPS_I}
METHODS = {  # overrides of toy_sd_sgld.yaml, and the partition whose optimum is the target
    "SGLD": ({"model.class_path": "lit_bayes.SGMCMC"}, None),
    "S-SGLD (i)": ({"model.init_args.mode": "structured", **PARTITION_I}, GROUPS_I),
    "S-SGLD (ii)": ({"model.init_args.mode": "structured"}, [0, 1, 2, 3]),
    "S_d-SGLD (i)": (PARTITION_I, GROUPS_I),
    "S_d-SGLD (ii)": ({}, [0, 1, 2, 3]),
}
NAMES = ["w1", "w2", "w3", "b"]


def exact_posterior(x, y):
    """Mean, covariance and precision of the conjugate posterior of (w, b): prior N(0, I), noise variance 1."""
    design = torch.cat([x, torch.ones(x.shape[0], 1)], dim=1).double()
    precision = design.T @ design + torch.eye(4, dtype=torch.float64)
    cov = torch.linalg.inv(precision)
    return cov @ design.T @ y.double(), cov, precision


def corr(cov, i, j):
    return float(cov[i, j] / (cov[i, i] * cov[j, j]).sqrt())


def structured_optimum(precision, group_ids):
    """Covariance of the optimum q = prod_i q_i of Theorem 1/2 for a Gaussian target: each
    block is N(mu_block, inverse of the block's precision), blocks independent."""
    ids = torch.as_tensor(group_ids)
    cov = torch.zeros_like(precision)
    for g in ids.unique():
        block = (ids == g).nonzero().flatten()
        cov[block.unsqueeze(1), block] = torch.linalg.inv(precision[block.unsqueeze(1), block])
    return cov


def summarise(trace, target_cov):
    """Pooled and within-chain statistics of a trace (chains, draws, 4) beside a target covariance.

    The pooled correlation also holds the spread of the chains' means; for the structured
    chains that spread is the slow convergence of the mean-field fixed point through the
    buffer (each chain's buffer drives its own mean), so the within-chain correlation (the
    average over chains of each chain's own) is the one that shows q's independence."""
    pooled = torch.cov(trace.reshape(-1, 4).T)
    within = torch.stack([torch.cov(chain.T) for chain in trace]).mean(0)
    return {
        "corr_w1_w2": corr(pooled, 0, 1), "corr_w1_w3": corr(pooled, 0, 2),
        "corr_w1_w2_within": corr(within, 0, 1), "corr_w1_w3_within": corr(within, 0, 2),
        "target_corr_w1_w2": corr(target_cov, 0, 1), "target_corr_w1_w3": corr(target_cov, 0, 2),
        "mean": trace.reshape(-1, 4).mean(0).tolist(),
        "std": pooled.diagonal().sqrt().tolist(), "std_within": within.diagonal().sqrt().tolist(),
        "target_std": target_cov.diagonal().sqrt().tolist(),
    }


def plot(traces, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(traces), figsize=(3.2 * len(traces), 6.2), sharex="row", sharey="row",
                             squeeze=False)
    for col, (name, trace) in enumerate(traces.items()):
        flat = trace.reshape(-1, 4)[:: max(1, trace.shape[0] * trace.shape[1] // 3000)]
        for row, j in enumerate((1, 2)):
            ax = axes[row, col]
            ax.scatter(flat[:, 0], flat[:, j], s=2, alpha=0.3)
            ax.set_xlabel("w1")
            ax.set_ylabel(NAMES[j])
            if row == 0:
                ax.set_title(name)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--burn-in", type=int, default=500, help="steps; also the buffer's start")
    parser.add_argument("--chains", type=int, default=16)
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of the columns")
    parser.add_argument("--out", type=Path, default=Path("runs/structured/toy"))
    parser.add_argument("--rerun", action="store_true", help="run cells again even when their summary exists")
    args, extra = parser.parse_known_args(argv)  # the rest goes to lit-bayes, e.g. --model.init_args.step_size=1e-4
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"--methods: unknown {unknown}; allowed: {list(METHODS)}")
    common = settings_overrides({"trainer.max_epochs": args.steps, "trainer.check_val_every_n_epoch": args.steps,
                                 "model.init_args.burn_in": args.burn_in, "model.init_args.num_chains": args.chains})
    buffer_start = settings_overrides({"model.init_args.buffer_start": args.burn_in})  # S and S_d only

    summaries, traces = {}, {}
    for name in methods:
        overrides, _ = METHODS[name]
        directory = args.out / name.replace(" ", "_").replace("(", "").replace(")", "")
        # the class switch must come first: the structured options then land on StructuredSGMCMC
        structured = [] if name == "SGLD" else buffer_start
        summaries[name] = fit_cell(CONFIG, directory, [*settings_overrides(overrides), *common, *structured, *extra],
                                   args.rerun)
        traces[name] = read_disk_store(directory / "samples").double()
        config = yaml.safe_load((directory / "config.yaml").read_text())

    data = CorrelatedLinearRegression(**config["data"]["init_args"])
    data.setup()
    mean, cov, precision = exact_posterior(*data.train_data.tensors)
    rows = {}
    for name, trace in traces.items():
        groups = METHODS[name][1]
        target = cov if groups is None else structured_optimum(precision, groups)
        metrics = summaries[name]["metrics"]
        rows[name] = {**summarise(trace, target), "target": "joint" if groups is None else f"optimum {groups}",
                      "ess_median": metrics.get("mixing/ess_median"), "iac_median": metrics.get("mixing/iac_median"),
                      "wall_time_s": summaries[name]["wall_time_s"], "verdict": health_verdict(summaries[name]),
                      "paper_claim": PAPER["claims"][name]}
    exact = {"mean": mean.tolist(), "corr_w1_w2": corr(cov, 0, 1), "corr_w1_w3": corr(cov, 0, 2),
             "std": cov.diagonal().sqrt().tolist(), "mean_field_std": (1.0 / precision.diagonal()).sqrt().tolist()}

    print(f"exact posterior mean {[round(v, 3) for v in exact['mean']]} (paper's MAP, its x unknown: {PAPER['map']})")
    print("targets: SGLD the exact posterior; S-SGLD (i)/(ii) the optimum of Theorem 1/2 for that partition;")
    print("S_d-SGLD (rho = 0.5) lies between the two (it is shown beside the S optimum of its partition).")
    print(f"{'method':<14}{'corr(w1,w2) pooled/within/target':>34}{'corr(w1,w3) pooled/within/target':>34}"
          f"  {'std w1 within/target':<22}{'ESS':>6}{'IAC':>7}{'time':>7}  verdict")
    for name, row in rows.items():
        c12 = f"{row['corr_w1_w2']:+.2f} / {row['corr_w1_w2_within']:+.2f} / {row['target_corr_w1_w2']:+.2f}"
        c13 = f"{row['corr_w1_w3']:+.2f} / {row['corr_w1_w3_within']:+.2f} / {row['target_corr_w1_w3']:+.2f}"
        std = f"{row['std_within'][0]:.3f} / {row['target_std'][0]:.3f}"
        ess, iac = (float("nan") if v is None else v for v in (row["ess_median"], row["iac_median"]))
        print(f"{name:<14}{c12:>34}{c13:>34}  {std:<22}{ess:>6.0f}{iac:>7.1f}{row['wall_time_s']:>6.0f}s"
              f"  {row['verdict']}")
    print(*verdict_lines({name: row["verdict"] for name, row in rows.items()},
                         "their correlations and stds are not yet those of their chains' law; run longer "
                         "(--steps, --burn-in)"), sep="\n")
    print("paper (Fig. 2, qualitative):")
    for name in methods:
        print(f"  {name:<14}{PAPER['claims'][name]}")

    args.out.mkdir(parents=True, exist_ok=True)
    plot(traces, args.out / "fig2.png")
    (args.out / "summary.json").write_text(json.dumps(
        {"experiment": "structured-sgmcmc Fig. 2 toy", "config": str(CONFIG), "overrides": common + extra,
         "exact": exact, "methods": rows, "paper": PAPER}, indent=2))
    print(f"wrote {args.out / 'summary.json'} and {args.out / 'fig2.png'}")
    return rows, exact


if __name__ == "__main__":
    main()
