"""DerivedFrom keeps a value while its tensor comes back unmodified, and only then."""
from __future__ import annotations

import torch

from lit_bayes.unchanged import DerivedFrom


def counting():
    calls = []

    def make(tensor):
        calls.append(tensor.clone())
        return tensor.sum()

    return calls, make


def test_the_same_unmodified_tensor_reuses_the_value_a_modified_one_remakes_it():
    calls, make = counting()
    kept = DerivedFrom()
    t = torch.arange(4.0)
    assert kept(t, make) == 6 and kept(t, make) == 6 and len(calls) == 1
    t.add_(1.0)
    assert kept(t, make) == 10 and len(calls) == 2
    assert kept(t.clone(), make) == 10 and len(calls) == 3  # equal values, another tensor: not compared


def test_compare_values_reuses_for_an_equal_tensor_unless_the_kept_one_was_modified():
    calls, make = counting()
    kept = DerivedFrom(compare_values=True)
    t = torch.arange(4.0)
    kept(t, make)
    assert kept(torch.arange(4.0), make) == 6 and len(calls) == 1
    assert kept(torch.arange(5.0), make) == 10 and len(calls) == 2
    u = torch.arange(3.0)
    kept(u, make)
    u.mul_(2.0)  # the kept tensor changed: an equal-looking tensor is no proof any more
    assert kept(torch.tensor([0.0, 2.0, 4.0]), make) == 6 and len(calls) == 4


def test_inference_tensors_are_never_recognised():
    calls, make = counting()
    kept = DerivedFrom()
    with torch.inference_mode():
        t = torch.arange(4.0)
    kept(t, make)
    kept(t, make)
    assert len(calls) == 2


def test_a_value_from_several_tensors_is_remade_when_any_of_them_changes():
    calls = []
    kept = DerivedFrom()
    a, b = torch.arange(3.0), torch.ones(2)

    def make(first, second):
        calls.append(1)
        return first.sum() + second.sum()

    assert kept((a, b), make) == 5 and kept((a, b), make) == 5 and len(calls) == 1
    b.mul_(2.0)
    assert kept((a, b), make) == 7 and len(calls) == 2
