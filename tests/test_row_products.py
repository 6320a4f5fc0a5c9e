"""Both orientations of the row products, and a fixed operand's oneDNN path, give the same values, and the choice
between them follows the processor's vendor and the dtype only (so a resumed run computes like the run it
continues)."""
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


@pytest.mark.parametrize("vendor", ["AuthenticAMD", "GenuineIntel"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_fixed_operand_gives_both_products_on_either_path(vendor, dtype, monkeypatch):
    """oneDNN for float32 on AMD (where it has oneDNN), the dense products otherwise: the same values."""
    monkeypatch.setattr(module, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(module, "ONEDNN_MIN_ELEMENTS", 700 * 50)
    generator = torch.Generator().manual_seed(0)
    matrix = torch.randn(700, 50, generator=generator, dtype=dtype)
    assert not module.onednn_is_faster(matrix[:-1])  # below the size where oneDNN pays
    weight, rows = torch.randn(3, 12, 50, generator=generator, dtype=dtype), torch.randn(2, 5, 50, dtype=dtype)
    fixed = module.FixedOperand(matrix)
    onednn = vendor == "AuthenticAMD" and dtype == torch.float32 and torch.backends.mkldnn.is_available()
    assert module.onednn_is_faster(matrix) == onednn and (fixed._onednn is not None) == onednn
    assert fixed.shape == (700, 50)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(fixed.rows_times(weight), torch.einsum("nd,ckd->cnk", matrix, weight), rtol=tol, atol=tol)
    torch.testing.assert_close(fixed.rows_times(weight[0]), matrix @ weight[0].T, rtol=tol, atol=tol)
    torch.testing.assert_close(fixed.times_rows(rows), torch.einsum("ckd,nd->ckn", rows, matrix), rtol=tol, atol=tol)
    with pytest.raises(ValueError, match="matrix must be 2-D"):
        module.FixedOperand(weight)


def sweeps(monkeypatch, vendor: str, dtype: str = "float64") -> dict[str, torch.Tensor]:
    monkeypatch.setattr(module, "cpu_vendor", lambda: vendor)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(300, 20, generator=generator)
    y = torch.randn(300, generator=generator)
    sampler = NoisyGibbs(NoisyMLP([20, 8, 1], "relu", 0.1, 0.1), num_chains=2, seed=0, dtype=dtype)
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


def test_noisy_gibbs_sweeps_agree_with_and_without_onednn(monkeypatch):
    """float32: oneDNN's first-layer products on AMD (here at any size), MKL's elsewhere; three sweeps from the
    same seed agree to float32 rounding."""
    monkeypatch.setattr(module, "ONEDNN_MIN_ELEMENTS", 1)
    amd, intel = sweeps(monkeypatch, "AuthenticAMD", "float32"), sweeps(monkeypatch, "GenuineIntel", "float32")
    for name in amd:
        torch.testing.assert_close(amd[name], intel[name], rtol=1e-4, atol=1e-4)
