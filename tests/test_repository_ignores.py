"""The repository's .gitignore leaves the library's own files alone (its dataset folder is the top-level data/)."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.parametrize("path, ignored", [
    ("lit_bayes/data/new_module.py", False),
    ("callbacks/new_callback.py", False),
    ("data/MNIST/raw/train-images-idx3-ubyte", True),
])
def test_gitignore(path, ignored):
    result = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
    assert result.returncode == (0 if ignored else 1), path
