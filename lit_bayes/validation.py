"""Argument checks shared across the library: errors name the argument, the value and what is allowed."""
from __future__ import annotations

import math
import numbers

__all__ = ["check_float", "check_int", "check_positive"]


def check_int(name: str, value: object, minimum: int) -> int:
    """Return ``value`` if it is an integer >= ``minimum``, else raise ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _is_finite_real(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)


def check_float(name: str, value: object, minimum: float | None = None) -> float:
    """Return ``value`` as a float if it is a finite real >= ``minimum``, else raise ``ValueError``."""
    if not _is_finite_real(value) or (minimum is not None and value < minimum):
        allowed = "a finite real number" + ("" if minimum is None else f" >= {minimum}")
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)


def check_positive(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite real > 0 (a step size, a variance, a
    temperature), else raise ``ValueError`` naming ``name``."""
    if not _is_finite_real(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)
