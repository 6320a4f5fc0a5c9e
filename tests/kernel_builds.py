"""What the tests of the C kernels (lit_bayes.native and its users) share: whether this processor's default build has
AVX-512, and a kernel built afresh into a folder of the test's."""
from __future__ import annotations

import contextlib
import platform
from collections.abc import Iterator
from pathlib import Path

import pytest

from lit_bayes import native


def processor_has_avx512() -> bool:
    """Whether this x86-64 processor lists AVX-512, so that a kernel's ``-march=native`` build has its wide vectors
    (read from what the kernels' cache key reads, ``native.processor``)."""
    return platform.machine() == "x86_64" and " avx512f" in native.processor()


@contextlib.contextmanager
def kernel_built_in(folder: Path, monkeypatch: pytest.MonkeyPatch, kernel) -> Iterator[None]:
    """Within the block, ``kernel`` (a ``functools.cache``'d builder of a C kernel) is built and loaded afresh, with
    the environment and flags the test has set, into the cache folder ``folder``; its memo is cleared before and
    after, so that later tests load their default build again."""
    monkeypatch.setenv("LIT_BAYES_CACHE", str(folder))
    kernel.cache_clear()
    try:
        yield
    finally:
        kernel.cache_clear()
