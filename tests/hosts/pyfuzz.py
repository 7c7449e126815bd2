# pyfuzz.py - task code for the Python host's fuzzer (tests/tools/pyfuzz.c,
# test_fuzz_python.sh): body {"seed": N} picks, from N, a hostile value to
# return, an exception to raise, or a way of catching taskmill.Stopped.
# Nothing here blocks in C code for long (the host cannot cut that short;
# docs/languages.md), so every run must end by its deadline + 1 s.
import itertools
import random
import sys
import time

import taskmill

BIG = 10 ** 5000


class BadRepr:
    def __repr__(self):
        raise RuntimeError("repr")

    def __str__(self):
        raise RuntimeError("str")

    def __format__(self, spec):
        raise RuntimeError("format")


class BadIter:
    def __iter__(self):
        raise RuntimeError("iter")


class BadDict(dict):
    def items(self):
        raise KeyError("items")

    def keys(self):
        raise KeyError("keys")


class BadStr(str):
    def __str__(self):
        raise RuntimeError("str of str")


class BadFloat(float):
    def __repr__(self):
        raise RuntimeError("float repr")


class Meta(type):
    @property
    def __name__(cls):
        raise RuntimeError("metaclass name")


class WeirdError(Exception, metaclass=Meta):
    pass


class LoudError(Exception):
    def __str__(self):
        raise RuntimeError("the error's text")


class SlowError(Exception):
    """Its text is never ready: only the deadline ends it."""

    def __str__(self):
        while True:
            try:
                time.sleep(0.01)
            except:  # noqa: E722 - hostile on purpose
                pass


class Stubborn:
    """Freed in a later run (a cycle): its finalizer catches Stopped."""

    def __init__(self):
        self.me = self

    def __del__(self):
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            try:
                pass
            except:  # noqa: E722
                pass


def deep(n):
    v = []
    for _ in range(n):
        v = [v]
    return v


def cyclic_list():
    v = [1]
    v.append(v)
    return v


def cyclic_dict():
    d = {}
    d["self"] = d
    return d


def gen():
    yield 1


def catch_sleepy():
    while True:
        try:
            time.sleep(0.01)
        except:  # noqa: E722
            pass


def catch_busy():
    while True:
        try:
            while True:
                pass
        except:  # noqa: E722
            pass


def catch_finally():
    while True:
        try:
            try:
                while True:
                    pass
            finally:
                for _ in itertools.count():
                    pass
        except BaseException:
            continue


def catch_reraise_other():
    while True:
        try:
            while True:
                pass
        except taskmill.Stopped:
            try:
                raise ValueError("not stopped")
            except ValueError:
                pass


VALUES = [
    lambda r: BIG,
    lambda r: -BIG,
    lambda r: {"n": 2 ** 64 + r.randrange(1000)},
    lambda r: float("nan"),
    lambda r: [float("inf")],
    lambda r: {"x": -float("inf")},
    lambda r: b"bytes",
    lambda r: bytearray(b"\xff\xfe"),
    lambda r: memoryview(b"abc"),
    lambda r: {1, 2, 3},
    lambda r: frozenset(),
    lambda r: 1j,
    lambda r: deep(r.choice([10, 1000, 100000])),
    lambda r: cyclic_list(),
    lambda r: cyclic_dict(),
    lambda r: {(1, 2): 3},
    lambda r: {None: 1, 2: "two", 3.5: True},
    lambda r: BadRepr(),
    lambda r: [BadRepr()],
    lambda r: BadIter(),
    lambda r: BadDict(a=1),
    lambda r: {"s": BadStr("text")},
    lambda r: BadStr("alone"),
    lambda r: BadFloat(1.5),
    lambda r: gen(),
    lambda r: (x for x in range(3)),
    lambda r: lambda: 1,
    lambda r: sys,
    lambda r: "\ud800",
    lambda r: {"\udfff": 1},
    lambda r: "x" * r.choice([0, 1, 4096, 1 << 20]),
    lambda r: "é€😀" * 1000,
    lambda r: [None, True, False, 0, -0.0, 1e308, 5e-324],
    lambda r: {"nested": [{"a": [1, {"b": None}]}] * 100},
    lambda r: Stubborn() and None,
    lambda r: ValueError("an exception as a value"),
    lambda r: taskmill.Stopped(),
]

RAISES = [
    lambda r: ValueError("plain"),
    lambda r: taskmill.Reject("no"),
    lambda r: taskmill.Reject(BadRepr()),
    lambda r: taskmill.Reject(),
    lambda r: LoudError(),
    lambda r: WeirdError("weird"),
    lambda r: SystemExit(3),
    lambda r: KeyboardInterrupt(),
    lambda r: GeneratorExit(),
    lambda r: taskmill.Stopped("by hand"),
    lambda r: RecursionError(),
    lambda r: MemoryError(),
    lambda r: SlowError(),
]

LOOPS = [catch_sleepy, catch_busy, catch_finally, catch_reraise_other]


def run(body, ctx):
    r = random.Random(body.get("seed", 0))
    kind = r.randrange(10)
    if kind < 6:
        return r.choice(VALUES)(r)
    if kind < 9:
        raise r.choice(RAISES)(r)
    r.choice(LOOPS)()
