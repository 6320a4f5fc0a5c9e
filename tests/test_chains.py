"""lit_bayes.chains: the flat (S, P) layout of stacked parameters."""
import torch

from lit_bayes.chains import ChainState, flat_rows


def test_flat_rows_puts_each_row_s_values_in_order():
    w, b = torch.arange(24.0).reshape(2, 3, 4), torch.tensor([[100.0, 101.0], [200.0, 201.0]])
    flat = flat_rows([w, b])
    assert flat.shape == (2, 14)
    assert torch.equal(flat[1], torch.cat([w[1].flatten(), b[1]]))


def test_chain_state_flat_and_unflatten_round_trip():
    params = {"layer.weight": torch.randn(3, 2, 5), "layer.bias": torch.randn(3, 2)}
    chains = ChainState(params)
    flat = chains.flat()
    assert torch.equal(flat, flat_rows(params.values())) and not flat.requires_grad
    back = chains.unflatten(flat)
    assert all(torch.equal(back[n], p) for n, p in params.items())
