"""A small written corpus of injected faults (``run.py --corpus written``; the tests use it).

Two projects with their tests, and realistic one-token mutants of each, every mutant with
the function it breaks (the answer top-1/top-3 is checked against). ``caches`` has a
heavy shared base class (a cache hierarchy, as cachetools); ``textfmt`` is a src layout.
The benchmark's corpus of real projects is pypi.py.
"""

from __future__ import annotations

from typing import NamedTuple


class Mutant(NamedTuple):
    project: str
    path: str  # the file to mutate
    old: str  # exact text, present once
    new: str
    function: str  # the qualified name of the function the mutant breaks
    line: int = 0  # the mutated line (1-based; 0: where ``old`` is)


CACHES = '''
class Cache:
    def __init__(self, maxsize):
        self.maxsize = maxsize
        self._data = {}
        self._order = []

    def __setitem__(self, key, value):
        if key not in self._data:
            while len(self._data) >= self.maxsize:
                self.popitem()
            self._order.append(key)
        self._data[key] = value

    def __getitem__(self, key):
        if key in self._data:
            return self._data[key]
        return self.__missing__(key)

    def __missing__(self, key):
        raise KeyError(key)

    def __len__(self):
        return len(self._data)

    def get(self, key, default=None):
        return self._data.get(key, default)

    def popitem(self):
        key = self._order.pop(0)
        return key, self._data.pop(key)


class LRUCache(Cache):
    def popitem(self):
        key = self._order.pop()
        return key, self._data.pop(key)


class FIFOCache(Cache):
    pass
'''

CACHE_TESTS = '''
import pytest
from caches import Cache, FIFOCache, LRUCache

@pytest.mark.parametrize("cls", [LRUCache, FIFOCache])
def test_one_slot(cls):
    c = cls(1)
    c["a"] = 1
    assert c["a"] == 1

@pytest.mark.parametrize("cls", [Cache, LRUCache, FIFOCache])
def test_full_keeps_all(cls):
    c = cls(2)
    c["a"] = 1
    c["b"] = 2
    assert len(c) == 2

def test_lookup_after_fill():
    c = FIFOCache(2)
    c["a"] = 1
    c["b"] = 2
    assert c["a"] == 1

def test_small_fill_passes():
    c = Cache(10)
    c["a"] = 1
    assert c.get("a") == 1

def test_empty_get_passes():
    assert Cache(3).get("x") is None

def test_get_default():
    assert Cache(3).get("x", 0) == 0

def test_missing_raises():
    with pytest.raises(KeyError):
        Cache(2)["x"]

def test_fifo_evicts_oldest():
    c = FIFOCache(2)
    c["a"], c["b"], c["c"] = 1, 2, 3
    assert c.get("a") is None and c["b"] == 2

def test_lru_popitem_takes_newest():
    c = LRUCache(3)
    c["a"], c["b"] = 1, 2
    assert c.popitem() == ("b", 2)
'''

TEXTFMT = '''
def percent(value, digits=0):
    """``value`` (a fraction) as a percentage.

    >>> percent(0.25)
    '25%'
    """
    return f"{value * 100:.{digits}f}%"


def plural(count, word):
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word}s"


def truncate(text, width):
    if len(text) <= width:
        return text
    return text[: width - 1] + "…"


def summary(done, total, word="task"):
    share = percent(done / total) if total else percent(0)
    return f"{plural(done, word)} of {total} ({share})"
'''

TEXTFMT_TESTS = '''
from textfmt.core import percent, plural, summary, truncate

def test_percent():
    assert percent(0.5) == "50%"

def test_percent_digits():
    assert percent(0.125, 1) == "12.5%"

def test_plural_one():
    assert plural(1, "file") == "1 file"

def test_plural_many():
    assert plural(3, "file") == "3 files"

def test_truncate_short():
    assert truncate("abc", 5) == "abc"

def test_truncate_long():
    assert truncate("abcdef", 4) == "abc…"

def test_summary():
    assert summary(1, 4) == "1 task of 4 (25%)"

def test_summary_zero():
    assert summary(0, 0) == "0 tasks of 0 (0%)"
'''

PROJECTS: dict[str, dict[str, str]] = {
    "caches": {
        "caches.py": CACHES,
        "tests/test_caches.py": CACHE_TESTS,
        "pytest.ini": "[pytest]\npythonpath = .\n",
    },
    "textfmt": {
        "src/textfmt/__init__.py": "",
        "src/textfmt/core.py": TEXTFMT,
        "tests/test_textfmt.py": TEXTFMT_TESTS,
        "pytest.ini": "[pytest]\npythonpath = src\naddopts = --doctest-modules\ntestpaths = tests src\n",
    },
}

MUTANTS: list[Mutant] = [
    Mutant("caches", "caches.py", "len(self._data) >= self.maxsize", "len(self._data) >= self.maxsize - 1",
           "Cache.__setitem__"),
    Mutant("caches", "caches.py", "len(self._data) >= self.maxsize", "len(self._data) > self.maxsize",
           "Cache.__setitem__"),
    Mutant("caches", "caches.py", "key = self._order.pop(0)", "key = self._order.pop(-1)", "Cache.popitem"),
    Mutant("caches", "caches.py", "return self._data.get(key, default)", "return self._data.get(key)", "Cache.get"),
    Mutant("caches", "caches.py", "        key = self._order.pop()\n", "        key = self._order.pop(0)\n",
           "LRUCache.popitem"),
    Mutant("caches", "caches.py", "        return len(self._data)", "        return len(self._order) - 1",
           "Cache.__len__"),
    Mutant("caches", "caches.py", "raise KeyError(key)", "return None", "Cache.__missing__"),
    Mutant("textfmt", "src/textfmt/core.py", "value * 100:", "value * 10:", "percent"),
    Mutant("textfmt", "src/textfmt/core.py", "if count == 1:", "if count <= 1:", "plural"),
    Mutant("textfmt", "src/textfmt/core.py", "text[: width - 1]", "text[:width]", "truncate"),
    Mutant("textfmt", "src/textfmt/core.py", "if len(text) <= width:", "if len(text) < width:", "truncate"),
    Mutant("textfmt", "src/textfmt/core.py", "percent(done / total) if total", "percent(total / done) if done",
           "summary"),
]
