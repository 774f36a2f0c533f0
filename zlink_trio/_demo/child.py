"""One demo host: the process ``zlink-trio demo --child FILE``.

``child_main`` reads FILE, a ``zlink-trio node`` configuration with a ``[demo]`` table (the
``Plan``), opens the host and follows the demo's commands on stdin (``protocol``): it reports
``ready`` once it sees every peer, sets up on ``go`` (get-or-creates every room, activates its
share of the counters cold, creates its users and joins each to a room its own host owns), runs
the ``Workload`` on ``run`` with a ``stats`` event every half second, and on ``shutdown`` - or
when its input ends or a SIGTERM comes - runs ``host.shutdown()`` and exits 0. Anything that
escapes is reported as a ``failed`` event and exit status 1. Every change of the host's status
is a ``status`` event. On ``relocate VERSION`` during the workload it relocates as a rolling
update to VERSION while its loops go on calling, reports the ``relocated`` result, then stops
its loops and shuts down (``relocate()``, then ``shutdown()``, which relays what peers still
send it until that goes quiet, RELOC-69, with the loops stopped in between, so none of its own
calls meets its shutdown); a spare host (``Plan.spare``, started for the update)
only serves until ``shutdown``. This is the host's side of specs/demo.md DEMO-1 (ready only
once every peer is seen), DEMO-2 (the set-up), DEMO-5 and DEMO-6 (shut down on command, on end
of input, on SIGTERM) and DEMO-7 (the rolling update).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from collections import Counter as Tally
from pathlib import Path

import trio

import zlink_trio as zl
from zlink_trio import _node
from zlink_trio._demo.app import (
    COUNTER_TYPE,
    ROOM_TYPE,
    USER_TYPE,
    Enter,
    Read,
    Status,
    Total,
    UserStatus,
)
from zlink_trio._demo.protocol import emit, lines
from zlink_trio._demo.workload import Plan, Stats, Workload
from zlink_trio._exception_groups import sole_error

__all__ = [
    "STATS_INTERVAL",
    "UPDATE_DEADLINE",
    "WORKERS_PER_HOST",
    "Child",
    "MoveLog",
    "child_main",
]

STATS_INTERVAL = 0.5
"""How often a host reports its counts."""
WORKERS_PER_HOST = 8
"""Concurrent workload loops in each host."""
UPDATE_DEADLINE = 60.0
"""Seconds the rolling update's relocation may take."""


class MoveLog(logging.Handler):
    """The moves of this host's relocation, from the runtime's ``MoveTimes`` (logged at DEBUG on
    ``zlink_trio.runtime.relocation.times``, which propagates here, one a unit moved with its
    members); other records of this logger at WARNING or above go on to stderr."""

    LOGGER = "zlink_trio.runtime.relocation"

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.sealed: list[float] = []
        """Per move, seconds from the start of its seal to the target told to open it."""

    def emit(self, record: logging.LogRecord) -> None:
        times = record.args[0] if isinstance(record.args, tuple) and record.args else None
        if hasattr(times, "sealing") and hasattr(times, "opened"):
            self.sealed.append(float(times.opened) - float(times.sealing))
        elif record.levelno >= logging.WARNING:
            print(self.format(record), file=sys.stderr, flush=True)

    def __enter__(self) -> MoveLog:
        logger = logging.getLogger(self.LOGGER)
        self.level_before = logger.level
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger(self.LOGGER)
        logger.removeHandler(self)
        logger.setLevel(self.level_before)


class Child:
    """One demo host: follows the parent's commands, reports on stdout."""

    def __init__(self, config: _node.NodeConfig, plan: Plan) -> None:
        self.config = config
        self.plan = plan
        self.stats = Stats()
        self.commands: trio.MemorySendChannel[str]
        self.inbox: trio.MemoryReceiveChannel[str]
        self.commands, self.inbox = trio.open_memory_channel[str](16)

    async def read_stdin(self) -> None:
        stream = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        async with stream:
            async for line in lines(stream):
                if line.strip():
                    await self.commands.send(line.strip())
        await self.commands.send("shutdown")  # end of input: the parent is gone

    async def watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _signum in signals:
                await self.commands.send("shutdown")

    async def expect(self, *wanted: str) -> str:
        """The next command; ``shutdown`` always ends the phase."""
        async for command in self.inbox:
            if command.split()[0] in wanted or command == "shutdown":
                return command
            print(f"demo child: ignoring {command!r} here", file=sys.stderr)
        return "shutdown"

    async def wait_for_peers(self, host: zl.Host) -> None:
        others = {rid for rid in self.plan.rids if rid != self.plan.rid}
        while True:  # host.peers is a view of the store, with no event to wait on
            if others <= {rid.value for rid in host.peers}:
                return
            await trio.sleep(0.05)

    async def set_up(self, host: zl.Host) -> dict[str, object]:
        owners: dict[str, str] = {}
        for room in self.plan.rooms_in_order():
            result = await host.spots.get_or_create(room, ROOM_TYPE).submit()
            owners[room] = result.spot_ref.node_rid.value
        own_rooms = sorted(room for room, owner in owners.items() if owner == self.plan.rid)
        # Each host touches its share of the counters first, so each counter is activated cold
        # by one sender: two hosts racing one cold activation still fail the loser's call
        # (specs/global.md GLOBAL-12, pending). A request, so the counter exists once it returns.
        count = len(self.plan.rids)
        counters = [c for n, c in enumerate(self.plan.counters) if n % count == self.plan.index]
        for counter in counters:
            await (
                host.route.request_to_spot(counter, Read(), reply_type=Total)
                .instance_spot(COUNTER_TYPE)
                .submit()
            )
        users = self.plan.users_of(self.plan.index)
        for user in users:
            await host.actors.create(user, USER_TYPE).submit()
        for n, user in enumerate(users):
            if own_rooms:
                await host.route.send_to_actor(user, Enter(own_rooms[n % len(own_rooms)])).submit()
        joined = 0
        join_errors: Tally[str] = Tally()
        if own_rooms:
            for user in users:
                while True:
                    status = await host.route.request_to_actor(
                        user, Status(), reply_type=UserStatus
                    ).submit()
                    if status.outcome is not None:
                        break
                    await trio.sleep(0.02)
                if status.outcome == zl.ActorJoinOutcome.ACCEPTED.name:
                    joined += 1
                else:
                    join_errors[f"JOIN_{status.outcome}_{status.error or 'NONE'}"] += 1
        self.stats.errors.update(join_errors)
        return {
            "owners": owners,
            "own_rooms": own_rooms,
            "counters": len(counters),
            "users": len(users),
            "joined": joined,
        }

    async def report(self, host: zl.Host) -> None:
        while True:
            await trio.sleep(STATS_INTERVAL)
            emit("stats", rid=self.plan.rid, relays=host.follow_relays, **self.stats.take())

    async def run_workload(self, host: zl.Host) -> str:
        workload = Workload(host, self.plan, self.stats)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.report, host)
            for worker in range(WORKERS_PER_HOST):
                nursery.start_soon(workload.run, worker)
            command = await self.expect("stop", "relocate")
            if command.startswith("relocate "):
                moved = await self.relocate(host, command.split()[1])
                command = "relocated" if moved else await self.expect("stop")
            nursery.cancel_scope.cancel()
        emit("stats", rid=self.plan.rid, relays=host.follow_relays, **self.stats.take())
        return command

    async def relocate(self, host: zl.Host, version: str) -> bool:
        """A rolling update to ``version`` while the loops go on; whether everything moved."""
        with MoveLog() as moves:
            started = trio.current_time()
            result = await host.relocate(
                zl.RelocationMode.ROLLING_UPDATE, target_version=version, deadline=UPDATE_DEADLINE
            )
            seconds = trio.current_time() - started
        emit("status", rid=self.plan.rid, status=host.status.name)
        emit(
            "relocated",
            rid=self.plan.rid,
            outcome=result.outcome.name,
            reason=result.reason.name,
            seconds=seconds,
            sealed=moves.sealed,
        )
        return result.relocated

    async def watch_status(self, host: zl.Host) -> None:
        async for status in host.observe():
            emit("status", rid=self.plan.rid, status=status.name, relays=host.follow_relays)

    async def run(self) -> int:
        async with trio.open_nursery() as outer:
            outer.start_soon(self.read_stdin)
            outer.start_soon(self.watch_signals)
            async with zl.open_host(self.config.app, self.config.host) as host:
                emit("status", rid=self.plan.rid, status=host.status.name)  # before "ready"
                outer.start_soon(self.watch_status, host)
                await self.wait_for_peers(host)
                emit("ready", rid=host.node_rid.value, peers=len(host.peers))
                if self.plan.spare:
                    await self.expect()
                elif await self.expect("go") == "go":
                    emit("set", rid=self.plan.rid, **(await self.set_up(host)))
                    if (
                        await self.expect("run") == "run"
                        and await self.run_workload(host) == "stop"
                    ):
                        emit("stopped", rid=self.plan.rid)
                        await self.expect()
                await host.shutdown()  # a relocated host relays until that is quiet (RELOC-69)
                emit(
                    "status", rid=self.plan.rid, status=host.status.name, relays=host.follow_relays
                )
            emit("closed", rid=self.plan.rid)
            outer.cancel_scope.cancel()
        return 0


def child_main(config_path: str) -> int:
    """One demo host (``zlink-trio demo --child FILE``); 0 once it has shut down cleanly."""
    try:
        config = _node.load_config(Path(config_path), sections=("demo",))
        plan = Plan.from_section(config.sections["demo"])
        return trio.run(Child(config, plan).run)
    except BaseException as error:  # the parent shows it; the details go to stderr
        traceback.print_exc()
        shown = sole_error(error) or error  # the nursery's group says nothing of its own
        emit("failed", error=f"{type(shown).__name__}: {shown}")
        return 1
