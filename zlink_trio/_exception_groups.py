"""Unwrapping exception groups that carry a single error (used by every ``open_*`` of ours).

Trio nurseries wrap whatever passes through them in an ``ExceptionGroup``. Our context managers
promise callers the error itself (so they can branch on its type and ``kind``), so where a group
holds exactly one error, possibly nested, that error leaves instead.
"""

from __future__ import annotations

__all__ = ["sole_error"]


def sole_error(error: BaseException) -> BaseException | None:
    """The one error inside ``error`` (through nested groups), or None when there are several."""
    while isinstance(error, BaseExceptionGroup):
        if len(error.exceptions) != 1:
            return None
        error = error.exceptions[0]
    return error
