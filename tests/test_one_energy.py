"""One energy layer: outside :mod:`lit_bayes.posterior` (and the noisy network's joint,
:mod:`lit_bayes.noisy_energy`, and the learned prior scales, :mod:`lit_bayes.prior_scales`) no module of the library scales a likelihood by N/B, divides by the
temperature or writes a Gaussian log density by hand; each exception below is named with its reason."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENERGY_LAYER = {"lit_bayes/posterior.py", "lit_bayes/noisy_energy.py", "lit_bayes/prior_scales.py"}
PATTERNS = {
    "temperature": re.compile(r"[/*]\s*[\w.]*temperature\b|\btemperature\s*[/*]"),
    "likelihood scale": re.compile(r"num_data\s*/|/\s*\w*batch_size\b"),
    "log density": re.compile(r"log\(2(\.0)?\s*\*\s*(math\.|torch\.)?pi|LOG_2PI|variance_of\("),
}
EXCEPTIONS = {
    # the random-walk and OU moves of the particle samplers: a Gaussian move's density to the power
    # 1/T has its variance times T (the move, not the target)
    ("lit_bayes/steppers/kernels.py", "temperature"),
    # the OU move keeps the prior invariant: it needs the prior's variances
    ("lit_bayes/steppers/kernels.py", "log density"),
    # the exact posterior of the crescent example on a grid, the reference the tests compare with
    ("lit_bayes/models/crescent.py", "log density"),
    # the log normal CDF and density inside the truncated-Gaussian sampler (not a target)
    ("lit_bayes/steppers/truncated_gaussian.py", "log density"),
    # VB's variational density log q(phi) in the ELBO (the approximation, not the target)
    ("lit_bayes/samplers/variational.py", "log density"),
}


def offending_lines():
    found = []
    for folder in ("lit_bayes", "callbacks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in ENERGY_LAYER:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#")[0]
                for kind, pattern in PATTERNS.items():
                    if pattern.search(code) and (name, kind) not in EXCEPTIONS:
                        found.append(f"{name}:{number} ({kind}): {line.strip()}")
    return found


def test_no_energy_term_outside_the_energy_layer():
    assert offending_lines() == []


def test_the_check_sees_a_hand_written_energy():
    assert PATTERNS["temperature"].search("energy = -scale * total / self.temperature")
    assert PATTERNS["likelihood scale"].search("scale = self.num_data / x.shape[0]")
    assert PATTERNS["likelihood scale"].search("scale = n / batch_size")
    assert PATTERNS["log density"].search("-0.5 * x**2 / v - 0.5 * math.log(2 * math.pi * v)")
