"""Reproducible Trio scheduling (specs/testing.md KIT-7).

Trio runs the tasks that are ready at one instant in a batch, in an order it draws from one
module-level ``random.Random`` (``trio._core._run._r``). When hypothesis is imported, Trio's own
hypothesis plugin makes that draw deterministic (each batch sorted by task age, then shuffled with
that random) and registers the random with hypothesis, which seeds it at the start of every
example and restores it afterwards. ``seeded_scheduling(seed)`` does the same for one block of
code outside hypothesis.

What is reproducible: the order in which Trio runs the tasks that are ready together, in every
Trio loop of the process (the random is one for the process), given the same seed and the same
sequence of wake-ups. What is not: when real I/O wakes a task up (the store, ZeroMQ, the OS
clock), so where the timing of I/O decides which tasks are ready together, a replay may differ.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import trio._core._run as _trio_run

__all__ = ["seeded_scheduling", "trio_random"]

_FLAG = "_ALLOW_DETERMINISTIC_SCHEDULING"


def trio_random() -> random.Random:
    """The random Trio draws its scheduling order from (one per process)."""
    chosen = getattr(_trio_run, "_r", None)
    if not isinstance(chosen, random.Random) or not hasattr(_trio_run, _FLAG):
        raise RuntimeError(
            f"this Trio ({_trio_run.__name__}) has no seedable scheduler; "
            "zlink_trio.testing knows Trio's _r and _ALLOW_DETERMINISTIC_SCHEDULING"
        )
    return chosen


@contextmanager
def seeded_scheduling(seed: int) -> Iterator[None]:
    """Within the block, Trio runs the tasks that are ready together in an order fixed by
    ``seed`` (the same seed and the same wake-ups give the same order); afterwards the earlier
    state is back. What this covers, and what real I/O still decides, is specs/testing.md
    KIT-7. Hypothesis examples need nothing of this: Trio's plugin seeds them already."""
    chosen = trio_random()
    state = chosen.getstate()
    allowed = getattr(_trio_run, _FLAG)
    setattr(_trio_run, _FLAG, True)
    chosen.seed(seed)
    try:
        yield
    finally:
        chosen.setstate(state)
        setattr(_trio_run, _FLAG, allowed)
