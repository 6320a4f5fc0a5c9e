"""Argument checks shared across the library: errors name the argument, the value and what is allowed."""
from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["check_bool", "check_float", "check_int", "check_interval", "check_optional_int", "check_positive",
           "check_widths", "check_writable_directory"]


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is ``True`` or ``False``, else raise ``ValueError`` naming ``name``."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def check_int(name: str, value: object, minimum: int) -> int:
    """Return ``value`` if it is an integer >= ``minimum``, else raise ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_optional_int(name: str, value: object, minimum: int) -> int | None:
    """:func:`check_int` for an argument where ``None`` means "not set" (returned as ``None``)."""
    return None if value is None else check_int(name, value, minimum)


def check_widths(name: str, value: object) -> list[int]:
    """Return ``value`` as a list of ints if it lists at least two integers >= 1 (a network's input,
    hidden and output sizes), else raise ``ValueError`` naming ``name``."""
    entries = list(value) if isinstance(value, Iterable) and not isinstance(value, (str, bytes)) else []
    if len(entries) < 2 or any(isinstance(w, bool) or not isinstance(w, numbers.Integral) or w < 1 for w in entries):
        raise ValueError(f"{name} must list at least two positive integers (input, ..., output), got {value!r}")
    return [int(w) for w in entries]


def _is_real(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


def _is_finite_real(value: object) -> bool:
    return _is_real(value) and math.isfinite(value)


def check_float(name: str, value: object, minimum: float | None = None) -> float:
    """Return ``value`` as a float if it is a finite real >= ``minimum``, else raise ``ValueError``."""
    if not _is_finite_real(value) or (minimum is not None and value < minimum):
        allowed = "a finite real number" + ("" if minimum is None else f" >= {minimum}")
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)


def check_interval(name: str, value: object, low: float, high: float = math.inf, *, low_closed: bool = False,
                   high_closed: bool = False) -> float:
    """Return ``value`` as a float if it is a real number between ``low`` and ``high`` (each end included
    only when ``low_closed`` / ``high_closed``; ``high`` may be inf), else raise ``ValueError`` naming ``name``
    and the interval, e.g. ``(0, 1]`` for a fraction or ``> 1`` for an R-hat threshold."""
    if not (_is_real(value) and (low <= value if low_closed else low < value) and (value <= high if high_closed else value < high)):
        if high == math.inf:
            allowed = f"{'>=' if low_closed else '>'} {low:g}"
        else:
            allowed = f"in {'[' if low_closed else '('}{low:g}, {high:g}{']' if high_closed else ')'}"
        raise ValueError(f"{name} must be a number {allowed}, got {value!r}")
    return float(value)


def check_positive(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite real > 0 (a step size, a variance, a
    temperature), else raise ``ValueError`` naming ``name``."""
    if not _is_finite_real(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_writable_directory(argument: str, directory: str | os.PathLike) -> None:
    """Make ``directory`` (and its parents) if needed and write and remove a probe file in it, raising a
    ``ValueError`` that names ``argument`` when either fails: a directory a run writes at its end (samples,
    summary) is checked before its first step, not found read-only after the whole fit."""
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write_probe_{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ValueError(f"{argument}: cannot write to {str(path)!r} ({error.strerror or error}); give a writable "
                         "directory") from error
