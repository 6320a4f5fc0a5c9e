"""The shared argument checks of ``lit_bayes.validation``: what each accepts, what it refuses, and
that the error names the argument and the value."""
import math
import re

import numpy as np
import pytest

from lit_bayes.models import MLP, PartialMLP
from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.validation import (
    check_float,
    check_int,
    check_interval,
    check_optional_int,
    check_positive,
    check_widths,
)


@pytest.mark.parametrize("value", [1, 2.5, 1e-300, np.float32(0.5), np.float64(3.0)])
def test_check_positive_returns_a_float(value):
    out = check_positive("step_size", value)
    assert type(out) is float and out == float(value)


@pytest.mark.parametrize("value", [0, 0.0, -1e-3, math.nan, math.inf, -math.inf, True, "0.1", None, [0.1]])
def test_check_positive_refuses_and_names_the_argument(value):
    with pytest.raises(ValueError, match="^step_size must be a finite number > 0, got " + re.escape(repr(value)) + "$"):
        check_positive("step_size", value)


@pytest.mark.parametrize("value, minimum", [(-2.0, None), (0, 0.0), (0.0, 0.0), (3, 1.0), (np.float64(-1.5), None)])
def test_check_float_accepts_finite_reals_at_or_above_the_minimum(value, minimum):
    out = check_float("offset", value, minimum)
    assert type(out) is float and out == float(value)


@pytest.mark.parametrize("value, minimum, allowed", [
    (math.nan, None, "a finite real number"), (math.inf, None, "a finite real number"),
    (False, None, "a finite real number"), ("1", None, "a finite real number"),
    (-1e-9, 0.0, "a finite real number >= 0.0"),
])
def test_check_float_refuses_and_says_what_is_allowed(value, minimum, allowed):
    with pytest.raises(ValueError, match=f"^offset must be {allowed}, got "):
        check_float("offset", value, minimum)


@pytest.mark.parametrize("value", [0, 1.0, True, "3"])
def test_check_int_refuses_non_integers_and_values_below_the_minimum(value):
    with pytest.raises(ValueError, match="num_chains must be an integer >= 1"):
        check_int("num_chains", value, 1)


def test_check_optional_int_passes_none_and_checks_anything_else():
    assert check_optional_int("chunk_size", None, 1) is None
    value = check_optional_int("chunk_size", np.int64(3), 1)
    assert value == 3 and type(value) is int
    with pytest.raises(ValueError, match="chunk_size must be an integer >= 1, got 0"):
        check_optional_int("chunk_size", 0, 1)


@pytest.mark.parametrize("value, ends, inside", [
    (0.0, (False, False), False), (0.0, (True, False), True), (1.0, (False, False), False),
    (1.0, (False, True), True), (np.float32(0.25), (False, False), True), (1, (True, True), True),
    (math.nan, (True, True), False), (True, (True, True), False), ("0.5", (True, True), False), (None, (True, True), False),
])
def test_check_interval_honours_each_end(value, ends, inside):
    low_closed, high_closed = ends
    interval = ("[" if low_closed else "(") + "0, 1" + ("]" if high_closed else ")")
    check = lambda: check_interval("delta", value, 0.0, 1.0, low_closed=low_closed, high_closed=high_closed)  # noqa: E731
    if inside:
        assert check() == float(value) and type(check()) is float
    else:
        with pytest.raises(ValueError, match="^delta must be a number in " + re.escape(interval) + ", got "
                                             + re.escape(repr(value)) + "$"):
            check()


@pytest.mark.parametrize("value, inside", [(1.0, False), (1.05, True), (1e300, True), (math.inf, False)])
def test_check_interval_without_an_upper_end_says_greater_than(value, inside):
    if inside:
        assert check_interval("rhat_threshold", value, 1.0) == value
    else:
        with pytest.raises(ValueError, match="^rhat_threshold must be a number > 1, got "):
            check_interval("rhat_threshold", value, 1.0)


def test_check_widths_returns_plain_ints():
    widths = check_widths("widths", (np.int64(3), 4, 1))
    assert widths == [3, 4, 1] and all(type(w) is int for w in widths)


@pytest.mark.parametrize("value", [[3], [3, 0, 1], [3, True, 1], [3, 2.0, 1], "34", 5, None])
def test_check_widths_refuses_and_names_the_argument(value):
    with pytest.raises(ValueError, match=re.escape(f"widths must list at least two positive integers "
                                                   f"(input, ..., output), got {value!r}")):
        check_widths("widths", value)


@pytest.mark.parametrize("model", [MLP, NoisyMLP, lambda widths: PartialMLP(widths, 0)])
def test_every_mlp_checks_its_widths(model):
    with pytest.raises(ValueError, match="widths must list at least two positive integers"):
        model([2, True, 1])  # MLP passed True on to nn.Linear: a TypeError from torch
