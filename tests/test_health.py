"""The run's health verdict: each reason triggered by a constructed case, none on a converged
conjugate target, and the verdict printed, logged and written to summary.json."""
from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn

from lit_bayes import SGMCMC, Gaussian
from lit_bayes.callbacks import ChainDiagnostics, PosteriorSamples, RunHealth, RunSummary
from lit_bayes.cli import fit_and_test, run_summary
from lit_bayes.data import LinearRegression
from lit_bayes.diagnostics import summarize
from lit_bayes.health import HealthThresholds, RunRecord, assess

CHAINS, DRAWS = 8, 400


def stationary(generator: torch.Generator, chains: int = CHAINS, draws: int = DRAWS, rho: float = 0.0) -> torch.Tensor:
    """AR(1) traces with unit stationary variance, started in equilibrium."""
    noise = torch.randn(chains, draws, generator=generator, dtype=torch.float64)
    trace = torch.empty_like(noise)
    trace[:, 0] = noise[:, 0]
    for t in range(1, draws):
        trace[:, t] = rho * trace[:, t - 1] + (1 - rho**2) ** 0.5 * noise[:, t]
    return trace


def record(heldout: torch.Tensor, energy: torch.Tensor | None = None, config_temperature: torch.Tensor | None = None,
           **options) -> RunRecord:
    """A run record holding ``heldout`` as the held-out log density (and ``config_temperature`` when given) and,
    as ChainDiagnostics does, its R-hat and ESS."""
    traces = {"heldout_lpd": heldout, "energy": stationary(torch.Generator().manual_seed(9)) if energy is None else energy}
    if config_temperature is not None:
        traces["config_temperature"] = config_temperature
    settings = dict(steps=1000, burn_in=500, thinning=1, chains=heldout.shape[0], draws_per_chain=heldout.shape[1],
                    traces=traces, function_space=("heldout_lpd",), diagnostics=summarize(traces))
    settings.update(options)
    return RunRecord(**settings)


def codes(health) -> list[str]:
    return [reason.code for reason in health.reasons]


def test_well_mixed_chains_are_ok():
    health = assess(record(stationary(torch.Generator().manual_seed(0))))
    assert health.verdict == "ok" and health.reasons == []
    assert health.draws_total == CHAINS * DRAWS


def test_no_draws_fails_naming_steps_and_burn_in():
    health = assess(RunRecord(steps=3000, burn_in=4000, thinning=20, chains=8, draws_per_chain=0))
    assert health.verdict == "failed" and codes(health) == ["no_draws"]
    assert "3000 steps" in health.reasons[0].message and "burn_in is 4000" in health.reasons[0].message
    assert "burn_in: 0.5" in health.reasons[0].advice


def test_too_few_draws_and_a_single_chain_warn():
    trace = stationary(torch.Generator().manual_seed(1), chains=1, draws=3)
    health = assess(RunRecord(steps=10, burn_in=7, thinning=1, chains=1, draws_per_chain=3, traces={"heldout_lpd": trace}))
    assert health.verdict == "warning" and codes(health) == ["too_few_draws", "single_chain"]


def test_a_single_drifting_chain_fails_on_the_rhat_of_its_halves():
    """One chain cannot be compared with others (single_chain), but its own halves can: a chain still
    drifting fails, a stationary one keeps only the single_chain warning."""
    generator = torch.Generator().manual_seed(11)
    energy = stationary(generator, chains=1)
    drifting = stationary(generator, chains=1, rho=0.999).cumsum(1)
    health = assess(record(drifting, energy))
    assert health.verdict == "failed" and codes(health) == ["single_chain", "rhat", "low_ess"]
    assert "the one chain is not stationary" in health.reasons[1].message
    steady = assess(record(stationary(generator, chains=1), energy))
    assert steady.verdict == "warning" and codes(steady) == ["single_chain"]


def test_chains_whose_agreement_was_never_measured_warn_and_say_why():
    """Draws kept from several chains, but the chain diagnostics recorded too few points for an R-hat (as an
    exp_b HMC run of 123 steps with diagnostics every 100 steps did), or nothing in function space."""
    apart = stationary(torch.Generator().manual_seed(7), chains=2, draws=1)
    apart[1] += 100.0  # the chains disagree: nothing may call this run converged
    health = assess(RunRecord(steps=123, burn_in=0, thinning=1, chains=2, draws_per_chain=123,
                              traces={"heldout_lpd": apart}, function_space=("heldout_lpd",)))
    assert health.verdict == "warning" and codes(health) == ["unchecked"]
    assert "recorded 1 point(s) per chain" in health.reasons[0].message
    assert "every_n_steps" in health.reasons[0].advice
    blind = assess(RunRecord(steps=1000, burn_in=500, thinning=1, chains=4, draws_per_chain=500))
    assert codes(blind) == ["unchecked"] and "no function-space trace" in blind.reasons[0].message
    # one chain: single_chain says it already
    assert codes(assess(RunRecord(steps=1000, burn_in=500, thinning=1, chains=1, draws_per_chain=500))) == [
        "single_chain"]


def test_chains_offset_by_a_fraction_of_their_spread_fail_on_rhat():
    heldout = stationary(torch.Generator().manual_seed(2))
    heldout[: CHAINS // 2] += 1.0  # within mode_sd of each other, but clearly not one distribution
    health = assess(record(heldout))
    assert "rhat" in codes(health) and "separate_modes" not in codes(health)
    assert health.verdict == "failed"
    rhat = next(r for r in health.reasons if r.code == "rhat")
    assert "heldout_lpd" in rhat.message


def test_a_slightly_high_rhat_only_warns():
    heldout = stationary(torch.Generator().manual_seed(3))
    heldout[: CHAINS // 2] += 0.12
    health = assess(record(heldout), HealthThresholds(rhat_warn=1.001, rhat_fail=1.5))
    assert [r.severity for r in health.reasons if r.code == "rhat"] == ["warning"]


def test_strongly_autocorrelated_chains_have_too_few_effective_draws():
    health = assess(record(stationary(torch.Generator().manual_seed(4), rho=0.99)))
    assert "low_ess" in codes(health)


def test_a_drifting_log_density_is_a_trend():
    heldout = stationary(torch.Generator().manual_seed(5)) + torch.linspace(0, 1.5, DRAWS, dtype=torch.float64)
    health = assess(record(heldout))
    assert "trend" in codes(health)
    assert "rises" in next(r for r in health.reasons if r.code == "trend").message


def test_chains_in_two_modes_are_separate_modes():
    heldout = stationary(torch.Generator().manual_seed(6)) * 0.05
    heldout[:2] -= 0.6  # two chains on a plateau far below the others, as in deep XOR
    health = assess(record(heldout))
    assert health.verdict == "failed" and "separate_modes" in codes(health)
    assert "2 of 8 chains" in next(r for r in health.reasons if r.code == "separate_modes").message


def test_a_rising_energy_is_a_divergence():
    energy = stationary(torch.Generator().manual_seed(7))
    energy[3] += torch.linspace(0, 40, DRAWS, dtype=torch.float64)
    health = assess(record(stationary(torch.Generator().manual_seed(8)), energy=energy))
    assert "divergence" in codes(health) and health.verdict == "failed"


def test_acceptance_outside_the_band_warns_and_non_finite_energies_fail():
    rates = {"1": 0.02, "2": 0.4, "3": 0.99}
    health = assess(record(stationary(torch.Generator().manual_seed(10)), acceptance=rates, nonfinite_steps=3))
    assert codes(health) == ["nonfinite", "acceptance"]
    assert "1: 0.02" in health.reasons[1].message and "3: 0.99" in health.reasons[1].message
    assert "2: 0.40" not in health.reasons[1].message


@pytest.mark.parametrize("offset, scale, verdict", [
    (0.0, 0.05, "ok"), (0.3, 0.05, "warning"), (1.0, 0.05, "failed"), (-0.3, 0.05, "warning"),
    (0.3, 20.0, "ok"),  # as far from 1, but within its Monte Carlo error: no evidence of bias
])
def test_a_configurational_temperature_away_from_one_is_a_biased_run(offset, scale, verdict):
    generator = torch.Generator().manual_seed(11)
    temperature = 1.0 + offset + scale * stationary(generator, rho=0.5)
    health = assess(record(stationary(generator), config_temperature=temperature))
    assert health.verdict == verdict, health.report()
    if verdict != "ok":
        (reason,) = health.reasons
        assert reason.code == "temperature" and "configurational temperature is" in reason.message
        assert abs(float(reason.message.split(" is ")[1].split(" ")[0]) - (1 + offset)) < 0.02


@pytest.mark.parametrize("options, name", [
    ({"rhat_warn": 0.9}, "rhat_warn"), ({"rhat_warn": 1.1, "rhat_fail": 1.05}, "rhat_fail"),
    ({"acceptance_band": (0.5, 0.2)}, "acceptance_band"), ({"trend_p": 2.0}, "trend_p"),
    ({"temperature_warn": 0.5, "temperature_fail": 0.2}, "temperature_fail"),
])
def test_bad_thresholds_are_named(options, name):
    with pytest.raises(ValueError, match=name):
        RunHealth(**options)


def conjugate_fit(tmp_path, burn_in, max_steps, batch_size=None, **options):
    """Full-batch SGLD on a conjugate linear regression (posterior covariance about I / 257) with RunHealth."""
    health = RunHealth()
    callbacks = [PosteriorSamples(max_draws=1000), ChainDiagnostics(num_projections=2), health, RunSummary()]
    trainer = L.Trainer(max_steps=max_steps, default_root_dir=tmp_path, callbacks=callbacks, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0)
    settings = dict(stepper="sgld", step_size=1e-3, num_chains=4, burn_in=burn_in, seed=0, init="prior")
    settings.update(options)
    trainer.fit(SGMCMC(nn.Linear(3, 1), Gaussian(1.0), **settings),
                datamodule=LinearRegression(num_train=256, num_val=32, num_test=32, batch_size=batch_size))
    return health, json.loads((tmp_path / "summary.json").read_text())


def test_assess_last_judges_the_end_of_the_traces_after_a_transient(monkeypatch):
    """Chains that start apart and agree from half-way (a run keeping draws from its first step):
    failed on every draw, ok on the last half, whose R-hat and ESS are computed again."""
    trace = stationary(torch.Generator().manual_seed(3))
    trace[:, : DRAWS // 2] += torch.arange(CHAINS, dtype=torch.float64)[:, None]  # the transient
    whole = record(trace, steps=DRAWS, burn_in=0)
    assert assess(whole).verdict == "failed" and "rhat" in codes(assess(whole))
    monitor = RunHealth()
    monkeypatch.setattr(monitor, "record", lambda trainer, module: whole)
    health = monitor.assess_last(None, None, 0.5)
    assert health.verdict == "ok", health.report()
    assert health.draws_per_chain == DRAWS // 2 and health.draws_total == CHAINS * DRAWS // 2
    with pytest.raises(ValueError, match="fraction"):
        monitor.assess_last(None, None, 0.0)


def test_a_converged_conjugate_run_is_ok_and_its_verdict_reaches_summary(tmp_path, capsys):
    health, summary = conjugate_fit(tmp_path, burn_in=0.25, max_steps=4000)
    assert health.health.verdict == "ok", health.health.report()
    assert summary["health"]["verdict"] == "ok" and summary["health"]["reasons"] == []
    assert summary["health"]["draws_per_chain"] == 1000 and summary["health"]["draws_total"] == 4000
    assert "Posterior health: OK" in capsys.readouterr().out


def test_chains_that_agree_on_a_biased_target_fail_on_their_temperature(tmp_path):
    """SGLD at a step near its stability limit on the conjugate regression (variance about 4x the posterior's),
    or on minibatches of 32 at a step whose gradient noise outweighs its injected noise: the chains agree (R-hat
    and ESS are fine) and are all too wide; the configurational temperature says so."""
    for step_size, batch_size in ((1.2e-2, None), (3e-3, 32)):
        health, summary = conjugate_fit(tmp_path, burn_in=0.25, max_steps=1200, step_size=step_size,
                                        batch_size=batch_size)
        assert [r["code"] for r in summary["health"]["reasons"]] == ["temperature"], health.health.report()
        assert summary["health"]["verdict"] == "failed"
        assert summary["metrics"]["diag/rhat/heldout_lpd"] < 1.01


@pytest.mark.parametrize("stepper, step_size", [("sgld", "1"), ("sghmc", "0.9")])
def test_the_main_job_at_a_far_too_large_step_fails_on_its_temperature(stepper, step_size, tmp_path):
    """The main job with SGLD at step 1 or its SGHMC at 0.9 predicts near chance with chains that agree with
    one another; the verdict names the bias (a fifth of the main job's epochs)."""
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "main.yaml"
    cli = fit_and_test(recipe, ["--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "320",
                                "--model.init_args.stepper", stepper, "--model.init_args.step_size", step_size,
                                "--model.init_args.stepper_options", "{}"])
    health = run_summary(cli)["health"]
    assert health["verdict"] == "failed"
    (reason,) = [r for r in health["reasons"] if r["code"] == "temperature"]
    assert reason["severity"] == "failed" and "wider than the target" in reason["message"]


def test_a_run_stopped_by_max_time_says_so(tmp_path):
    """Trainer(max_time=...) ends a fit early, as a finished one, with the draws it had: the verdict names the
    step it reached of those planned and the draws kept."""
    health = RunHealth()
    trainer = L.Trainer(max_steps=10**7, max_time={"seconds": 2}, default_root_dir=tmp_path, logger=False,
                        callbacks=[PosteriorSamples(), ChainDiagnostics(num_projections=2), health],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0)
    trainer.fit(SGMCMC(nn.Linear(3, 1), Gaussian(1.0), step_size=1e-3, num_chains=4, burn_in=100, seed=0),
                datamodule=LinearRegression(num_train=256, num_val=32, num_test=32, batch_size=None))
    assert 100 < trainer.global_step < 10**7
    reason = next(r for r in health.health.reasons if r.code == "stopped_early")
    assert reason.severity == "warning"
    assert f"stopped at step {trainer.global_step} of the {10**7}" in reason.message
    assert f"{health.health.draws_per_chain} draw(s) per chain" in reason.message


def test_a_burn_in_past_the_run_fails_and_says_so(tmp_path, capsys):
    with pytest.warns(UserWarning, match="no posterior draw will be kept"):
        health, summary = conjugate_fit(tmp_path, burn_in=500, max_steps=300)
    assert summary["health"]["verdict"] == "failed"
    assert [r["code"] for r in summary["health"]["reasons"]] == ["no_draws"]
    out = capsys.readouterr().out
    assert "Posterior health: FAILED" in out and "300 steps" in out and "burn_in is 500" in out
