"""CI (``.ci/run``) installs and tests exactly as the README's first two command blocks say, so a
change to either command cannot leave CI checking something the README does not promise."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_command(prefix):
    """The first line of a README ``bash`` block that starts with ``prefix``."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return next(line for line in lines if line.startswith(prefix))


def test_ci_runs_the_readme_install_and_test_commands():
    ci_lines = {line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()}
    for prefix in ("python -m pip install", "python -m pytest"):
        command = readme_command(prefix)
        assert command in ci_lines, f"README says {command!r}; .ci/run does not run it"
