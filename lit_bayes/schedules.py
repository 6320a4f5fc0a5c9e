"""Step-size schedules eps_t as pure functions of the step index t (resume needs no state)."""
from __future__ import annotations

import math
from typing import Literal

from lit_bayes.validation import check_float, check_int, check_interval, check_positive

__all__ = ["StepSizeSchedule", "exponential_decay"]


class StepSizeSchedule:
    """Step size eps_t for step t = 0, 1, ...

    - ``"constant"``: eps_t = step_size.
    - ``"polynomial"``: eps_t = step_size * (1 + t / decay_steps) ** (-decay_power)
      (Welling & Teh 2011: eps_t = a (b + t)^-gamma with a = step_size b^gamma, b = decay_steps;
      decay_power in (0.5, 1] satisfies their conditions sum eps = inf, sum eps^2 < inf).
    - ``"cyclical"``: cosine cycles of Zhang et al. (2020, Eq. 1),
      eps_t = step_size / 2 * (cos(pi * (t mod L) / L) + 1), L = cycle_length. The first
      ``exploration`` share of every cycle (beta of their Alg. 1; 0 by default) is its exploration
      stage (:meth:`explores`): the sampler's steps add no noise there and keep no draws.
    """

    def __init__(
        self,
        step_size: float,
        kind: Literal["constant", "polynomial", "cyclical"] = "constant",
        decay_steps: float = 1000.0,
        decay_power: float = 0.55,
        cycle_length: int = 1000,
        exploration: float = 0.0,
    ) -> None:
        check_positive("step_size", step_size)
        if kind not in ("constant", "polynomial", "cyclical"):
            raise ValueError(f"schedule must be 'constant', 'polynomial' or 'cyclical', got {kind!r}")
        check_positive("decay_steps", decay_steps)
        check_float("decay_power", decay_power, minimum=0.0)
        check_int("cycle_length", cycle_length, 1)
        check_interval("exploration", exploration, 0.0, 1.0, low_closed=True)
        if exploration and kind != "cyclical":
            raise ValueError(f"exploration is a share of each cycle of schedule='cyclical', got schedule={kind!r}")
        self.step_size = float(step_size)
        self.kind = kind
        self.decay_steps = float(decay_steps)
        self.decay_power = float(decay_power)
        self.cycle_length = cycle_length
        self.exploration = float(exploration)

    def explores(self, t: int) -> bool:
        """Whether step t lies in a cycle's exploration stage (its first ``exploration`` share)."""
        return self.exploration > 0 and (t % self.cycle_length) / self.cycle_length < self.exploration

    def __call__(self, t: int) -> float:
        if self.kind == "polynomial":
            return self.step_size * (1.0 + t / self.decay_steps) ** (-self.decay_power)
        if self.kind == "cyclical":
            phase = (t % self.cycle_length) / self.cycle_length
            return self.step_size / 2.0 * (math.cos(math.pi * phase) + 1.0)
        return self.step_size


def exponential_decay(rate: float, decay: float, step: int, decay_steps: int) -> float:
    """``rate * decay ** (step / decay_steps)``: the learning rate of psi in the Feynman-Kac samplers
    (the crescent's ``0.1 * 0.96 ** (step / 10)``) and of :class:`lit_bayes.callbacks.ExponentialLRDecay`."""
    return rate * decay ** (step / decay_steps)
