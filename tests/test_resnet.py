"""ResNet-20 (CIFAR variant): size, batched evaluation, frozen BatchNorm, a structured step."""
import lightning as L
import pytest
import torch

from lit_bayes import Categorical, GaussianPrior
from lit_bayes.chains import stacked_call
from lit_bayes.data import BayesDataModule
from lit_bayes.models.resnet import ResNet20
from lit_bayes.samplers.structured_sgmcmc import StructuredSGMCMC


def test_resnet20_has_the_cifar_layout_and_size():
    net = ResNet20()
    assert sum(p.numel() for p in net.parameters()) == 269_722  # "0.27 M" of He et al. (2016), Table 6
    assert sum(isinstance(m, torch.nn.Conv2d) for m in net.modules()) + 1 == 20  # 19 convolutions + the classifier
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert ResNet20(num_classes=5, in_channels=1)(torch.randn(2, 1, 28, 28)).shape == (2, 5)


def test_frozen_batchnorm_does_not_depend_on_mode_or_on_the_other_points():
    torch.manual_seed(0)
    net = ResNet20()
    for module in net.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 2.0)
            torch.nn.init.uniform_(module.weight, 0.5, 1.5)
    x = torch.randn(5, 3, 32, 32)
    train_out = net.train()(x)
    assert torch.equal(net.eval()(x), train_out)
    torch.testing.assert_close(net(x[:1]), train_out[:1])
    assert all(not torch.equal(m.running_mean, torch.zeros_like(m.running_mean))
               for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d))


def test_batchnorm_statistics_of_a_pretrained_network_load_into_the_frozen_one():
    torch.manual_seed(0)
    trained = ResNet20(norm="batch")
    trained.train()(torch.randn(16, 3, 32, 32) * 2 + 1)  # moves the running statistics
    frozen = ResNet20(norm="frozen")
    frozen.load_state_dict(trained.state_dict())
    x = torch.randn(3, 3, 32, 32)
    torch.testing.assert_close(frozen(x), trained.eval()(x))


def test_vmapped_parameter_sets_equal_a_loop():
    net = ResNet20(in_channels=1)
    torch.manual_seed(1)
    params = {n: p.detach() + 0.05 * torch.randn(3, *p.shape) for n, p in net.named_parameters()}
    x = torch.randn(4, 1, 28, 28)
    torch.testing.assert_close(stacked_call(net, params, x), stacked_call(net, params, x, vectorize=False),
                               rtol=1e-4, atol=1e-5)


class TinyImages(BayesDataModule):
    def __init__(self):
        super().__init__(task="classification", num_classes=10, input_shape=(1, 28, 28), batch_size=8,
                         eval_batch_size=None, seed=0)

    def load(self):
        g = torch.Generator().manual_seed(0)
        return {split: (torch.randn(n, 1, 28, 28, generator=g), torch.randint(10, (n,), generator=g))
                for split, n in (("train", 16), ("val", 4), ("test", 4))}


@pytest.mark.parametrize("mode", ["dropout", "structured"])
def test_structured_steps_on_resnet20(mode):
    options = {"num_groups": 2, "partition": "modulo"} if mode == "structured" else {"partition": "fully_factorised"}
    sampler = StructuredSGMCMC(ResNet20(in_channels=1), Categorical(10), GaussianPrior(0.3**2), step_size=1e-5,
                               num_chains=2, num_masks=2, mode=mode, buffer_size=4, seed=0, **options)
    L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, limit_val_batches=0).fit(sampler, datamodule=TinyImages())
    assert len(sampler.sample_buffer) == 3 and torch.isfinite(sampler.chains.flat()).all()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="norm must be one of"):
        ResNet20(norm="group")
    with pytest.raises(ValueError, match="in_channels must be an integer >= 1"):
        ResNet20(in_channels=0)
    with pytest.raises(ValueError, match=r"shape \(B, C, H, W\)"):
        ResNet20()(torch.randn(3, 32, 32))
