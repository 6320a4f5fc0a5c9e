"""lit_bayes.chain_metrics on a tiny noisy-XOR NBG run (recipes/fnbg/xor_nbg.yaml): a single chain's
own accuracy is the run's pooled test accuracy, each chain's last draw is its final state, and the
per-chain acceptance read from the checkpoint is the sampler's own count."""
from pathlib import Path

import pytest
import torch

from lit_bayes import load_run
from lit_bayes.callbacks.acceptance_monitor import AcceptanceMonitor
from lit_bayes.chain_metrics import chain_acceptance, chain_accuracies, chain_node_acceptance
from lit_bayes.cli import fit_and_test, run_summary

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "fnbg" / "xor_nbg.yaml"


def tiny_run(root: Path, chains: int):
    return fit_and_test(RECIPE, ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "5",
                                 "--model.init_args.burn_in", "2", "--model.init_args.num_chains", str(chains),
                                 "--checkpoint.every_n_epochs", "1", "--trainer.default_root_dir", str(root)])


def test_one_chain_is_the_pooled_test_accuracy(tmp_path):
    cli = tiny_run(tmp_path, chains=1)
    run = load_run(Path(cli.trainer.log_dir))
    (accuracy,) = chain_accuracies(run)
    assert accuracy == pytest.approx(run_summary(cli)["metrics"]["test/accuracy"], abs=1e-6)
    with pytest.raises(ValueError, match="last=9 exceeds the 8 draws"):
        chain_accuracies(run, last=9)


def test_last_draw_of_each_chain_and_acceptance(tmp_path):
    cli = tiny_run(tmp_path, chains=3)
    run_dir = Path(cli.trainer.log_dir)
    run = load_run(run_dir)
    ours = chain_accuracies(run, last=1)
    # the last kept draw is each chain's final state: score it directly through the network
    x, y = cli.datamodule.test_data.tensors
    samples, _ = cli.model.current_samples()
    log_probs = cli.model.likelihood.class_log_probs(cli.model.outputs(samples, x))  # (C, B, K)
    direct = (log_probs.argmax(-1) == y).double().mean(1).tolist()
    assert ours == pytest.approx(direct, abs=1e-6) and len(ours) == 3

    counts = cli.model.acceptance_counts()
    live = (counts["accepted"].double().mean(1) / counts["proposed"]).tolist()
    assert chain_acceptance(run_dir / "checkpoints" / "last.ckpt") == pytest.approx(live)
    assert all(0.0 <= rate <= 1.0 for rate in live)
    by_node = chain_node_acceptance(run_dir / "checkpoints" / "last.ckpt")  # node blocks: one block per node
    assert list(by_node) == counts["nodes"] and len(by_node) == 3
    for block, node in enumerate(counts["nodes"]):
        assert by_node[node] == pytest.approx((counts["accepted"][:, block].double() / counts["proposed"]).tolist())


def test_node_acceptance_averages_a_nodes_blocks_in_network_order(tmp_path):
    path = tmp_path / "counts.ckpt"
    last = {"accepted": torch.tensor([[4, 2, 1], [0, 4, 3]]), "proposed": 4,
            "nodes": ["net.0.1", "net.0.1", "net.2.0"], "layers": ["net.0", "net.0", "net.2"]}
    torch.save({"callbacks": {AcceptanceMonitor().state_key: {"window_start": None, "last": last}}}, path)
    assert chain_node_acceptance(path) == {"net.0.1": [0.75, 0.5], "net.2.0": [0.25, 0.75]}
    assert chain_acceptance(path) == pytest.approx([7 / 12, 7 / 12])


def test_acceptance_needs_the_monitor_state(tmp_path):
    path = tmp_path / "bare.ckpt"
    torch.save({"state_dict": {}, "callbacks": {}}, path)
    with pytest.raises(ValueError, match="holds no acceptance counts"):
        chain_acceptance(path)
    with pytest.raises(ValueError, match="holds no acceptance counts"):
        chain_node_acceptance(path)
