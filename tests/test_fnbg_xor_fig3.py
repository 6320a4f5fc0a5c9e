"""recipes/fnbg/xor_fig3.py at a tiny length: the minibatch and the exact scenarios run, and the
acceptance-filtered scenarios keep exactly the exact chains whose acceptance rate passes the threshold;
Fig. 3a's rows are the 13 nodes of MLP(2, 2, 2, 2, 2, 2, 2, 1), each scenario's median and range over its
chains' node rates, and an exact chain's overall rate is the mean of its node rates; each run's wall time is
its summary's; ``--resume`` on the finished runs reads the same chains back (it rewrites the summaries'
wall times, which are left out of that comparison)."""
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from lit_bayes.chain_metrics import chain_node_acceptance
from lit_bayes.cli import last_checkpoint

SCRIPT = Path(__file__).resolve().parents[1] / "recipes" / "fnbg" / "xor_fig3.py"


def run(tmp_path, *extra):
    subprocess.run([sys.executable, str(SCRIPT), "--sweeps", "60", "--exact-chains", "3", "--out", str(tmp_path),
                    *extra], check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return json.loads((tmp_path / "xor_fig3.json").read_text())


def test_xor_fig3_runs_every_scenario(tmp_path):
    result = run(tmp_path)
    rows = {row["scenario"]: row for row in result["rows"]}
    assert [rows[name]["paper_median"] for name in rows] == [98.88, 86.92, 95.38, 100.0]
    assert rows["minibatch"]["chains"] == 10 and rows["exact"]["chains"] == 3
    rates = result["exact_accept"]
    assert len(rates) == 3 and all(0.0 <= rate <= 1.0 for rate in rates)
    for threshold, name in ((0.05, "exact >= 5%"), (0.20, "exact >= 20%")):
        assert rows[name]["chains"] == sum(rate >= threshold for rate in rates)
    for name in ("minibatch", "exact"):
        (summary,) = (tmp_path / f"xor_{name}").rglob("summary.json")
        run_summary = json.loads(summary.read_text())
        assert result["verdicts"][name] == run_summary["health"]["verdict"]
        assert result["wall_time_s"][name] == run_summary["wall_time_s"] > 0
    nodes = result["node_accept"]
    assert [row["node"] for row in nodes] == list(range(1, 14))
    assert [(row["node"], row["paper_exact_median"]) for row in nodes if row["paper_exact_median"]] == [
        (1, 63.83), (13, 20.72)]
    for name in ("minibatch", "exact"):
        by_node = chain_node_acceptance(last_checkpoint(tmp_path / f"xor_{name}"))
        assert [row["label"] for row in nodes] == list(by_node)
        for row in nodes:
            percent = [100 * r for r in by_node[row["label"]]]
            assert (row[f"{name}_median"], row[f"{name}_min"], row[f"{name}_max"]) == pytest.approx(
                (statistics.median(percent), min(percent), max(percent)))
        if name == "exact":  # one block per node: a chain's overall rate is the mean of its node rates
            per_chain = [statistics.fmean(chain) for chain in zip(*by_node.values())]
            assert per_chain == pytest.approx(rates)
    again = run(tmp_path, "--resume")
    again.pop("wall_time_s")
    assert again == {k: v for k, v in result.items() if k != "wall_time_s"}
