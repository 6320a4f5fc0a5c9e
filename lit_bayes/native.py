"""C kernels compiled on the user's machine and loaded with ``ctypes``: the compiler, the cache folder, the build.

A kernel's source is compiled with the system's C compiler (``CC``, else ``cc``, else ``gcc``) into a cache folder
(``LIT_BAYES_CACHE``, else ``$XDG_CACHE_HOME/lit_bayes``, else ``~/.cache/lit_bayes``), once per source (with the
files it includes), compiler, flags and processor (the flags hold ``-march=native`` and the kernel's shape), in about
a second.
:func:`load_library` builds and loads one, or says (logged) what runs instead.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["FLAGS", "c_compiler", "cache_folder", "compiled", "included", "load_library", "processor"]

log = logging.getLogger(__name__)

FLAGS = ("-O3", "-march=native", "-fPIC", "-shared")  # a shared library for this processor


def c_compiler() -> str | None:
    """The C compiler: ``CC``, else ``cc`` or ``gcc`` on the path, else None."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def cache_folder() -> Path:
    if os.environ.get("LIT_BAYES_CACHE"):
        return Path(os.environ["LIT_BAYES_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lit_bayes"


def processor() -> str:
    """What ``-march=native`` depends on: the processor's model and feature flags where Linux lists them."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("model name", "flags", "Features", "CPU part")
    return "\n".join(dict.fromkeys(line for line in lines if line.split(":")[0].strip() in wanted))


def included(source: Path) -> list[Path]:
    """The files ``source`` includes with quotes (``#include "..."``, relative to its folder): a change to one of them
    rebuilds it, as a change to the source does."""
    names = re.findall(r'^\s*#\s*include\s+"([^"]+)"', source.read_text(), flags=re.MULTILINE)
    return [source.parent / name for name in names]


def compiled(source: Path, compiler: str, flags: list[str]) -> Path:
    """The shared library of ``source`` compiled with ``flags`` in the cache folder, compiled there first if missing
    (written under a temporary name and renamed, so processes compiling at once never load a half-written file). The
    cache key holds the source and the files it includes (:func:`included`). Raises ``subprocess.CalledProcessError``
    where the compiler fails."""
    texts = [path.read_bytes() for path in (source, *included(source))]
    key = hashlib.sha256(b"\0".join([*texts, compiler.encode(), " ".join(flags).encode(), processor().encode(),
                                     platform.machine().encode()])).hexdigest()[:16]
    folder = cache_folder()
    target = folder / f"{source.stem}-{key}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=folder, suffix=".so.partial")
    os.close(handle)
    try:
        subprocess.run([compiler, *flags, "-o", partial, str(source)], check=True, capture_output=True, text=True,
                       timeout=120)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return target


def load_library(source: Path, flag_sets: Sequence[Sequence[str]], fallback: str) -> ctypes.CDLL | None:
    """``source`` compiled (:func:`compiled`) with the first of ``flag_sets`` the compiler takes, and loaded; None
    where there is no C compiler, the compiler takes none of them (or times out) or the library does not load,
    logged with ``fallback``, what runs instead."""
    compiler = c_compiler()
    if compiler is None:
        log.info("no C compiler (CC, cc or gcc): %s", fallback)
        return None
    failure: Exception | None = None
    for flags in flag_sets:
        try:
            return ctypes.CDLL(str(compiled(source, compiler, list(flags))))
        except subprocess.CalledProcessError as error:  # the compiler refused these flags: the next ones
            failure = error
        except (OSError, subprocess.SubprocessError) as error:  # a timeout, or a library that does not load
            failure = error
            break
    log.info("%s could not be built with %s (%s): %s", source.name, compiler,
             getattr(failure, "stderr", None) or failure, fallback)
    return None
