"""The crescent's exact-posterior comparison (Fig. 1 of the Feynman-Kac paper, Sec. 4.1; feynman-kac
spec §6.1): brute-force psi_MLE and reference posterior on a grid (:mod:`lit_bayes.models.crescent`),
the MC baseline's psi, and the distances of a weighted particle cloud from the reference.

- :func:`mle_psi`: the maximiser of the evidence log p(y; psi) by 2-D grid quadrature over phi,
  maximised over a psi grid (coarse, then fine around the coarse optimum). psi < 0 is not searched:
  the evidence is even in psi (phi_2 -> -phi_2), and every method starts at psi = 0.1 > 0.
- :func:`reference`: the grid posterior p(phi | y; psi) with its cell masses, mean and covariance.
- :func:`jensen_bound_psi`: the MC baseline of spec §5, the psi maximising the Jensen bound
  E_prior[log p(y | phi; psi)] with fixed prior draws (full data, the same psi grids).
- :func:`compare`: a cloud's mean and covariance against the reference's, the total variation between
  its histogram and the reference mass on the same bins, and the reference mass in bins the cloud never
  visits; :func:`exact_draws` gives as many exact reference draws (the Monte Carlo floor of that distance).
- :func:`plot`: the clouds over the reference's contours, and the evidence curve with every psi.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from lit_bayes.models.crescent import PRIOR_VARIANCES, Crescent, brute_force_mle, grid_posterior

__all__ = ["COARSE_PSI", "PHI1", "PHI2", "compare", "exact_draws", "jensen_bound_psi", "log_evidence_deficit",
           "mle_psi", "plot", "reference"]

# reference grid: spacing below the crescent's width |psi| / sqrt(N + psi^2) for psi >= 0.25
PHI1 = torch.linspace(-6.0, 6.0, 481, dtype=torch.float64)
PHI2 = torch.linspace(-8.0, 4.0, 601, dtype=torch.float64)
COARSE_PSI = torch.arange(0.25, 2.5 + 1e-9, 0.02, dtype=torch.float64)
# histogram bins for the distances: 10 x 10 reference grid cells each
BIN1, BIN2 = 10, 10


def refine(psi: float) -> Tensor:
    """The fine psi grid around a coarse optimum (step 0.001 over +-0.02)."""
    return torch.arange(psi - 0.02, psi + 0.02 + 1e-9, 0.001, dtype=torch.float64)


def grid_argmax(objective: Callable[[float], float], grid: Tensor) -> float:
    values = torch.tensor([objective(float(p)) for p in grid.tolist()])
    return float(grid[values.argmax()])


def mle_psi(y: Tensor, prior_variances: Sequence[float] = PRIOR_VARIANCES) -> tuple[float, Tensor]:
    """psi_MLE (coarse grid :data:`COARSE_PSI`, then :func:`refine`) and the evidence on the coarse grid."""
    coarse, evidence = brute_force_mle(y, COARSE_PSI, PHI1, PHI2, prior_variances)
    return brute_force_mle(y, refine(coarse), PHI1, PHI2, prior_variances)[0], evidence


def jensen_bound_psi(y: Tensor, num_draws: int = 10_000, seed: int = 0) -> float:
    """The MC baseline (spec §5): the psi maximising E_prior[log p(y | phi; psi)], estimated with
    ``num_draws`` fixed prior draws (coarse then fine psi grid)."""
    generator = torch.Generator().manual_seed(seed)
    variances = torch.tensor(PRIOR_VARIANCES, dtype=torch.float64)
    draws = torch.randn(num_draws, 2, generator=generator, dtype=torch.float64) * variances.sqrt()
    y = y.double()
    ybar, n = y.mean(), y.numel()

    def bound(psi: float) -> float:  # up to psi-free constants: -N/2 E[(m - ybar)^2]
        return float(-0.5 * n * ((Crescent.mean(draws[:, 0], draws[:, 1], psi) - ybar) ** 2).mean())

    return grid_argmax(bound, refine(grid_argmax(bound, COARSE_PSI)))


def reference(y: Tensor, psi: float) -> dict:
    """The grid posterior at ``psi``: density, cell masses, mean, covariance and log-evidence."""
    density, log_evidence = grid_posterior(y, psi, PHI1, PHI2)
    mass = density * float(PHI1[1] - PHI1[0]) * float(PHI2[1] - PHI2[0])
    g1, g2 = torch.meshgrid(PHI1, PHI2, indexing="ij")
    points = torch.stack([g1.flatten(), g2.flatten()], dim=1)
    mean = (mass.flatten()[:, None] * points).sum(0)
    centred = points - mean
    cov = (centred.T * mass.flatten()) @ centred
    return {"density": density, "mass": mass, "mean": mean, "cov": cov, "log_evidence": log_evidence}


def log_evidence_deficit(y: Tensor, psi: float, ref: Mapping) -> float | None:
    """How much log-evidence ``psi`` gives up against the reference's psi (``None`` where the grid
    does not resolve the crescent, |psi| < 0.25): the evidence is flat in psi, so distances in psi
    alone overstate differences."""
    return ref["log_evidence"] - grid_posterior(y, psi, PHI1, PHI2)[1] if abs(psi) >= 0.25 else None


def binned(mass: Tensor) -> Tensor:
    """Reference cell masses summed into BIN1 x BIN2 blocks (the grid sizes less one divide)."""
    m = mass[:-1, :-1]
    return m.reshape(m.shape[0] // BIN1, BIN1, m.shape[1] // BIN2, BIN2).sum(dim=(1, 3))


def histogram(points: Tensor, weights: Tensor) -> tuple[Tensor, float]:
    """Weighted histogram of points on the blocks of :func:`binned` (cell i spans
    ``[PHI[i], PHI[i+1])``) and the weight falling outside the grid."""
    d1, d2 = float(PHI1[1] - PHI1[0]) * BIN1, float(PHI2[1] - PHI2[0]) * BIN2
    i = ((points[:, 0] - PHI1[0]) / d1).floor().long()
    j = ((points[:, 1] - PHI2[0]) / d2).floor().long()
    shape = ((len(PHI1) - 1) // BIN1, (len(PHI2) - 1) // BIN2)
    inside = (i >= 0) & (i < shape[0]) & (j >= 0) & (j < shape[1])
    hist = torch.zeros(shape, dtype=torch.float64)
    hist.index_put_((i[inside], j[inside]), weights[inside], accumulate=True)
    return hist, float(weights[~inside].sum())


def compare(particles: Tensor, weights: Tensor, ref: Mapping) -> dict:
    """Distances of a cloud ``particles`` ``(J, 2)`` with normalised ``weights`` ``(J,)`` from a
    reference grid posterior."""
    particles, weights = particles.double(), weights.double()
    mean = (weights[:, None] * particles).sum(0)
    centred = particles - mean
    cov = (centred.T * weights) @ centred
    hist, outside = histogram(particles, weights)
    ref_bins = binned(ref["mass"])
    return {
        "mean": mean.tolist(), "cov": cov.tolist(),
        "mean_error": float((mean - ref["mean"]).norm()),
        "cov_error_frobenius": float((cov - ref["cov"]).norm()),
        "tv": 0.5 * float((hist - ref_bins).abs().sum()) + 0.5 * outside,
        "missed_reference_mass": float(ref_bins[hist == 0].sum()),
    }


def exact_draws(ref: Mapping, num: int, seed: int = 0) -> Tensor:
    """``num`` draws from the grid reference (node (i, j) by its mass, then uniform on its cell
    ``[PHI1[i], PHI1[i+1]) x [PHI2[j], PHI2[j+1])``, the convention of :func:`histogram`)."""
    generator = torch.Generator().manual_seed(seed)
    cells = torch.multinomial(ref["mass"].flatten(), num, replacement=True, generator=generator)
    i, j = cells // len(PHI2), cells % len(PHI2)
    d1, d2 = float(PHI1[1] - PHI1[0]), float(PHI2[1] - PHI2[0])
    u = torch.rand(num, 2, generator=generator, dtype=torch.float64)
    return torch.stack([PHI1[i] + u[:, 0] * d1, PHI2[j] + u[:, 1] * d2], dim=1)


def plot(path: str | os.PathLike, ref: Mapping, psi_mle: float, clouds: Mapping[str, Tensor],
         psis: Mapping[str, float], evidence: Tensor) -> None:
    """Each cloud over the reference's contours at psi_MLE, and log p(y; psi) on :data:`COARSE_PSI`
    with every method's psi."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(clouds) + 1, figsize=(5 * (len(clouds) + 1), 4.2))
    for ax, (method, cloud) in zip(axes, clouds.items()):
        levels = float(ref["density"].max()) * torch.tensor([0.01, 0.1, 0.3, 0.5, 0.7, 0.9])
        ax.contour(PHI1.numpy(), PHI2.numpy(), ref["density"].T.numpy(), levels=levels.numpy(), cmap="viridis")
        ax.scatter(cloud[:, 0].numpy(), cloud[:, 1].numpy(), s=3, c="tab:red", alpha=0.4)
        ax.set(xlim=(-4, 4), ylim=(-5, 2), xlabel="phi_1", ylabel="phi_2",
               title=f"{method} (psi={psis[method]:.3f}) vs p(phi | y; psi_MLE={psi_mle:.3f})")
        ax.title.set_fontsize(8)
    ax = axes[-1]
    ax.plot(COARSE_PSI.numpy(), evidence.numpy(), color="k", label="log p(y; psi) (grid)")
    for k, (method, psi) in enumerate(psis.items()):
        ax.axvline(psi, color=f"C{k}", ls="--", label=f"{method} {psi:.3f}")
    ax.axvline(psi_mle, color="k", ls=":", label=f"MLE {psi_mle:.3f}")
    ax.set(xlabel="psi", ylabel="log evidence", ylim=(float(evidence.max()) - 30, float(evidence.max()) + 2))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
