"""Keeping the cyclic garbage collector off the long-lived heap while many tasks end at once
(specs/shutdown.md SHUT-4.16), and out of a relocation's moves (specs/relocation.md RELOC-75).

A host with ten thousand activations holds about a million objects the garbage collector
tracks. Closing them all allocates and frees a great deal, which triggers full collections, and
each one walks that whole heap again: measured, two full collections took 1.4 s of a 3.1 s
shutdown of 10,000 Spots. ``collector_paused`` turns the cyclic collector off for the duration
of the block and back on at its end, exactly as it found it: objects are still freed by their
reference counts meanwhile, and cycles left over are collected by the next collection after.

Why not ``gc.freeze()``: there is no partial unfreeze, so thawing at the end would also thaw
whatever the process had frozen itself, and Python 3.12 starts with objects frozen already.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


class _Pauses:
    """How many blocks pause the collector now, and whether the first found it on."""

    held = 0
    found_on = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Turn the cyclic garbage collector off for the block, if it was on (module docstring).
    Blocks may overlap (a relocation then a shutdown, or several hosts of one process): the
    collector comes back on when the last of them ends, and only if the first found it on."""
    if _Pauses.held == 0:
        _Pauses.found_on = gc.isenabled()
        gc.disable()
    _Pauses.held += 1
    try:
        yield
    finally:
        _Pauses.held -= 1
        if _Pauses.held == 0 and _Pauses.found_on:
            gc.enable()
