"""recipes/fnbg/xor_fig3.py at a tiny length: the minibatch and the exact scenarios run, and the
acceptance-filtered scenarios keep exactly the exact chains whose acceptance rate passes the threshold;
``--resume`` on the finished runs reads the same chains back."""
import json
import os
import subprocess
import sys
from pathlib import Path

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
        assert result["verdicts"][name] == json.loads(summary.read_text())["health"]["verdict"]
    assert run(tmp_path, "--resume") == result
