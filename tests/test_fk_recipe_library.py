"""Library pieces the Feynman-Kac recipes use: PartialFromRun (stage 2 of the two-stage baselines),
ExponentialLRDecay (the crescent's MAP schedule) and the crescent's exact-posterior comparison."""
import math

import lightning as L
import pytest
import torch

from lit_bayes import MAP, Bernoulli
from lit_bayes.callbacks import ExponentialLRDecay
from lit_bayes.cli import main
from lit_bayes.data import TwoMoons
from lit_bayes.data.crescent import CrescentData
from lit_bayes.models import PartialFromRun, PartialMLP
from lit_bayes.models import crescent_reference as reference

QUIET = ["--wandb", "false", "--trainer.enable_progress_bar", "false", "--trainer.logger", "false"]


def _fit(tmp_path, sampler: str, extra=()):
    """A tiny CLI run of a PartialMLP on two moons; returns its log directory."""
    model = ("{class_path: lit_bayes.models.PartialMLP, init_args: {widths: [2, 6, 4, 1], stochastic_layer: 1}}")
    directory = tmp_path / sampler
    main(["fit", "--model", f"lit_bayes.{sampler}", "--model.init_args.model", model,
          "--model.init_args.likelihood", "lit_bayes.Bernoulli", "--data", "lit_bayes.data.TwoMoons",
          "--data.init_args.batch_size", "20", "--trainer.max_epochs", "1", "--trainer.default_root_dir",
          str(directory), "--summary.directory", str(directory), *QUIET, *extra])
    return directory


@pytest.mark.parametrize("sampler, extra", [("MAP", []), ("OHSMC", ["--model.init_args.num_particles", "7"])])
def test_partial_from_run_takes_the_runs_values_and_fixes_psi(tmp_path, sampler, extra):
    directory = _fit(tmp_path, sampler, extra)
    from lit_bayes import load_run

    run = load_run(directory)
    loaded = PartialFromRun(str(directory), draw=1 if sampler == "OHSMC" else 0)
    assert loaded.stochastic_names == ["2.weight", "2.bias"]
    assert loaded.fixed_parameter_names == [f"net.{n}" for n in loaded.deterministic_names]
    values = dict(loaded.named_parameters())
    if sampler == "MAP":  # every value is the chain's
        for name, value in run.samples.items():
            assert torch.equal(values[name[len("net."):]], value[0]), name
    else:  # phi is particle 1, psi the trained module's
        assert torch.equal(values["net.2.weight"], run.samples["net.2.weight"][1])
        assert torch.equal(values["net.0.weight"], run.module.model.net[0].weight.detach())
    # a generic sampler then samples phi only, from the run's phi
    sampler_module = MAP(loaded, Bernoulli(), init="template")
    assert set(sampler_module.template_parameters()) == {"net.net.2.weight", "net.net.2.bias"}
    x = torch.randn(5, 2, dtype=torch.float32)
    assert loaded.stacked_forward({"net.2.weight": values["net.2.weight"][None].detach(),
                                   "net.2.bias": values["net.2.bias"][None].detach()}, x).shape == (1, 5, 1)
    with pytest.raises(ValueError, match="draw"):
        PartialFromRun(str(directory), draw=100)


def test_partial_from_run_names_a_missing_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="run_dir"):
        PartialFromRun(str(tmp_path))


def test_exponential_lr_decay_sets_the_rate_per_step(tmp_path):
    data = TwoMoons(num_train=40, num_val=0, num_test=10, batch_size=10)
    sampler = MAP(PartialMLP([2, 4, 1], 0), Bernoulli(), optimizer="sgd", lr=0.5)
    seen = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append(trainer.optimizers[0].param_groups[0]["lr"])

    trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path,
                        callbacks=[ExponentialLRDecay(0.5, 4), Record()])
    trainer.fit(sampler, datamodule=data)
    assert seen == pytest.approx([0.5 * 0.5 ** (k / 4) for k in range(8)], rel=1e-12)
    with pytest.raises(ValueError, match="decay_steps"):
        ExponentialLRDecay(0.9, 0)
    with pytest.raises(ValueError, match="decay"):
        ExponentialLRDecay(-1.0)


def test_crescent_reference_against_exact_draws_and_the_mle():
    data = CrescentData(seed=0)
    data.setup()
    y = data.train_data.tensors[1].double()
    psi = 1.0
    ref = reference.reference(y, psi)
    assert abs(float(ref["mass"].sum()) - 1.0) < 1e-10
    draws = reference.exact_draws(ref, 20000, seed=1)
    uniform = torch.full((20000,), 1 / 20000, dtype=torch.float64)
    close = reference.compare(draws, uniform, ref)
    assert close["tv"] < 0.1 and close["mean_error"] < 0.05 and close["missed_reference_mass"] < 0.02
    # a cloud at the prior's origin misses the crescent
    far = reference.compare(torch.zeros(10, 2, dtype=torch.float64), torch.full((10,), 0.1, dtype=torch.float64), ref)
    assert far["tv"] > 0.9 and far["missed_reference_mass"] > 0.9
    assert reference.log_evidence_deficit(y, psi, ref) == pytest.approx(0.0, abs=1e-12)
    assert reference.log_evidence_deficit(y, 0.1, ref) is None  # grid does not resolve the crescent there
    # the MC baseline maximises the Jensen bound: its psi shrinks the mean's prior spread, E[(m - ybar)^2]
    mc = reference.jensen_bound_psi(y, num_draws=2000, seed=0)
    assert math.isfinite(mc) and float(reference.COARSE_PSI[0]) - 0.02 <= mc <= float(reference.COARSE_PSI[-1]) + 0.02


def test_crescent_recipes_run_at_tiny_size(tmp_path):
    """The MAP and VB baseline recipes (with their learning-rate decay) and the SGSMC recipe."""
    from pathlib import Path

    recipes = Path(__file__).resolve().parents[1] / "recipes" / "feynman_kac"
    for name, extra in (("crescent_map.yaml", []), ("crescent_sgsmc.yaml", ["--model.init_args.num_particles", "20"]),
                        ("crescent_vb.yaml", ["--model.init_args.num_samples", "20"])):
        directory = tmp_path / name
        main(["fit", "-c", str(recipes / name), "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3",
              "--trainer.default_root_dir", str(directory), "--summary.directory", str(directory), *QUIET, *extra])
        summary = (directory / "summary.json").read_text()
        assert '"steps": 3' in summary, summary
