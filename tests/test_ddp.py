"""Two CPU processes (gloo) with ChainParallel: independent chains, gathered samples and metrics."""
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from lit_bayes.strategy import release_process_group

ROOT = Path(__file__).resolve().parents[1]


def run_two_processes(command, root):
    """Run a 2-process command writing under ``root``; a launch that exits non-zero is run
    once more, from an emptied ``root``.

    CI failed the OHSMC launch once (its output not kept), and a later CI-style run saw the
    MAP launch abort after its run had finished ("terminate called without an active
    exception", exit -6: a gloo group left to interpreter shutdown), which
    :func:`release_process_group` is there to prevent. That is too rare (none in ~150 local
    launches) to show gone, so the first failure's exit code and stderr become a warning,
    which the run's warnings summary shows; a second failure fails the test with both stderrs."""
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if first.returncode == 0:
        return first
    warnings.warn(f"{command[3:]} exited {first.returncode}; run again. stderr: {first.stderr[-2000:]}")
    shutil.rmtree(root)
    root.mkdir()
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, f"first run: {first.stderr[-2000:]}\nsecond run: {again.stderr[-2000:]}"
    return again


def launch(tmp_path, kind):
    run_two_processes([sys.executable, "-m", "tests.ddp_run", str(tmp_path), kind], tmp_path)
    return torch.load(tmp_path / "result.pt", weights_only=True)


@pytest.mark.parametrize("kind", ["sgld", "gibbs"])
def test_chains_are_distinct_streams_gathered_everywhere(kind, tmp_path):
    result = launch(tmp_path, kind)
    initial = result["initial"]  # 2 processes x 2 chains
    assert initial.shape == (4, 4)
    assert len({tuple(row.tolist()) for row in initial}) == 4  # no broadcast of rank 0's chains
    samples = result["samples"]  # every chain of both processes, 15 draws each, chain-major
    assert samples.shape == (60, 4)
    traces = samples.reshape(4, 15, 4)
    assert all(not torch.equal(traces[i], traces[j]) for i in range(4) for j in range(i + 1, 4))
    torch.testing.assert_close(result["log_weights"].logsumexp(0), torch.tensor(0.0))
    assert {"test/nlpd", "test/rmse"} <= set(result["metrics"])
    # R-hat over the 4 chains of both processes: the energy trace has one value per chain
    assert "diag/rhat/energy" in result["diag"] and "diag/rhat_max" in result["diag"]


def test_ohsmc_keeps_one_particle_cloud_over_the_global_batch(tmp_path):
    """Data-parallel OHSMC (feynman-kac spec pitfall §8.7): the processes see different batches,
    yet after 4 steps hold identical particles and psi, so moves and resampling shared one random
    stream, the weights used the summed (global-batch) likelihood and the psi-gradients were averaged."""
    result = launch(tmp_path, "ohsmc")
    assert result["first_batch"][0] != result["first_batch"][1]
    replicas = result["replicas"]
    assert replicas.shape[0] == 2
    assert torch.equal(replicas[0], replicas[1]), (
        f"max |difference| {(replicas[0] - replicas[1]).abs().max():.3g} "
        f"at {(replicas[0] != replicas[1]).nonzero().flatten()[:10].tolist()}")


def test_gradients_stay_local_to_each_process(tmp_path):
    errors = launch(tmp_path, "map")["errors"]
    assert errors.shape == (2,)
    assert errors.max() < 1e-6, errors


def test_cli_run_with_two_processes_writes_one_summary(tmp_path):
    """Every callback the CLI adds survives ChainParallel (no collective called on one rank only)."""
    run_two_processes(
        [sys.executable, "-m", "lit_bayes.cli", "fit", "-c", str(ROOT / "recipes" / "xor_sgld.yaml"),
         "--trainer.strategy", "chain_parallel", "--trainer.accelerator", "cpu", "--trainer.devices", "2",
         "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "6", "--model.init_args.burn_in", "2",
         "--model.init_args.thinning", "1",
         "--trainer.default_root_dir", str(tmp_path), "--wandb", "false", "--trainer.enable_progress_bar", "false"],
        tmp_path,
    )
    (summary,) = tmp_path.rglob("summary.json")
    metrics = json.loads(summary.read_text())["metrics"]
    assert {"test/accuracy", "test/nlpd", "diag/rhat_max"} <= set(metrics)


def test_a_sampler_in_a_process_group_releases_it_at_exit(tmp_path):
    """A gloo group left to interpreter shutdown can abort a finished run (exit -6, seen in a CI-style run):
    a sampler set up inside a process group registers ``release_process_group`` at exit (importing
    lit_bayes does not). The probe is registered first, so it runs after that handler (atexit is last in,
    first out)."""
    code = (
        "import atexit, lightning as L, torch.distributed as dist\n"
        "from torch import nn\n"
        "atexit.register(lambda: print('initialized at exit:', dist.is_initialized()))\n"
        "from lit_bayes import Gaussian, SGMCMC\n"
        "from lit_bayes.data import LinearRegression\n"
        f"dist.init_process_group('gloo', init_method='file://{tmp_path / 'store'}', rank=0, world_size=1)\n"
        "L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,\n"
        "          enable_model_summary=False, limit_val_batches=0).fit(\n"
        "    SGMCMC(nn.Linear(3, 1), Gaussian(), step_size=1e-3),\n"
        "    datamodule=LinearRegression(num_train=4, num_val=2, num_test=2, batch_size=4))\n"
        "print('initialized:', dist.is_initialized())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-3:-1] == ["initialized: True", "initialized at exit: False"], done.stdout
    release_process_group()  # without a group: nothing to do
