"""The documentation site stays true to the code: every tutorial script runs at its reduced size
(``--quick``) and prints its result, every tutorial is shown on a page, and ``mkdocs build --strict``
passes (broken links, unknown API objects and docstrings griffe cannot parse fail it)."""
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = DOCS / "tutorials"

# script -> (a line of its printed result, the summary.json files it writes under --out)
RESULTS = {
    "sgmcmc.py": (r"^sghmc\s+(ok|warning|failed)\s+\d\.\d{3}\s+0\.\d{3}", ["sgld", "psgld", "sghmc"]),
    "fnbg.py": (r"^node\s+(ok|warning|failed)\s+(0\.\d\d|1\.00) (0\.\d\d|1\.00)\s+0\.\d{3}", ["layer", "node"]),
    "structured.py": (r"^S_d-SGLD\s+-?[01]\.\d\d\s+-?[01]\.\d\d$", []),
    "noisy_gibbs.py": (r"^informed chain, test MSE against the teacher: +\d\.\d{4}$", ["gibbs"]),
    "feynman_kac.py": (r"^averaged predictive: test accuracy 0\.\d{3}, NLPD \d\.\d{3}, ECE 0\.\d{3}$", ["ohsmc"]),
    "own_model_and_data.py": (r"^npz\s+\d+\.\d{3}\s+-?\d+\.\d{3}  (ok|warning|failed)$", []),
}


def test_every_tutorial_is_run_and_shown():
    scripts = sorted(path.name for path in TUTORIALS.glob("*.py"))
    assert scripts == sorted(RESULTS), "a tutorial script without a test (or a test without its script)"
    included = "".join(page.read_text() for page in (DOCS / "pages").rglob("*.md"))
    for script in scripts:
        assert f'--8<-- "{script}"' in included, f"{script} is not included by any page"


@pytest.mark.parametrize("script", sorted(RESULTS))
def test_tutorial_runs_at_reduced_size(script, tmp_path):
    pattern, runs = RESULTS[script]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(TUTORIALS / script), "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(pattern, done.stdout, flags=re.MULTILINE), done.stdout[-3000:]
    for run in runs:
        summary = json.loads((tmp_path / run / "version_0" / "summary.json").read_text())
        test_metrics = {k: v for k, v in summary["metrics"].items() if k.startswith("test/")}
        assert test_metrics and all(math.isfinite(v) for v in test_metrics.values()), (run, summary["metrics"])


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(DOCS / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    api = (tmp_path / "site" / "api" / "callbacks" / "index.html").read_text()
    assert 'id="lit_bayes.callbacks.RunHealth"' in api  # the package mapped from callbacks/ is documented
