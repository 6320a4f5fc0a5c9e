"""The shared argument checks of ``lit_bayes.validation``: what each accepts, what it refuses, and
that the error names the argument and the value."""
import math
import re

import numpy as np
import pytest

from lit_bayes.validation import check_float, check_int, check_positive


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
