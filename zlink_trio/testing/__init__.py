"""zlink_trio.testing: the kit for testing and model-checking Spots and Actors (specs/testing.md).

A plain re-export list: every public name of the kit is imported here and listed in ``__all__``.
"""

from zlink_trio.testing.clock import VirtualClock

__all__ = [
    "VirtualClock",
]
