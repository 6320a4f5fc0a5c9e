"""Argument checks shared across the library: errors name the argument, the value and what is allowed."""
from __future__ import annotations

import numbers

__all__ = ["check_int"]


def check_int(name: str, value: object, minimum: int) -> int:
    """Return ``value`` if it is an integer >= ``minimum``, else raise ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
