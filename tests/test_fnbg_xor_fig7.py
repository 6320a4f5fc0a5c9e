"""recipes/fnbg/xor_fig7.py --quick (the CI-sized XOR recipe): both nets run 10 chains, and the table
holds each chain's accuracy, the median and IQR beside the paper's medians and every layer's acceptance."""
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "recipes" / "fnbg" / "xor_fig7.py"


def test_xor_fig7_quick_runs_both_depths(tmp_path):
    subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)],
                   check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    rows = json.loads((tmp_path / "xor_fig7.json").read_text())["rows"]
    assert [(r["net"], r["paper_median"]) for r in rows] == [("MLP(2,2,1)", 86.75), ("MLP(2,2,2,2,2,2,2,1)", 98.88)]
    for row, layers in zip(rows, (2, 7)):
        assert row["sweeps"] == 2_000 and row["chains"] == 10 and len(row["accuracy"]) == 10
        assert abs(row["median"] - statistics.median(row["accuracy"])) < 1e-9 and 0 <= row["iqr"] <= 100
        assert sorted(row["acceptance"]) == [f"net.layers.{j}" for j in range(layers)]
        assert all(0.0 < rate <= 1.0 for rate in row["acceptance"].values())
        (summary,) = (tmp_path / f"fig7_{'xor_nbg' if layers == 2 else 'xor_nbg_deep'}").rglob("summary.json")
        assert row["verdict"] == json.loads(summary.read_text())["health"]["verdict"]
