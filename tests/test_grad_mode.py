"""``without_grad``: ``torch.no_grad()`` as a cheaper decorator, the same grad mode inside and after."""
import pytest
import torch

from lit_bayes.grad_mode import without_grad


@without_grad
def _grad_mode_and_product(weight: torch.Tensor) -> tuple[bool, torch.Tensor]:
    return torch.is_grad_enabled(), weight * 2.0


@without_grad
def _fails() -> None:
    assert not torch.is_grad_enabled()
    raise RuntimeError("inside")


@pytest.mark.parametrize("outer", [True, False])
def test_without_grad_runs_like_no_grad_and_restores_the_mode(outer):
    weight = torch.ones(3, requires_grad=True)
    with torch.set_grad_enabled(outer):
        enabled, product = _grad_mode_and_product(weight)
        assert torch.is_grad_enabled() is outer
        with pytest.raises(RuntimeError, match="inside"):
            _fails()
        assert torch.is_grad_enabled() is outer
    assert not enabled and not product.requires_grad
    assert _grad_mode_and_product.__name__ == "_grad_mode_and_product"
