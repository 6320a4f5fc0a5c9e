"""lit_bayes.native.load_library: the first flags the compiler takes, else None and a log line naming the fallback."""
from __future__ import annotations

import ctypes
import logging

import pytest

from lit_bayes import native

SOURCE = "int twice(int x) { return 2 * x; }\n"


@pytest.fixture
def source(tmp_path, monkeypatch):
    if native.c_compiler() is None:
        pytest.skip("no C compiler here")
    monkeypatch.setenv("LIT_BAYES_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "twice.c"
    path.write_text(SOURCE)
    return path


def test_the_next_flags_are_tried_where_the_compiler_refuses_the_first(source):
    library = native.load_library(source, [[*native.FLAGS, "-fno-such-option"], list(native.FLAGS)], "fallback")
    library.twice.argtypes, library.twice.restype = [ctypes.c_int], ctypes.c_int
    assert library.twice(21) == 42
    assert len(list(source.parent.joinpath("cache").glob("twice-*.so"))) == 1


def test_none_and_a_log_line_where_no_flags_build(source, caplog):
    with caplog.at_level(logging.INFO, logger="lit_bayes.native"):
        assert native.load_library(source, [[*native.FLAGS, "-fno-such-option"]], "torch runs instead") is None
    assert "twice.c could not be built" in caplog.text and "torch runs instead" in caplog.text


def test_none_and_a_log_line_without_a_compiler(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    (tmp_path / "twice.c").write_text(SOURCE)
    with caplog.at_level(logging.INFO, logger="lit_bayes.native"):
        assert native.load_library(tmp_path / "twice.c", [list(native.FLAGS)], "torch runs instead") is None
    assert "torch runs instead" in caplog.text


def test_a_change_to_an_included_file_rebuilds_the_library(source):
    """The cache key holds the files a source includes with quotes: another header, another library."""
    header = source.parent / "factor.h"
    header.write_text("#define FACTOR 2\n")
    source.write_text('#include "factor.h"\nint twice(int x) { return FACTOR * x; }\n')
    assert native.included(source) == [header]
    first = native.compiled(source, native.c_compiler(), list(native.FLAGS))
    assert native.compiled(source, native.c_compiler(), list(native.FLAGS)) == first  # unchanged: the same library
    header.write_text("#define FACTOR 3\n")
    library = ctypes.CDLL(str(native.compiled(source, native.c_compiler(), list(native.FLAGS))))
    library.twice.argtypes, library.twice.restype = [ctypes.c_int], ctypes.c_int
    assert library.twice(7) == 21
