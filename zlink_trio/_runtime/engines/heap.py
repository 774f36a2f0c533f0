"""Keeping the cyclic garbage collector off the long-lived heap while many tasks end at once
(specs/shutdown.md SHUT-4.16).

A host with ten thousand activations holds about a million objects the garbage collector
tracks. Closing them all allocates and frees a great deal, which triggers full collections, and
each one walks that whole heap again: measured, two full collections took 1.4 s of a 3.1 s
shutdown of 10,000 Spots. ``old_objects_frozen`` moves what exists when the work begins to the
collector's permanent generation (``gc.freeze``), so those collections skip it, and moves it
back at the end (``gc.unfreeze``); objects are still freed by their reference counts meanwhile,
and cycles among them are collected by a later collection. A process that froze objects itself,
or turned the collector off, is left exactly as it is.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["old_objects_frozen"]


@contextmanager
def old_objects_frozen() -> Iterator[None]:
    """Freeze the objects that exist now for the duration of the block (module docstring)."""
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
