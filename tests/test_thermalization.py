"""ThermalizationCheck (noisy-gibbs spec §4): informed chains start at the teacher, the merge of the
uninformed chains' test MSE is detected when every chain thermalizes fast and reported missing when
the uninformed chains cannot reach equilibrium, summary.json, exact resume and bad arguments."""
import json
import math
import os

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import Logger

from lit_bayes.callbacks.run_summary import RunSummary
from lit_bayes.callbacks.thermalization import (RHAT_COLUMNS, RHAT_PERCENTILES, ThermalizationCheck, merge_band,
                                                merge_indices, settled_index)
from lit_bayes.diagnostics import split_rhat
from lit_bayes.data import LinearRegression
from lit_bayes.data.teacher_student import TeacherStudent
from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.samplers.noisy_gibbs import NoisyGibbs

WIDTHS = (5, 4, 1)


class RecordedMetrics(Logger):
    """Keeps every ``log_metrics`` call."""

    name, version = "recorded", 0

    def __init__(self):
        super().__init__()
        self.logged: list[dict[str, float]] = []

    def log_metrics(self, metrics, step=None):
        self.logged.append(dict(metrics))

    def log_hyperparams(self, params, *args, **kwargs):
        pass


def fit(activation, delta, init, steps, root, callbacks=(), ckpt_path=None, num_chains=3, data_seed=0, logger=False,
        **check):
    torch.set_num_threads(1)
    data = TeacherStudent(widths=WIDTHS, activation=activation, delta_z=delta, delta_x=delta, num_train=60,
                          num_test=100, seed=data_seed)
    informed = 0 if check.get("informed_run") else 1  # the chains the sampler starts at the teacher
    sampler = NoisyGibbs(NoisyMLP(WIDTHS, activation, delta, delta), num_chains=num_chains, init=init, seed=1,
                         informed_chains=informed)
    options = dict(every_n_steps=2, window=10, rhat_block=25, rhat_points=20, tolerance=0.5)
    check_callback = ThermalizationCheck(**{**options, **check})
    checkpointing = any(isinstance(c, ModelCheckpoint) for c in callbacks)
    trainer = L.Trainer(logger=logger, enable_checkpointing=checkpointing, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[check_callback, *callbacks], max_epochs=steps,
                        limit_val_batches=0, default_root_dir=root)
    trainer.fit(sampler, datamodule=data, ckpt_path=ckpt_path)
    return check_callback, sampler, data


def test_merge_is_detected_when_every_chain_thermalizes(tmp_path):
    """A linear hidden layer at Delta = 0.5: the posterior is nearly Gaussian and zero-started chains
    reach the informed chain's test MSE within a few dozen sweeps. The merge rule smooths over 25 records
    (50 sweeps): on so small a problem single records swing by more than the band (at Delta = 0.05 and a
    10-record window the merge step of 12 seeds ranged from 26 to 294 sweeps, or never)."""
    recorded = RecordedMetrics()
    check, sampler, data = fit("linear", 0.5, "zeros", 300, tmp_path, callbacks=[RunSummary(str(tmp_path))],
                               window=25, logger=recorded)
    traces = check.traces()
    assert traces["steps"][0] == 0 and traces["steps"][-1] == 300 and traces["test_mse"].shape == (3, 151)
    assert traces["test_mse"][0, 0] < 1e-10 < traces["test_mse"][1, 0]  # chain 0 starts at the teacher
    metrics = json.loads((tmp_path / "summary.json").read_text())["metrics"]
    assert metrics["thermalization/merged"] == 1.0 and metrics["thermalization/merged_fraction"] == 1.0
    assert 0 <= metrics["thermalization/merge_step"] <= 150  # 12 seeds: 22-192, 10 of them <= 72
    per_chain = [metrics[f"thermalization/merge_step/chain_{c}"] for c in (1, 2)]
    assert max(per_chain) == metrics["thermalization/merge_step"] and "thermalization/merge_step/chain_0" not in metrics
    assert metrics["thermalization/band_low"] < metrics["thermalization/informed_test_mse"] \
        < metrics["thermalization/band_high"]
    assert metrics["thermalization/score_step"] <= 150
    assert traces["rhat"].shape == (6, RHAT_COLUMNS) and math.isfinite(metrics["thermalization/rhat"])
    records = [m for m in recorded.logged if "thermalization/test_mse/chain_0" in m]  # not the summary's
    names = [f"thermalization/{name}" for name in ("rhat", "rhat_uninformed")]
    names += [f"thermalization/{name}_p{q}" for name in ("rhat", "rhat_uninformed") for q in RHAT_PERCENTILES]
    rhats = [[m[n] for n in names] for m in records if "thermalization/rhat" in m]
    assert torch.equal(torch.tensor(rhats, dtype=torch.float64), traces["rhat"][:, 1:])
    percentiles = traces["rhat"][:, 3:7]  # all chains' per-point R-hat: finite, ordered, around the mean
    assert torch.isfinite(percentiles).all() and (percentiles.diff(dim=1) >= 0).all()
    assert (percentiles[:, 0] <= traces["rhat"][:, 1] * 1.5).all() and metrics["thermalization/rhat_p95"] >= 1.0


def test_not_merged_when_the_uninformed_chains_are_stuck(tmp_path):
    """sign activations at Delta = 1e-4: a pre-activation cannot change sign (App. E.2, the mass ratio
    exp(2x / Delta_X)), so prior-started chains stay far from the teacher's function while the informed
    chain sits at its equilibrium test MSE."""
    check, _, _ = fit("sign", 1e-4, "prior", 150, tmp_path)
    metrics = check.summary_metrics()
    assert metrics["thermalization/merged"] == 0.0 and metrics["thermalization/merged_fraction"] == 0.0
    assert math.isnan(metrics["thermalization/merge_step"])
    assert all(math.isnan(metrics[f"thermalization/merge_step/chain_{c}"]) for c in (1, 2))
    assert metrics["thermalization/uninformed_test_mse"] > 10 * metrics["thermalization/band_high"]


def test_informed_chain_starts_at_the_teacher_and_its_latents(tmp_path):
    check, sampler, data = fit("relu", 1e-3, "zeros", 1, tmp_path)
    assert check.traces()["test_mse"][0, 0] < 1e-10
    assert all(p[1:].abs().max() > 0 for p in sampler.chains.as_dict().values())  # others moved from zero


def test_resumed_run_continues_the_traces_exactly(tmp_path):
    """12 sweeps == 6 sweeps + checkpoint + 6, including a half-filled R-hat block."""
    full, full_sampler, _ = fit("relu", 1e-2, "prior", 12, str(tmp_path / "full"), rhat_block=4)
    checkpoint = lambda: ModelCheckpoint(dirpath=os.path.join(tmp_path, "ckpt"), save_last=True,  # noqa: E731
                                         save_on_train_epoch_end=True, every_n_epochs=1)
    fit("relu", 1e-2, "prior", 6, str(tmp_path / "split"), callbacks=[checkpoint()], rhat_block=4)
    resumed, resumed_sampler, _ = fit("relu", 1e-2, "prior", 12, str(tmp_path / "split"), callbacks=[checkpoint()],
                                      ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"), rhat_block=4)
    assert torch.equal(full_sampler.chains.flat(), resumed_sampler.chains.flat())
    for name, value in full.traces().items():
        assert torch.equal(value, resumed.traces()[name]), name
    assert full.traces()["rhat"].shape == (1, RHAT_COLUMNS)  # 7 records: one full block of 4, three pending


def test_block_rhat_is_the_mean_and_percentiles_of_the_per_point_split_rhat():
    """Fig. 4's percentiles (25/50/75/95) of the per-test-point R-hat, beside their mean."""
    gen = torch.Generator().manual_seed(0)
    block = torch.randn(3, 40, 30, generator=gen, dtype=torch.float64)
    block[0, :, :10] += 2.0  # a third of the points in separate modes: a wide spread of R-hat values
    per_point = torch.as_tensor(split_rhat(block), dtype=torch.float64).flatten()
    stats = ThermalizationCheck._block_rhat(block)
    assert stats.shape == (1 + len(RHAT_PERCENTILES),)
    torch.testing.assert_close(stats[0], per_point.mean())
    expected = [float(per_point.quantile(q / 100)) for q in RHAT_PERCENTILES]
    torch.testing.assert_close(stats[1:], torch.tensor(expected, dtype=torch.float64))
    assert stats[-1] > 1.2 > stats[1]  # the separated points dominate the top percentile only
    assert torch.isnan(ThermalizationCheck._block_rhat(block[:1])).all()  # one chain: no R-hat


def test_checkpoint_without_rhat_percentiles_loads_with_nan():
    """A checkpoint written before the percentiles (R-hat rows of 3 columns) resumes: NaN in their place."""
    check = ThermalizationCheck(rhat_block=4)
    state = check.state_dict()
    state["rhat"] = torch.tensor([[400.0, 1.2, 1.1]], dtype=torch.float64)
    check.load_state_dict(state)
    row = check.traces()["rhat"][0]
    assert row.shape == (RHAT_COLUMNS,) and row[:3].tolist() == [400.0, 1.2, 1.1] and torch.isnan(row[3:]).all()


def last_checkpoint_every(steps, directory):
    return ModelCheckpoint(dirpath=directory, save_last=True, save_on_train_epoch_end=True, every_n_epochs=steps)


def same_metrics(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def test_informed_chain_read_from_an_earlier_run(tmp_path):
    """With ``informed_run`` every chain of the run is uninformed and the merge rule takes the earlier run's
    informed records: the verdict equals the one given with those records as the run's own chain 0. The
    records travel in the run's state, so a report from it needs the earlier checkpoint no more."""
    first, _, _ = fit("linear", 0.05, "zeros", 300, tmp_path / "a",
                      callbacks=[last_checkpoint_every(300, tmp_path / "a")])
    informed_run = str(tmp_path / "a" / "last.ckpt")
    recorded = RecordedMetrics()
    read, sampler, _ = fit("linear", 0.05, "zeros", 300, tmp_path / "b", num_chains=2, informed_run=informed_run,
                           logger=recorded)
    traces, informed = read.traces(), first.traces()
    assert traces["test_mse"].shape == (2, 151) and (traces["test_mse"][:, 0] > 1e-3).all()  # none at the teacher
    assert torch.equal(traces["steps"], informed["steps"])
    own = ThermalizationCheck(every_n_steps=2, window=10, rhat_block=25, rhat_points=20, tolerance=0.5)
    own.load_state_dict({"steps": traces["steps"], "rhat": traces["rhat"],
                         "test_mse": torch.cat([informed["test_mse"][:1], traces["test_mse"]]),
                         "score": torch.cat([informed["score"][:1], traces["score"]]),
                         "rhat_pending": torch.zeros(0, 0, 0, dtype=torch.float64)})
    expected = {k.replace("chain_1", "chain_0").replace("chain_2", "chain_1"): v
                for k, v in own.summary_metrics().items()}
    metrics = read.summary_metrics()
    assert metrics["thermalization/merged"] == 1.0  # the read chains do merge with the read informed chain
    assert math.isnan(metrics["thermalization/rhat"]) and math.isfinite(metrics["thermalization/rhat_uninformed"])
    for key in ("thermalization/rhat", "thermalization/rhat_step"):
        expected[key] = metrics[key]  # R-hat with the informed chain needs its outputs: NaN when read
    records = [m for m in recorded.logged if "thermalization/test_mse/chain_0" in m]
    blocks = [m for m in records if "thermalization/rhat_uninformed" in m]
    assert len(blocks) == len(traces["rhat"]) == 6  # logged where defined, the undefined one not at all
    assert not any("thermalization/rhat" in m for m in records)
    assert same_metrics(metrics, expected)
    state = read.state_dict()
    (tmp_path / "a" / "last.ckpt").unlink()
    reported = ThermalizationCheck(every_n_steps=2, window=10, rhat_block=25, rhat_points=20, tolerance=0.5,
                                   informed_run=informed_run)
    reported.load_state_dict(state)
    assert same_metrics(reported.summary_metrics(), metrics)


def test_informed_run_must_come_from_an_informed_run_on_the_same_teacher(tmp_path):
    fit("relu", 0.1, "zeros", 4, tmp_path / "a", callbacks=[last_checkpoint_every(4, tmp_path / "a")],
        every_n_steps=1, window=2, rhat_block=4)
    informed_run = str(tmp_path / "a" / "last.ckpt")
    with pytest.raises(ValueError, match="informed_run .* was run on another teacher or data set"):
        fit("relu", 0.1, "zeros", 2, tmp_path / "b", num_chains=1, data_seed=1, informed_run=informed_run)
    fit("relu", 0.1, "zeros", 4, tmp_path / "c", num_chains=1, informed_run=informed_run, every_n_steps=1, window=2,
        rhat_block=4, callbacks=[last_checkpoint_every(4, tmp_path / "c")])
    with pytest.raises(ValueError, match="informed_run .* has no informed chain"):
        fit("relu", 0.1, "zeros", 2, tmp_path / "d", num_chains=1, informed_run=str(tmp_path / "c" / "last.ckpt"))
    torch.save({"callbacks": {}}, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match="informed_run .* holds no ThermalizationCheck records"):
        fit("relu", 0.1, "zeros", 2, tmp_path / "e", num_chains=1, informed_run=str(tmp_path / "other.ckpt"))


def test_settled_index_allows_a_fraction_delta_outside():
    inside = torch.tensor([False, False, True, True, False, True, True, True, True, True])
    assert settled_index(inside, 0.0) == 5
    assert settled_index(inside, 0.2) == 2
    assert settled_index(torch.tensor([True, False]), 0.1) is None


@pytest.mark.parametrize("kwargs, message", [
    (dict(informed_chains=0), "informed_chains must be an integer >= 1"),
    (dict(every_n_steps=0), "every_n_steps must be an integer >= 1"),
    (dict(window=1.5), "window must be an integer >= 1"),
    (dict(tolerance=0.0), "tolerance must be a number > 0"),
    (dict(delta=1.0), r"delta must be a number in \(0, 1\)"),
    (dict(reference_fraction=1.5), r"reference_fraction must be a number in \(0, 1\]"),
    (dict(rhat_points=0), "rhat_points must be an integer >= 1"),
    (dict(rhat_block=3), "rhat_block must be an integer >= 4"),
    (dict(rhat_threshold=1.0), "rhat_threshold must be a number > 1"),
    (dict(informed_chains=1, informed_run="earlier.ckpt"), "informed_chains must be 0 with informed_run"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ThermalizationCheck(**kwargs)


def test_bad_setups(tmp_path):
    def run(sampler, data, **kwargs):
        L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_steps=1,
                  callbacks=[ThermalizationCheck(**kwargs)], limit_val_batches=0,
                  default_root_dir=tmp_path).fit(sampler, datamodule=data)

    teacher_data = TeacherStudent(widths=(3, 2, 1), num_train=10, num_test=5)
    with pytest.raises(ValueError, match="informed_chains .2. must be smaller than the sampler's num_chains .2."):
        run(NoisyGibbs(NoisyMLP([3, 2, 1], delta_z=1e-4, delta_x=1e-4), num_chains=2), teacher_data,
            informed_chains=2)
    with pytest.raises(ValueError, match="teacher's widths"):
        run(NoisyGibbs(NoisyMLP([3, 4, 1]), num_chains=2), teacher_data)
    with pytest.raises(ValueError, match="teacher-student DataModule exposing `teacher`"):
        run(NoisyGibbs(NoisyMLP([3, 1]), num_chains=2), LinearRegression(num_train=10, num_val=1, num_test=5))


def test_per_chain_initial_state_arguments():
    sampler = NoisyGibbs(NoisyMLP([2, 3, 1]), num_chains=2)
    params = {n: torch.ones_like(p) for n, p in sampler.model.named_parameters()}
    with pytest.raises(ValueError, match=r"chains must list distinct chain indices in \[0, 2\)"):
        sampler.set_initial_parameters(params, [2])
    with pytest.raises(ValueError, match=r"parameters must hold exactly"):
        sampler.set_initial_parameters({"layers.0.weight": params["layers.0.weight"]})
    with pytest.raises(ValueError, match=r"parameters\['layers.1.bias'\] must have shape \(1,\)"):
        sampler.set_initial_parameters({**params, "layers.1.bias": torch.ones(2)})
    with pytest.raises(ValueError, match=r"latents\['z2'\] must have shape .* C = 1 chains"):
        sampler.set_initial_latents(torch.zeros(4, 2), torch.zeros(4), {"z2": torch.zeros(2, 4, 3),
                                                                        "x2": torch.zeros(4, 3)}, [1])
    sampler.set_initial_parameters(params, [1])
    sampler.setup("fit")
    state = sampler.chains.as_dict()
    assert (state["net.layers.0.weight"][1] == 1).all() and (state["net.layers.0.weight"][0] == 0).all()
    with pytest.raises(RuntimeError, match="set_initial_parameters must be called before fit"):
        sampler.set_initial_parameters(params)


def test_records_reach_the_csv_file_during_the_run(tmp_path):
    """Records are logged at steps 0, every_n_steps, ...; the CSV logger flushes only on steps
    s with (s + 1) % 100 == 0 unless saved, so without the save a long run's metrics.csv stays
    empty until the end."""
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.loggers import CSVLogger

    rows = []

    class ReadCSV(Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            if trainer.current_epoch == 40:
                path = tmp_path / "version_0" / "metrics.csv"
                rows.extend(path.read_text().splitlines()[1:] if path.exists() else [])

    torch.set_num_threads(1)
    data = TeacherStudent(widths=WIDTHS, activation="relu", delta_z=0.1, delta_x=0.1, num_train=30, num_test=20)
    sampler = NoisyGibbs(NoisyMLP(WIDTHS, "relu", 0.1, 0.1), num_chains=2, init="zeros", informed_chains=1)
    trainer = L.Trainer(logger=CSVLogger(tmp_path, name=""), enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, max_epochs=50, limit_val_batches=0, log_every_n_steps=1000,
                        callbacks=[ThermalizationCheck(every_n_steps=10, window=2, rhat_block=4, rhat_points=4),
                                   ReadCSV()])
    trainer.fit(sampler, datamodule=data)
    assert len(rows) >= 4  # the records of steps 0, 10, 20, 30 (and 40)


def test_merge_band_and_merge_indices():
    """The merge rule as library functions (used by ThermalizationCheck and the Exp. B script): phi-bar is the
    mean of the informed records' last half, the band at least +-tolerance around it; a chain merges at the
    first record from which its trailing mean stays in the band."""
    informed = torch.full((1, 20), 2.0, dtype=torch.float64)
    reference, low, high = merge_band(informed, window=2, delta=0.1, tolerance=0.2, reference_fraction=0.5)
    assert reference == 2.0 and math.isclose(low, 1.6) and math.isclose(high, 2.4)
    merging = torch.tensor([[9.0] * 5 + [2.0] * 15, [9.0] * 20], dtype=torch.float64)
    assert merge_indices(merging, low, high, window=2, delta=0.0) == [6, None]


@pytest.mark.parametrize("informed_chains, message", [
    (-1, "informed_chains must be an integer >= 0"),
    (3, r"informed_chains \(3\) must be at most num_chains \(2\)"),
])
def test_sampler_informed_chains_is_checked(informed_chains, message):
    with pytest.raises(ValueError, match=message):
        NoisyGibbs(NoisyMLP([2, 3, 1]), num_chains=2, informed_chains=informed_chains)


def test_sampler_and_callback_must_agree_on_the_informed_chains(tmp_path):
    """The informed start is the sampler's configuration; the callback only checks it."""
    data = TeacherStudent(widths=(3, 2, 1), num_train=10, num_test=5)
    with pytest.raises(ValueError, match=r"the sampler's informed_chains \(0\) must equal ThermalizationCheck's"):
        L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_steps=1,
                  callbacks=[ThermalizationCheck()], limit_val_batches=0, default_root_dir=tmp_path).fit(
            NoisyGibbs(NoisyMLP([3, 2, 1]), num_chains=2), datamodule=data)


def test_timed_records_of_a_classical_sampler_reach_summary_json(tmp_path):
    """every_n_seconds with the Trainer's max_time (Exp. B's runs of a fixed budget): records at step 0, at the
    first step after each multiple of the interval and at the end, each with its time; a classical HMC with
    informed_chains=1 (no latents: no score) has chain 0 at the teacher; summary_records puts the records into
    summary.json for a script to read back."""
    from lit_bayes import HMC, Gaussian

    torch.set_num_threads(1)
    data = TeacherStudent(widths=WIDTHS, activation="relu", num_train=30, num_test=20, noiseless_labels=True)
    model = NoisyMLP(WIDTHS, "relu")
    sampler = HMC(model, Gaussian(0.3), model.prior(), step_size=1e-3, num_leapfrog=3, num_chains=2,
                  init="normal", init_std=1e-4, adapt_steps=0, informed_chains=1)
    check = ThermalizationCheck(every_n_seconds=0.1, window=2, rhat_block=4, rhat_points=5, summary_records=True)
    L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
              max_epochs=-1, max_time={"milliseconds": 600}, limit_val_batches=0, default_root_dir=tmp_path,
              callbacks=[check, RunSummary(str(tmp_path))]).fit(sampler, datamodule=data)
    times, steps = check.times(), check.traces()["steps"]
    # (no bound on how many steps fit in the budget: unit tests do not assert on speed)
    assert len(times) >= 2 and times[-1] > 0.55 and (times.diff() > 0).all()
    assert int(steps[-1]) == sampler.trainer.global_step > int(steps[-2])  # the last state is recorded too
    assert all(t >= 0.1 * k for k, t in enumerate(times[:-1].tolist()))  # not before its time
    summary = json.loads((tmp_path / "summary.json").read_text())
    records = summary["thermalization_records"]
    assert records["steps"] == steps.tolist() and records["times_s"] == times.tolist()
    assert len(records["test_mse"]) == 2 and records["test_mse"][0][0] < 1e-10 < records["test_mse"][1][0]
    metrics = summary["metrics"]
    assert metrics["thermalization/records"] == len(times) and metrics["thermalization/score_step"] is None
    assert "thermalization_records" not in ThermalizationCheck().summary_section(None, None)
    with pytest.raises(ValueError, match="every_n_seconds must be a number > 0"):
        ThermalizationCheck(every_n_seconds=0)
