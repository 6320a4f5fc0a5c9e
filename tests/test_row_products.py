"""Both orientations of the row products give the same values, and the choice between them follows the
processor's vendor only (so a resumed run computes like the run it continues)."""
from __future__ import annotations

import pytest
import torch

from lit_bayes import row_products as module
from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.samplers.noisy_gibbs import NoisyGibbs


@pytest.mark.parametrize("vendor, transposed", [("AuthenticAMD", True), ("GenuineIntel", False), ("", False)])
def test_the_orientation_follows_the_vendor_and_both_give_the_product(vendor, transposed, monkeypatch):
    monkeypatch.setattr(module, "cpu_vendor", lambda: vendor)
    mkl = torch.backends.mkl.is_available()
    assert module.transposed_is_faster(torch.device("cpu")) == (transposed and mkl)
    assert not module.transposed_is_faster(torch.device("cuda"))
    generator = torch.Generator().manual_seed(0)
    weight, rows = torch.randn(3, 12, 50, generator=generator), torch.randn(3, 700, 50, generator=generator)
    product = module.row_products(weight, rows)
    assert product.shape == (3, 700, 12)
    torch.testing.assert_close(product, torch.einsum("cnd,ckd->cnk", rows, weight), rtol=1e-5, atol=1e-5)
    shared = module.row_products(weight, rows[0])  # inputs shared by every chain
    torch.testing.assert_close(shared, torch.einsum("nd,ckd->cnk", rows[0], weight), rtol=1e-5, atol=1e-5)


def test_the_cpu_vendor_is_one_of_the_known_or_empty():
    assert module.cpu_vendor() in (*module.VENDORS, "")


def sweeps(monkeypatch, vendor: str) -> dict[str, torch.Tensor]:
    monkeypatch.setattr(module, "cpu_vendor", lambda: vendor)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(300, 20, generator=generator)
    y = torch.randn(300, generator=generator)
    sampler = NoisyGibbs(NoisyMLP([20, 8, 1], "relu", 0.1, 0.1), num_chains=2, seed=0, dtype="float64")
    sampler.setup("fit")
    stepper = sampler.configure_optimizers()
    inputs, targets, latents = sampler.sweep_inputs((x, y))
    for _ in range(3):
        stepper.sweep(inputs, targets, latents)
    return {name: t.clone() for name, t in sampler.chains.as_dict().items()}


def test_noisy_gibbs_sweeps_agree_in_both_orientations(monkeypatch):
    """Three sweeps from the same seed: the same chains to rounding (float64)."""
    amd, intel = sweeps(monkeypatch, "AuthenticAMD"), sweeps(monkeypatch, "GenuineIntel")
    for name in amd:
        torch.testing.assert_close(amd[name], intel[name], rtol=1e-9, atol=1e-9)
