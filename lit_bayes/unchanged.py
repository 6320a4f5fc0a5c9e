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
    """A value derived from one or several tensors, kept while those tensors come back unmodified
    (or, with ``compare_values``, while equal tensors come)."""

    def __init__(self, compare_values: bool = False) -> None:
        self.compare_values = compare_values
        self._kept: tuple[tuple[Tensor, ...], tuple[int | None, ...], T] | None = None

    def __call__(self, key: Tensor | tuple[Tensor, ...], make: Callable[..., T]) -> T:
        """The value for the tensor(s) ``key``: the kept one, or ``make(*key)`` (then kept)."""
        tensors = key if isinstance(key, tuple) else (key,)
        if self._kept is not None and len(self._kept[0]) == len(tensors):
            kept, versions, value = self._kept
            if all(unchanged(t, k, v) for t, k, v in zip(tensors, kept, versions)):
                return value
            if self.compare_values and all(
                unchanged(k, k, v) and k.shape == t.shape and torch.equal(k, t)
                for t, k, v in zip(tensors, kept, versions)
            ):
                return value
        value = make(*tensors)
        self._kept = (tensors, tuple(version(t) for t in tensors), value)
        return value
