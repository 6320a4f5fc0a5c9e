"""The crescent experiment (Fig. 1 of the Feynman-Kac paper, Sec. 4.1; feynman-kac spec §6.1).

    python recipes/feynman_kac/crescent.py                       # the paper's settings
    python recipes/feynman_kac/crescent.py --sgsmc-epochs 20     # SGSMC is the slow one
    python recipes/feynman_kac/crescent.py --trainer.max_epochs 2 --model.init_args.num_particles 50

Runs ``crescent_ohsmc.yaml``, ``crescent_sgsmc.yaml``, ``crescent_vb.yaml`` and ``crescent_map.yaml``
through ``lit-bayes fit`` (extra arguments go to every run; VB and MAP take no particle count), reads
their final states back with ``lit_bayes.load_run``, then compares them with the brute-force reference of
the model of Eq. 8 on the same 100 observations (``lit_bayes.models.crescent_reference``):

- psi_MLE: the maximiser of the evidence log p(y; psi) (spec §1, goal 1), each evidence by 2-D
  grid quadrature over phi (:func:`lit_bayes.models.crescent.grid_posterior`), maximised over a
  psi grid (coarse, then fine around the coarse optimum). psi < 0 is not searched: the evidence
  is even in psi (phi_2 -> -phi_2), and every method starts at psi = 0.1 > 0.
- the true posterior p(phi | y; psi_MLE) on the grid (spec §1, goal 2).
- baselines of spec §5: MC, the maximiser of the Jensen bound E_prior[log p(y | phi; psi)] over
  the same psi grids with 10,000 fixed prior draws (full data, no minibatch); and MAP, Adam on
  (phi, psi) jointly for -(N/M) log p(y_S | phi; psi) - log pi(phi) with the recipes' schedule,
  batches and start (phi = (0, 0), psi = 0.1), keeping the final value (there is no validation
  split to select by); VB, mean-field Gaussian q over phi with psi fitted jointly (``lit_bayes.MeanFieldVB``),
  from m = 0, log v = 0, psi = 0.1 with the same schedule and batches, its cloud 1,000 draws of the final q.
  SWAG is not run.

Every psi estimate is given beside psi_MLE and the true psi = 1, with the log-evidence it gives
up against psi_MLE (the evidence is flat in psi, so distances in psi alone overstate the
differences). For each cloud (OHSMC, SGSMC, VB): the cloud's mean and
covariance against the reference's; the total variation between the cloud's histogram and the
reference mass on the same bins (and the same figure for as many exact draws from the
reference, the Monte Carlo floor of that distance); the reference mass in bins the cloud never
visits (its missed tails). Distances are given against the reference at psi_MLE and at the
method's own psi (the sampler's error without its psi error).

The paper gives no numbers for Fig. 1, only orderings (spec §6.1): psi estimates rank MC
closest, then OHSMC, VB, SGSMC, and MAP diverges. ``ordering`` in the JSON says whether ours
agree. Writes ``crescent.json`` and ``crescent.png`` under ``--root``.

The prior is the paper's N(0, diag(2, 1)); the authors' code evaluates N(0, diag(4, 1)) where it
computes densities (spec pitfall 12), so ``mle_psi_quirk_prior`` gives the brute-force psi_MLE
under that density too.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from lit_bayes import load_run
from lit_bayes.models import crescent_reference as reference
from lit_bayes.recipe_runs import fit_cell, health_verdict, verdict_lines

HERE = Path(__file__).resolve().parent
RECIPES = {"OHSMC": "crescent_ohsmc.yaml", "SGSMC": "crescent_sgsmc.yaml", "VB": "crescent_vb.yaml",
           "MAP": "crescent_map.yaml"}
CLOUDS = ("OHSMC", "SGSMC", "VB")  # the particle samplers and q's draws, compared with the reference posterior
NO_PARTICLES = ("VB", "MAP")  # recipes without a particle count
TRUE_PSI = 1.0
MC_DRAWS = 10_000


def run(method: str, root: Path, extra: list[str]) -> tuple[dict, dict]:
    """Fit one recipe; returns its final state (psi, particles, log-weights) and summary."""
    directory = root / method.lower()
    summary = fit_cell(HERE / RECIPES[method], directory, extra, rerun=True)
    posterior = load_run(directory)
    samples = posterior.samples
    # MAP samples psi with phi (a flat prior); the Feynman-Kac samplers and VB train it in the module
    psi = samples["net.psi"][0] if "net.psi" in samples else posterior.module.model.net.psi
    particles = torch.stack([samples["net.phi1"], samples["net.phi2"]], dim=1).double()
    result = {"psi": float(psi.detach()), "particles": particles, "log_weights": posterior.log_weights.double(),
              "data": posterior.datamodule()}
    return result, summary


def without_particle_count(overrides: list[str]) -> list[str]:
    """``overrides`` less ``--model.init_args.num_particles`` (and its value): VB and MAP have no particles."""
    name, out, skip = "--model.init_args.num_particles", [], False
    for option in overrides:
        if not skip and option != name and not option.startswith(name + "="):
            out.append(option)
        skip = option == name
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default="runs/fk_crescent", help="where the runs, crescent.json and crescent.png go")
    parser.add_argument("--sgsmc-epochs", type=int, default=None,
                        help="SGSMC's epochs (default: the recipe's 200; about 1 s per step at J = 1000 on a CPU)")
    args, overrides = parser.parse_known_args()  # the rest goes to every lit-bayes run
    root = Path(args.root)
    results, summaries = {}, {}
    for method in RECIPES:
        extra = without_particle_count(overrides) if method in NO_PARTICLES else list(overrides)
        if method == "SGSMC" and args.sgsmc_epochs is not None:
            extra += ["--trainer.max_epochs", str(args.sgsmc_epochs)]
        results[method], summaries[method] = run(method, root, extra)

    data = results["OHSMC"]["data"]
    data.setup("fit")
    y = data.train_data.tensors[1].double()
    psi_mle, evidence = reference.mle_psi(y)
    psi_mle_quirk, _ = reference.mle_psi(y, prior_variances=(4.0, 1.0))
    ref = reference.reference(y, psi_mle)
    seed = data.seed
    psis = {"MC": reference.jensen_bound_psi(y, MC_DRAWS, seed), **{m: r["psi"] for m, r in results.items()}}

    num = results["OHSMC"]["particles"].shape[0]
    floor = reference.exact_draws(ref, num, seed)
    methods = {"MC": {"psi": psis["MC"]}}
    for method, r in results.items():
        methods[method] = {"psi": r["psi"], "summary_metrics": summaries[method]["metrics"],
                           "verdict": health_verdict(summaries[method]),
                           "steps": summaries[method]["steps"], "wall_time_s": summaries[method].get("wall_time_s")}
        if method in CLOUDS:
            weights = r["log_weights"].softmax(0)
            methods[method]["vs_reference_at_mle_psi"] = reference.compare(r["particles"], weights, ref)
            methods[method]["vs_reference_at_own_psi"] = reference.compare(
                r["particles"], weights, reference.reference(y, r["psi"]))
    uniform = torch.full((num,), 1.0 / num, dtype=torch.float64)
    distance = {m: abs(p - psi_mle) for m, p in psis.items()}
    deficit = {m: reference.log_evidence_deficit(y, p, ref) for m, p in psis.items()}
    to_truth = {m: abs(p - TRUE_PSI) for m, p in psis.items()}
    paper = ["MC", "OHSMC", "VB", "SGSMC", "MAP"]  # spec §6.1; MAP "diverges"
    out = {
        "data": {"num_train": data.num_train, "ybar": float(y.mean()), "seed": seed},
        "overrides": overrides, "sgsmc_epochs": args.sgsmc_epochs,
        "psi_true": TRUE_PSI, "psi_mle": psi_mle, "mle_psi_quirk_prior": psi_mle_quirk,
        "log_evidence_at_mle": ref["log_evidence"],
        "reference": {"mean": ref["mean"].tolist(), "cov": ref["cov"].tolist()},
        "exact_draws_floor": reference.compare(floor, uniform, ref),
        "methods": methods,
        "psi_distance_to_mle": distance, "psi_distance_to_true": to_truth, "log_evidence_deficit": deficit,
        "ordering": {
            "paper": paper,
            "ours_by_distance_to_mle": sorted(distance, key=distance.get),
            "ours_by_distance_to_true": sorted(to_truth, key=to_truth.get),
            "matches_paper_mle": sorted(distance, key=distance.get) == paper,
            "matches_paper_true": sorted(to_truth, key=to_truth.get) == paper,
        },
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "crescent.json").write_text(json.dumps(out, indent=2))
    clouds = {m: results[m]["particles"] for m in CLOUDS}
    reference.plot(root / "crescent.png", ref, psi_mle, clouds, psis, evidence)
    print(f"\npsi_MLE (brute force) {psi_mle:.4f}   (quirk prior diag(4, 1): {psi_mle_quirk:.4f})   true 1")
    for m in psis:
        line = f"  {m:6s} psi {psis[m]:.4f}  |psi - psi_MLE| {distance[m]:.4f}  log-evidence deficit {deficit[m]}"
        if m in CLOUDS:
            d = methods[m]["vs_reference_at_mle_psi"]
            line += f"  TV {d['tv']:.3f}  mean err {d['mean_error']:.3f}  missed mass {d['missed_reference_mass']:.3f}"
        print(line)
    print(f"  exact draws (floor) TV {out['exact_draws_floor']['tv']:.3f}")
    print(*verdict_lines({m: methods[m]["verdict"] for m in results},
                         "its psi and cloud are not those of a converged run; see the run's advice"), sep="\n")
    print(json.dumps({"psi_mle": round(psi_mle, 4)} | {m: round(p, 4) for m, p in psis.items()}
                     | {"ordering_matches": out["ordering"]["matches_paper_mle"]}))
    if not all(math.isfinite(p) for p in psis.values()):
        raise SystemExit("a psi estimate is not finite")


if __name__ == "__main__":
    main()
