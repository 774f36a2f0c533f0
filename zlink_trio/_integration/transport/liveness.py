"""Routes to peer runs and their liveness: up, heard from, lost (TRN-17, TRN-18).

A :class:`Route` is what this node knows about one peer node RID: the run that opened its
connections (:class:`PeerRun`), whether it is up, and whether anything was heard from it lately.

Theory of operation. Receiving marks a route *heard* (one attribute store per message, no clock
read). Once per heartbeat interval :meth:`Route.tick` turns "heard" into a time stamp and judges:
a route that was lost but whose current run is heard again is up again; a route that is up is
judged only while it is *watched* (this node has outstanding work with the peer, which
``heartbeats.py`` decides), and is lost when it has not been heard for the liveness window. The
silence of a route counts from the tick that first sees it watched, never from a time stamp
older than that: a peer that was idle for longer than the window gets a whole window once work
for it starts. A watched peer is therefore lost at most one interval after its window ends.
Route loss itself (failing waiters and pending requests, new links) is the mesh's business;
this module only decides.
"""

from __future__ import annotations

import enum
from collections import deque

from zlink_trio._integration.transport.routes import PeerRun
from zlink_trio.ids import NodeGeneration, NodeRid

__all__ = ["Opening", "Route", "Verdict"]

RETIRED_RUNS_KEPT = 16
"""How many replaced generations of a peer a route remembers to refuse them as stale."""


class Verdict(enum.Enum):
    """What one liveness tick decided about a route."""

    UNCHANGED = "unchanged"
    LOST = "lost"
    UP = "up"


class Opening(enum.Enum):
    """What a Hello of ``generation`` means for the route of its node."""

    SAME = "same"
    """The current run again (its other connection, or a reconnect)."""
    NEW = "new"
    """The first run this node has seen of the peer."""
    RESTARTED = "restarted"
    """A new run replaces the current one: the old run is lost."""
    STALE = "stale"
    """A run already replaced: refused."""


class Route:
    """This node's view of one peer node: its current run and whether it is usable."""

    __slots__ = ("heard", "last_heard", "node_rid", "retired", "run", "up", "watched")

    def __init__(self, node_rid: NodeRid) -> None:
        self.node_rid = node_rid
        self.run: PeerRun | None = None
        self.up = False
        self.heard = False
        self.last_heard = 0.0
        self.watched = False
        """Whether the last tick judged the route (this node had outstanding work with it)."""
        self.retired: deque[NodeGeneration] = deque(maxlen=RETIRED_RUNS_KEPT)

    def judge_opening(self, generation: NodeGeneration) -> Opening:
        """What a Hello of run ``generation`` means here (does not change the route)."""
        if self.run is None:
            return Opening.NEW
        if self.run.generation == generation:
            return Opening.SAME
        if generation in self.retired:
            return Opening.STALE
        return Opening.RESTARTED

    def open(self, generation: NodeGeneration, now: float) -> PeerRun:
        """Make run ``generation`` current and up; the replaced run, if any, is retired."""
        run = self.run
        if run is None or run.generation != generation:
            if run is not None:
                self.retired.append(run.generation)
            run = self.run = PeerRun(self.node_rid, generation)
        self.up = True
        self.heard = False
        self.last_heard = now
        return run

    def tick(self, now: float, window: float, watched: bool) -> Verdict:
        """Judge the route once per heartbeat interval; ``watched``: this node has outstanding
        work with the peer now (see the module's theory of operation)."""
        was_watched, self.watched = self.watched, watched
        if self.heard:
            self.heard = False
            self.last_heard = now
            if not self.up and self.run is not None:
                self.up = True
                return Verdict.UP
            return Verdict.UNCHANGED
        if not watched:
            return Verdict.UNCHANGED  # nothing waits for it: its silence is not judged
        if not was_watched:
            self.last_heard = now  # work for it just started: a whole window from now
        elif self.up and now - self.last_heard > window:
            return Verdict.LOST  # the mesh fails what waits for the run, then marks it down
        return Verdict.UNCHANGED
