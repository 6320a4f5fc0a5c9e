"""Exact resume: N steps equal k steps, a checkpoint, and N - k more; SIGKILL loses nothing; SIGTERM writes a
checkpoint and exits non-zero."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lit_bayes.callbacks.sample_store import read_disk_store
from lit_bayes import load_run
from lit_bayes.cli import fit_and_test, last_checkpoint, main
from lit_bayes.run_loading import newest_checkpoint
from tests.resume_runs import fit

ROOT = Path(__file__).resolve().parents[1]


SAMPLERS = ("sgld", "psgld", "sghmc", "sghmc_learned_map", "sghmc_exchange", "psgld_exchange_minibatch", "hmc", "mala",
            "ohsmc", "sgsmc")
CASES = [(s, "memory") for s in SAMPLERS] + [("sghmc", "disk"), ("sgld", "disk")]


@pytest.mark.parametrize("sampler, store", CASES)
def test_resumed_chain_equals_uninterrupted_chain(sampler, store, tmp_path):
    full, full_samples = fit(str(tmp_path / "full"), 6, sampler, store)
    fit(str(tmp_path / "split"), 3, sampler, store)
    resumed, resumed_samples = fit(str(tmp_path / "split"), 6, sampler, store,
                                   ckpt_path=str(tmp_path / "split" / "ckpt" / "last.ckpt"))
    assert torch.equal(full.chains.flat(), resumed.chains.flat())
    assert torch.equal(full_samples.trace(), resumed_samples.trace())
    assert full_samples.trace().shape[1] == (24 - 2) // 2
    if sampler == "sghmc_learned_map":  # also the learned prior precisions
        assert torch.equal(full.prior.precisions, resumed.prior.precisions)
    if sampler in ("ohsmc", "sgsmc"):  # also the trained psi, the particle weights and the evidence
        for name, value in full.state_dict().items():
            assert torch.equal(value, resumed.state_dict()[name]), name
    if "exchange" in sampler:  # also the hotter replicas and the swap counts; swaps took place on both sides
        for name, value in full.state_dict().items():
            if name.startswith(("replicas.", "swap_")):
                assert torch.equal(value, resumed.state_dict()[name]), name
        assert 0 < full.swap_accepts.sum() < full.swap_attempts.sum() == 3 * (6 * 2 + 6 * 1)  # 3 chains, 12 rounds


@pytest.mark.parametrize("sampler", ["sgld", "sghmc", "ohsmc", "sgsmc"])
def test_resume_from_the_middle_of_an_epoch_equals_uninterrupted_chain(sampler, tmp_path):
    """Stopped after step 6 (epoch 1, batch 2 of 4): the resumed epoch continues with its
    remaining batches, not with a fresh pass over the data."""
    full, full_samples = fit(str(tmp_path / "full"), 6, sampler, "memory")
    fit(str(tmp_path / "split"), 6, sampler, "memory", max_steps=6)
    resumed, resumed_samples = fit(str(tmp_path / "split"), 6, sampler, "memory",
                                   ckpt_path=str(tmp_path / "split" / "ckpt" / "last.ckpt"))
    assert resumed.global_step == 24
    assert torch.equal(full.chains.flat(), resumed.chains.flat())
    assert torch.equal(full_samples.trace(), resumed_samples.trace())


@pytest.mark.parametrize("optimiser", ["map", "vb", "swag"])
def test_resumed_optimiser_equals_uninterrupted_one(optimiser, tmp_path):
    full, _ = fit(str(tmp_path / "full"), 6, optimiser, "memory")
    fit(str(tmp_path / "split"), 3, optimiser, "memory")
    resumed, _ = fit(str(tmp_path / "split"), 6, optimiser, "memory",
                     ckpt_path=str(tmp_path / "split" / "ckpt" / "last.ckpt"))
    assert torch.equal(full.chains.flat(), resumed.chains.flat())  # MAP's parameters, VB's variational means
    if optimiser == "vb":  # also the log-variances and the fitted psi
        assert torch.equal(full.log_variances.flat(), resumed.log_variances.flat())
        for a, b in zip(full.model.deterministic_parameters(), resumed.model.deterministic_parameters()):
            assert torch.equal(a, b)
    if optimiser == "swag":  # also the snapshot moments and deviations (one snapshot per epoch)
        assert int(full.snapshots) == 6
        for name in ("mean", "square_mean", "deviations"):
            assert torch.equal(getattr(full, name), getattr(resumed, name)), name


def test_checkpoint_of_another_device_type_resumes_with_a_new_stream_and_a_warning(tmp_path):
    """A CUDA run's generator state (16 bytes, Philox seed and offset) cannot be set on a CPU
    generator: the chains go on from their saved state with a stream seeded from the saved one,
    the same on every such resume, and a warning says the run will not repeat the original."""
    fit(str(tmp_path / "split"), 3, "sgld", "memory")
    checkpoint = torch.load(tmp_path / "split" / "ckpt" / "last.ckpt", weights_only=False)
    saved = checkpoint["lit_bayes_generators"]
    checkpoint["lit_bayes_generators"] = {name: torch.arange(16, dtype=torch.uint8) + i for i, name in enumerate(saved)}
    torch.save(checkpoint, tmp_path / "from_cuda.ckpt")
    resumed = []
    for run in ("first", "second"):
        with pytest.warns(UserWarning, match="'stepper' random stream was saved by a generator of another device"):
            sampler, _ = fit(str(tmp_path / run), 6, "sgld", "memory", ckpt_path=str(tmp_path / "from_cuda.ckpt"))
        resumed.append(sampler.chains.flat())
    full, _ = fit(str(tmp_path / "full"), 6, "sgld", "memory")
    assert torch.equal(resumed[0], resumed[1])
    assert not torch.equal(resumed[0], full.chains.flat())


@pytest.mark.parametrize("when", ["before_first_shard", "random"])
def test_sigkill_keeps_shards_and_resume_has_no_gap_or_duplicate(when, tmp_path):
    reference, reference_samples = fit(str(tmp_path / "reference"), 6)
    # step 5 is before the first shard (and the first checkpoint is at step 4); else any step of the 24
    kill_at = 5 if when == "before_first_shard" else random.Random().randint(1, 22)
    run = tmp_path / "killed"
    child = subprocess.run(
        [sys.executable, "-m", "tests.resume_runs", str(run), "--epochs", "6", "--kill-at", str(kill_at)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert child.returncode == -9, child.stderr[-2000:]
    index_path = run / "samples" / "index.json"
    if index_path.exists():  # every listed shard is complete and readable
        index = json.loads(index_path.read_text())
        assert read_disk_store(run / "samples").shape[1] == sum(s["draws"] for s in index["shards"])
    else:  # killed before the first shard: nothing half-written either
        assert not list(run.glob("samples/shard_*"))
    assert not list(run.glob("samples/*.tmp"))
    ckpt = run / "ckpt" / "last.ckpt"
    resumed, resumed_samples = fit(str(run), 6, ckpt_path=str(ckpt) if ckpt.exists() else None)
    assert torch.equal(resumed_samples.trace(), reference_samples.trace()), f"killed at step {kill_at}"
    assert torch.equal(read_disk_store(run / "samples"), read_disk_store(tmp_path / "reference" / "samples"))


RECIPE = str(ROOT / "recipes" / "xor_sgld.yaml")
SMALL = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "5", "--model.init_args.burn_in", "2",
         "--model.init_args.num_chains", "4"]


def stop_with_sigterm(root: str, step: int, cwd: Path = ROOT,
                      signal_name: str = "SIGTERM") -> subprocess.CompletedProcess:
    """``lit-bayes fit`` of the small xor run under ``root``, sent SIGTERM (or ``signal_name``) by itself after
    ``step``; a checkpoint at every epoch end (5 steps)."""
    return subprocess.run(
        [sys.executable, "-m", "lit_bayes.cli", "fit", "-c", RECIPE, "--trainer.default_root_dir", root,
         "--wandb", "false", "--trainer.enable_progress_bar", "false", *SMALL, "--checkpoint.min_steps", "1",
         "--trainer.callbacks+=tests.resume_runs.KillAtStep", "--trainer.callbacks.step", str(step),
         "--trainer.callbacks.signal_name", signal_name],
        cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_sigterm_writes_a_checkpoint_exits_143_and_the_run_resumes_exactly(tmp_path):
    """What a batch scheduler sends: the command stops after the step, writes last.ckpt, names it and exits with
    128 + SIGTERM; --ckpt_path continues the chain as if never stopped."""
    stopped = tmp_path / "stopped"
    child = stop_with_sigterm(str(stopped), 7)
    assert child.returncode == 143, child.stderr[-3000:]
    checkpoint = stopped / "version_0" / "checkpoints" / "last.ckpt"
    assert f"stopped by SIGTERM after step 7: {checkpoint} continues the run" in child.stderr
    assert torch.load(checkpoint, weights_only=True)["global_step"] == 7
    resumed = fit_and_test(RECIPE, ["--trainer.default_root_dir", str(stopped), *SMALL], ckpt_path=checkpoint)
    full = fit_and_test(RECIPE, ["--trainer.default_root_dir", str(tmp_path / "full"), *SMALL])
    assert resumed.trainer.global_step == full.trainer.global_step == 10
    assert torch.equal(resumed.model.chains.flat(), full.model.chains.flat())


@pytest.mark.parametrize("how", ["absolute_path", "moved", "killed"])
def test_a_resume_under_another_spelling_of_its_path_overwrites_last_ckpt(how, tmp_path):
    """Started under a relative path and stopped by SIGTERM (or SIGKILL, last.ckpt then at the epoch end before);
    resumed under the absolute path, or after the runs folder moved: the final state goes to last.ckpt (no
    last-v1.ckpt beside a stale one), and load_run reads every draw summary.json counts."""
    signal_name, code = ("SIGKILL", -9) if how == "killed" else ("SIGTERM", 143)
    assert stop_with_sigterm("runs", 7, cwd=tmp_path, signal_name=signal_name).returncode == code
    root = tmp_path / "runs"
    if how == "moved":
        root = root.rename(tmp_path / "elsewhere")
    checkpoints = root / "version_0" / "checkpoints"
    fit_and_test(RECIPE, ["--trainer.default_root_dir", str(root), *SMALL], ckpt_path=checkpoints / "last.ckpt")
    assert sorted(p.name for p in checkpoints.glob("last*.ckpt")) == ["last.ckpt"]
    assert torch.load(checkpoints / "last.ckpt", weights_only=True)["global_step"] == 10
    summary = json.loads((root / "version_0" / "summary.json").read_text())
    assert load_run(root / "version_0").num_draws == 4 * 8 == summary["health"]["draws_total"]


def test_load_run_reads_the_checkpoint_with_the_most_steps(tmp_path):
    """A stale last.ckpt beside a newer numbered checkpoint (a kill between Lightning's two writes of a step)."""
    child = stop_with_sigterm(str(tmp_path), 7)
    assert child.returncode == 143
    checkpoints = tmp_path / "version_0" / "checkpoints"
    fit_and_test(RECIPE, ["--trainer.default_root_dir", str(tmp_path), *SMALL], ckpt_path=checkpoints / "last.ckpt")
    final = torch.load(checkpoints / "last.ckpt", weights_only=True)
    (checkpoints / "last.ckpt").rename(checkpoints / "final.ckpt")
    stale = dict(final, global_step=7)
    torch.save(stale, checkpoints / "last.ckpt")
    assert newest_checkpoint(checkpoints.glob("*.ckpt")) == checkpoints / "final.ckpt"
    assert last_checkpoint(tmp_path) == checkpoints / "final.ckpt"


def test_a_resume_on_other_data_settings_is_refused_naming_them(tmp_path, capsys):
    """The run's config.yaml records its data; --ckpt_path with another data seed or noise would continue the
    chain on other data (and overwrite the record): a one-line error naming each setting, and the record kept."""
    assert stop_with_sigterm(str(tmp_path), 7).returncode == 143
    checkpoint = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    saved = (tmp_path / "version_0" / "config.yaml").read_text()
    with pytest.raises(SystemExit) as stop:
        main(["fit", "-c", RECIPE, "--trainer.default_root_dir", str(tmp_path), "--wandb", "false", *SMALL,
              "--data.init_args.seed", "1", "--data.init_args.offset", "0.3", "--ckpt_path", str(checkpoint)])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "data.init_args.seed: 1 given, 0 in the run" in error and "data.init_args.offset: 0.3 given" in error
    assert (tmp_path / "version_0" / "config.yaml").read_text() == saved
