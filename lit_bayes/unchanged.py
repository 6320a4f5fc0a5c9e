"""Recognising a tensor that comes back unmodified, without reading it: its identity and
its in-place modification counter (``Tensor._version``)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import torch
from torch import Tensor

__all__ = ["DerivedFrom", "unchanged", "version"]

T = TypeVar("T")


def version(tensor: Tensor) -> int | None:
    """The in-place modification counter of ``tensor``; ``None`` for inference tensors (they have none)."""
    return None if tensor.is_inference() else tensor._version


def unchanged(tensor: Tensor, kept: Tensor | None, kept_version: int | None) -> bool:
    """``tensor`` is the tensor ``kept`` and was not modified in place since it had ``kept_version``."""
    return tensor is kept and kept_version is not None and version(tensor) == kept_version


class DerivedFrom(Generic[T]):
    """A value derived from one tensor, kept while that tensor comes back unmodified (or, with
    ``compare_values``, while an equal tensor comes)."""

    def __init__(self, compare_values: bool = False) -> None:
        self.compare_values = compare_values
        self._kept: tuple[Tensor, int | None, T] | None = None

    def __call__(self, tensor: Tensor, make: Callable[[Tensor], T]) -> T:
        """The value for ``tensor``: the kept one, or ``make(tensor)`` (then kept)."""
        if self._kept is not None:
            kept, kept_version, value = self._kept
            if unchanged(tensor, kept, kept_version):
                return value
            if (self.compare_values and unchanged(kept, kept, kept_version) and kept.shape == tensor.shape
                    and torch.equal(kept, tensor)):
                return value
        value = make(tensor)
        self._kept = (tensor, version(tensor), value)
        return value
