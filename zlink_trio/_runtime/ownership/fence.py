"""Whether this node run may serve: the self-fence of its lease (specs/mesh.md MESH-20..MESH-23;
specs/decisions.md DEC-22).

Rule 1: a run serves only while its lease is fresh on its own clock. Each successful renewal of
the node record moves the fence to ``started + lease - margin``, where ``started`` is the
host's monotonic time (``trio.current_time()``) at which that write began, before the database
stamped it. Past the fence the run admits nothing (``UNAVAILABLE``) and starts no turn; it is
computed on every check, not set by a task, so a process resumed after SIGSTOP refuses its very
first message instead of racing a timer task.
Rule 2: the fence is earlier than any takeover. A peer declares the run dead only after seeing
its record unchanged for ``lease + margin`` on the database clock (``peer_watch`` Rule 2), and the
record changed no earlier than ``started``; so the run stops serving at least ``2 * margin``
before anyone may take its Spots over, whatever its pauses.
Rule 3: fenced is not lost. A renewal that still finds the record this run wrote (``IfVersion``)
proves nobody declared the run dead, so it serves again; a renewal that finds the record gone or
another run's makes the run lost for good: it never serves again and the host ends the run
(``lease.py``; a new run comes back with a new generation and claims nothing).
"""

from __future__ import annotations

import math

import trio

from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = ["Fence", "fence_margin"]


def fence_margin(lease: float) -> float:
    """The margin on each side of the lease: a fifth of it (DEC-22)."""
    return lease / 5


class Fence:
    """The self-fence of one node run (Rules 1 and 3)."""

    def __init__(self, lease: float) -> None:
        self._lease = lease
        self._margin = fence_margin(lease)
        self._until = math.inf
        """Serving until this ``trio.current_time()``; unbounded before the first publish, when
        no peer knows the run and nothing it holds can be taken over."""
        self._lost: str | None = None
        self._changed = trio.Event()

    @property
    def serving(self) -> bool:
        """Whether the run may admit work and start turns now (Rule 1)."""
        return trio.current_time() < self._until

    @property
    def lost(self) -> str | None:
        """Why the run lost its lease for good, or ``None`` (Rule 3)."""
        return self._lost

    @property
    def until(self) -> float:
        """The ``trio.current_time()`` at which serving stops unless renewed first."""
        return self._until

    def renewed(self, started: float) -> None:
        """A renewal that began at ``started`` succeeded: serve until ``started + lease -
        margin``."""
        if self._lost is not None:
            return
        self._until = started + self._lease - self._margin
        self._changed.set()
        self._changed = trio.Event()

    def lose(self, why: str) -> None:
        """The lease is gone for good: never serve again (Rule 3)."""
        if self._lost is None:
            self._lost = why
        self._until = -math.inf
        self._changed.set()
        self._changed = trio.Event()

    def refusal(self) -> ZLinkError:
        """The error of work refused while fenced."""
        if self._lost is not None:
            return ZLinkError(ErrorKind.UNAVAILABLE, f"this host's run has ended: {self._lost}")
        return ZLinkError(
            ErrorKind.UNAVAILABLE,
            "this host could not renew its lease in time and serves nothing until it does",
        )

    def check(self) -> None:
        """Raise ``UNAVAILABLE`` when the run may not serve now."""
        if trio.current_time() >= self._until:
            raise self.refusal()

    async def wait_serving(self) -> None:
        """Return at once while serving, else once a renewal lifts the fence; a lost run waits
        until it is cancelled (its host is ending it)."""
        while trio.current_time() >= self._until:
            if self._lost is not None:
                await trio.sleep_forever()
            await self._changed.wait()
