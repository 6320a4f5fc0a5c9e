"""recipes/structured: the mixing summary (pooled and per-chain ESS) and the Fig. 3 MNIST script
end to end on MNIST idx files of random pixels."""
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.script_modules import load_script
from tests.test_data import write_mnist

STRUCTURED = Path(__file__).resolve().parents[1] / "recipes" / "structured"


def test_per_chain_ess_sees_independent_draws_that_the_pooled_ess_does_not():
    """Four chains of independent N(0, 1) draws, each around its own far-away centre (chains in
    different modes): every chain alone is an i.i.d. sample (ESS ~ its draws), pooled they
    disagree (ESS near the number of chains)."""
    draws = 400
    trace = torch.randn(4, draws, 30, generator=torch.Generator().manual_seed(0))
    trace += 50.0 * torch.arange(4.0)[:, None, None]
    result = load_script("structured_common", STRUCTURED / "common.py").mixing(trace)
    assert result["coords"] == 30 and result["draws_per_chain"] == draws
    assert 0.7 * draws < result["ess_within_median"] < 1.3 * draws
    assert result["ess_median"] < 10


def test_fig3_script_runs_on_mnist_files(tmp_path):
    write_mnist(tmp_path / "data", "MNIST")
    out = tmp_path / "runs"
    subprocess.run([sys.executable, str(STRUCTURED / "mnist_mlp.py"), "--data", "mnist", "--root", str(tmp_path / "data"),
                    "--stepper", "sgld", "--lr", "1e-5", "--epochs", "4", "--batch-size", "8", "--s-groups", "",
                    "--groups", "all", "--keep-probs", "0.5", "--num-masks", "2", "--out", str(out)],
                   check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    results = json.loads((out / "summary.json").read_text())["results"]
    assert sorted(results) == ["S_d-sgld M=42310 rho=0.5", "sgld"]
    sgld, dropout = results["sgld"], results["S_d-sgld M=42310 rho=0.5"]
    assert sgld["steps"] == dropout["steps"] == 12  # 24 images in batches of 8, 4 epochs
    assert dropout["forward_backward_passes"] == 2 * sgld["forward_backward_passes"]  # K = 2 composites a step
    for run in results.values():
        assert run["mixing"]["draws_per_chain"] == 6  # the second half of the run
        assert run["ess_within_per_1000_passes"] > 0
