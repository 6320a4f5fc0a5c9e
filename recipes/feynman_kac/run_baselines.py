"""The paper's two-stage baselines on two moons and the synthetic regression: MAP-HMC and SGSMC-HMC.

    python recipes/feynman_kac/run_baselines.py moons map_hmc --seeds 3
    python recipes/feynman_kac/run_baselines.py regression sgsmc_hmc --seeds 3

Stage 1 estimates psi (feynman-kac spec §5):
  * ``map_hmc``: MAP jointly over (phi, psi) with Adam at 0.01, a N(0, I) prior on phi and a
    flat one on psi (Sharma et al. 2023);
  * ``sgsmc_hmc``: SGSMC (random-walk Metropolis, variance 0.05, 10 steps per move).
Both evaluate the validation set after every step and keep the state with the best validation
NLPD (the paper selects MAP by its validation MAP loss; the NLPD of the MAP point is used here).
Stage 2 runs full-batch HMC over phi with psi fixed (``PartialBNN.fix_deterministic``): 100
leapfrog steps of size 0.01, identity mass, ``--hmc-steps`` steps (the paper: 3000) of which
the first two thirds are burn-in, started at the MAP phi or at an SGSMC particle. Predictions
average the kept HMC draws. Metrics are those of the OHSMC tables (per-sample ECE, accuracy
and RMSE; RMSE against the noise-free function). Prints mean (std) beside the paper's rows and
writes ``<root>/<table>/<method>.json``. HMC makes this slow on CPU (minutes per seed).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_bayes import HMC, MAP, SGSMC, Bernoulli, Gaussian, GaussianPrior
from lit_bayes.callbacks import PosteriorSamples, PredictiveMarginal, UncertaintyMetrics
from lit_bayes.data import SyntheticRegression, TwoMoons
from lit_bayes.models import PartialMLP

# widths, stochastic layer, likelihood, data, epochs, (column, metric, paper mean, paper std) per method
TABLES = {
    "moons": ([2, 100, 20, 5, 1], 2, Bernoulli, TwoMoons, 100, {
        "map_hmc": [("NLPD", "test/nlpd", 0.28, 0.06), ("ECE", "test/ece_per_sample", 0.07, 0.01),
                    ("Acc.", "test/accuracy_per_sample", 0.87, 0.02)],
        "sgsmc_hmc": [("NLPD", "test/nlpd", 0.32, 0.08), ("ECE", "test/ece_per_sample", 0.08, 0.01),
                      ("Acc.", "test/accuracy_per_sample", 0.86, 0.03)],
    }),
    "regression": ([1, 20, 10, 1], 1, lambda: Gaussian(1.0), SyntheticRegression, 200, {
        "map_hmc": [("NLPD", "test/nlpd", 1.53, 0.09), ("RMSE", "test/rmse_per_sample", 0.59, 0.11)],
        "sgsmc_hmc": [("NLPD", "test/nlpd", 1.65, 0.16), ("RMSE", "test/rmse_per_sample", 0.75, 0.14)],
    }),
}


def trainer(root: Path, **options) -> L.Trainer:
    return L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, precision="64-true",
                     default_root_dir=root, **options)


def evaluation_callbacks(regression: bool) -> list:
    return [PredictiveMarginal(keep_per_sample=True, chunk_size=1000),
            UncertaintyMetrics(per_sample=True, rmse_reference="noise_free" if regression else "target")]


def estimate_psi(method: str, model: PartialMLP, likelihood, data, epochs: int, particles: int, seed: int,
                 root: Path) -> torch.Tensor:
    """Stage 1: train, keep the best validation NLPD; returns the stochastic part's start for HMC."""
    best = ModelCheckpoint(dirpath=root / "stage1", monitor="val/nlpd", mode="min", save_top_k=1,
                           save_on_train_epoch_end=False)
    if method == "map_hmc":
        flat_psi = {f"net.net.{n}": math.inf for n in model.deterministic_names}
        sampler = MAP(model, likelihood, GaussianPrior(1.0, flat_psi), optimizer="adam", lr=0.01, init="template",
                      seed=seed)
    else:
        sampler = SGSMC(model, likelihood, num_particles=particles, kernel_options={"variance": 0.05, "steps": 10},
                        seed=seed)
    fit = trainer(root, max_epochs=epochs, val_check_interval=1, num_sanity_val_steps=0,
                  callbacks=[best, *evaluation_callbacks(isinstance(likelihood, Gaussian))])
    fit.fit(sampler, datamodule=data)
    state = torch.load(best.best_model_path, weights_only=True)["state_dict"]
    trained = copy.deepcopy(model)
    if method == "map_hmc":  # the MAP chain holds every parameter of the network
        values = {n: state[f"chains.net__net__{n.replace('.', '__')}"][0] for n, _ in model.net.named_parameters()}
    else:  # psi from the module, phi from the first SGSMC particle
        values = {n: state[f"model.net.{n}"] for n in model.deterministic_names}
        values.update({n: state[f"chains.net__{n.replace('.', '__')}"][0] for n in model.stochastic_names})
    trained.net.load_state_dict(values)
    return trained


def run_seed(table: str, method: str, seed: int, root: Path, particles: int, hmc_steps: int,
             epochs: int | None) -> dict[str, float]:
    widths, layer, likelihood_cls, data_cls, default_epochs, _ = TABLES[table]
    L.seed_everything(seed)
    regression = table == "regression"
    data = data_cls(batch_size=20, seed=seed)
    model = PartialMLP(widths, layer)
    trained = estimate_psi(method, model, likelihood_cls(), data, epochs or default_epochs, particles, seed,
                           root / f"seed_{seed}")
    burn_in = (2 * hmc_steps) // 3
    hmc = HMC(trained.fix_deterministic(), likelihood_cls(), GaussianPrior(1.0), step_size=0.01, num_leapfrog=100,
              adapt_steps=0, burn_in=burn_in, init="template", seed=seed)
    full_batch = data_cls(batch_size=None, seed=seed)
    samples = PosteriorSamples(max_draws=hmc_steps - burn_in)
    run = trainer(root / f"seed_{seed}", max_epochs=hmc_steps, limit_val_batches=0, enable_checkpointing=False,
                  callbacks=[samples, *evaluation_callbacks(regression)])
    run.fit(hmc, datamodule=full_batch)
    (metrics,) = run.test(hmc, datamodule=full_batch, verbose=False)
    return {k: float(v) for k, v in metrics.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("method", choices=["map_hmc", "sgsmc_hmc"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--particles", type=int, default=1000, help="SGSMC particles (the paper's code: 1000)")
    parser.add_argument("--hmc-steps", type=int, default=3000, help="HMC steps, the first 2/3 burn-in")
    parser.add_argument("--epochs", type=int, help="stage-1 epochs (default: the paper's 100 / 200)")
    parser.add_argument("--root", default="runs/fk_baselines")
    args = parser.parse_args()
    if min(args.seeds, args.particles) < 1 or args.hmc_steps < 3:
        parser.error("--seeds and --particles must be positive, --hmc-steps at least 3")
    root = Path(args.root) / args.table / args.method
    runs = [run_seed(args.table, args.method, s, root, args.particles, args.hmc_steps, args.epochs)
            for s in range(args.seeds)]
    rows = {}
    print(f"\n{args.method}, {args.table}: ours over {len(runs)} seeds vs the paper")
    for column, key, paper_mean, paper_std in TABLES[args.table][5][args.method]:
        values = [r[key] for r in runs]
        mean, std = statistics.fmean(values), statistics.pstdev(values)
        rows[column] = {"metric": key, "ours_mean": mean, "ours_std": std, "paper_mean": paper_mean,
                        "paper_std": paper_std, "values": values}
        print(f"  {column:5s} ours {mean:.3f} ({std:.3f})   paper {paper_mean:.2f} ({paper_std:.2f})")
    root.mkdir(parents=True, exist_ok=True)
    (root.parent / f"{args.method}.json").write_text(json.dumps({"seeds": len(runs), "rows": rows}, indent=2))
    print(json.dumps({c: round(r["ours_mean"], 4) for c, r in rows.items()} | {"seeds": len(runs)}))


if __name__ == "__main__":
    main()
