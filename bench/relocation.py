"""Relocation: a Spot's service interruption when it moves between hosts, and a host's
relocation time, next to a plain ZeroMQ transfer of the same payload in the same run.

    python bench/relocation.py [--quick] [--rounds N] [--group NAME] [--security curve|none]
                               [--profile]

Uses ZLINK_STORE_DSN when set, otherwise a throw-away embedded PostgreSQL in a temporary folder.
Three OS processes: two *host processes* (``--host-process``, children) that open, relocate and
close hosts when this process tells them, and this process, a *client* host whose application
declares the messages but no Spot type (so it is never a relocation target), sending requests
through the public API. Each host's config is the default but for ``transport_security`` and
``request_timeout`` (30 s).

1. Service interruption of one unit. Spots of ``preserve_state_with`` types whose adapter carries
   1 KiB or 1 MiB of random bytes (plus an 8-byte count). A relocation with PLANNED_MAINTENANCE
   is host-wide and a host relocates once, so every round opens a fresh host in the other host
   process, and the host that holds the Spots relocates to it (``host.relocate()``, its only
   SERVING peer that declares the types) once its transport route to it is up, and then shuts
   down: the Spots go back and forth between the two processes, one move each per round. Four
   groups are measured one after the other, each with hosts of its own: a 1 KiB Spot alone, 5
   of them at once, a 1 MiB Spot alone, 5 of them at once (quick mode: only the Spots alone).
   "One unit's interruption" is the group alone; in a group at once the Spots move together
   (``MOVES_AT_ONCE`` in host/relocation.py) and each interruption counts the others' transfers
   and commits.
   - inside: each completed move logs its ``MoveTimes`` on the source (host/moving.py, DEBUG),
     all from the start of its seal (from then on what reaches it is held). Three ends: the
     *cutover submitted* (the commit written and the one-way ``RelocateCommit`` on its way:
     issue 14's "its queue sealed until its cutover submit completes", seed 000's "to the ...
     terminal of the one-way cutover submit", RELOC-31), the stricter *target serves it* (the
     target answered the open after the relay: upstream spec 28 §7.1's end), and the commit
     alone (the record names the target). Every move of every round counts.
   - outside: this process sends sequential requests in a loop to one Spot of the size the
     whole time, each answer carrying the Spot's count (which must go up by one per answer, so
     the state moved); the figure of a round is the longest gap between consecutive answers
     that overlaps that round's ``relocate`` call (its window on this process's clock): an
     upper bound of what the caller saw, which includes the relay of the held request, the
     stale route's follow relay and the wait behind the Spots moved before it.
2. Baseline: the same payload as one plain ZeroMQ transfer between two processes on 127.0.0.1:
   a DEALER sends the payload, the ROUTER answers 1 byte, driven from Trio with the minimal loop
   of bench/transport.py (non-blocking sockets, waiting on ``zmq.FD``); p50 and p99.
3. Host relocation time: one host holding N Spots (half User Spots, half Instance Spots) and N
   Actors of the Entry Spot, each with a 64-byte adapter payload, relocates to a second host
   (the other process) while this process sends requests to random units the whole time; it
   prints how long ``host.relocate()`` took in the relocating process, the mean time of each
   step of a move, and what the traffic saw (answers, errors by kind, the longest gap). Spots
   move ``MOVES_AT_ONCE`` at a time, then the Actors (host/relocation.py), so the steps' mean
   times overlap.

Targets (issue 14): interruption p99 <= 5 ms (1 KiB) and <= 50 ms (1 MiB), each printed for the
issue's measure (to the cutover submit) and the stricter two (to the target serving, and what a
caller saw); a host of 1,000 Spots
and 1,000 Actors relocated in <= 5 s (quick mode: 40 of each, scaled). A benchmark reports and
exits 0 whatever the figures; it exits 1, with the reason on stderr, when the hosts cannot be
formed or a relocation does not end RELOCATED. ``--profile`` runs both host processes under
cProfile while part 3's host relocates and prints where each spent its time (that run's figures
are slower).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import itertools
import json
import logging
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import attrs
import trio
import zmq
from members import NoMembers
from ratios import percentile
from ratios import report as report_figure

import zlink_trio as zl
from zlink_trio._integration.store import DSN_VARIABLE, EmbeddedPostgres
from zlink_trio._runtime.host.moving import MoveTimes

HERE = Path(__file__).resolve().parent
SIZES = {"1 KiB": 1024, "1 MiB": 1024 * 1024}
TARGET_MS = {"1 KiB": 5.0, "1 MiB": 50.0}
UNIT_STATE = 64
C = TypeVar("C", bound=type)
FORM_TIMEOUT = 60.0


@attrs.frozen
class Counts:
    rounds: int  # relocations of part 1
    per_size: int  # Spots of each size on the relocating host
    transfers: dict[str, int]  # baseline transfers per size
    units: int  # part 3
    traffic: int  # part 3: client tasks, each one request at a time
    only: str | None = None  # part 1's one group to measure (--group); part 3 then skipped


FULL = Counts(rounds=40, per_size=5, transfers={"1 KiB": 2000, "1 MiB": 300}, units=1000, traffic=2)
QUICK = Counts(rounds=3, per_size=1, transfers={"1 KiB": 50, "1 MiB": 10}, units=40, traffic=1)

# --- the application ---------------------------------------------------------------------------

app = zl.Application()  # the hosts'
client_app = zl.Application()  # this process's: the messages, no Spot type


def message(name: str) -> Callable[[C], C]:
    """Declare a message in both applications."""

    def declare(cls: C) -> C:
        return client_app.message(name)(app.message(name)(cls))

    return declare


@message("bench.Fill")
@attrs.frozen
class Fill:
    size: int


@message("bench.Filled")
@attrs.frozen
class Filled:
    crc: int


@message("bench.Ping")
@attrs.frozen
class Ping:
    pass


@message("bench.Pong")
@attrs.frozen
class Pong:
    count: int


@message("bench.Check")
@attrs.frozen
class Check:
    pass


def written_down(target: Holder) -> bytes:
    """A Spot's or Actor's count and data, as they are."""
    return target.count.to_bytes(8, "big") + target.data


def read_back(target: Holder, payload: bytes) -> None:
    target.count = int.from_bytes(payload[:8], "big")
    target.data = payload[8:]


class State(zl.SpotRelocationAdapter["Holder"]):
    """The Spot's count and data, as they are."""

    async def capture(self, target: Holder) -> bytes:
        return written_down(target)

    async def restore(self, target: Holder, payload: bytes) -> None:
        read_back(target, payload)


class Holder:
    """What every Spot of the bench does: keep data and count the pings."""

    def __init__(self) -> None:
        self.count = 0
        self.data = b""

    @zl.request_handler(Fill)
    async def fill(self, req: Fill) -> Filled:
        self.data = os.urandom(req.size)
        return Filled(zlib.crc32(self.data))

    @zl.request_handler(Ping)
    async def ping(self, req: Ping) -> Pong:
        self.count += 1
        return Pong(self.count)

    @zl.request_handler(Check)
    async def check(self, req: Check) -> Filled:
        return Filled(zlib.crc32(self.data))


@app.user_spot("bench.Held", relocation=zl.preserve_state_with(State))
class Held(Holder, NoMembers):
    pass


@app.instance_spot("bench.HeldInstance", relocation=zl.preserve_state_with(State))
class HeldInstance(Holder, zl.InstanceSpot):
    pass


class ActorState(zl.ActorRelocationAdapter["Agent"]):
    """An Actor's count and data, as they are."""

    async def capture(self, target: Agent) -> bytes:
        return written_down(target)

    async def restore(self, target: Agent, payload: bytes) -> None:
        read_back(target, payload)


@app.actor("bench.Agent", relocation=zl.preserve_state_with(ActorState))
class Agent(Holder, zl.Actor):
    pass


def config(dsn: str, mesh: str, security: str) -> zl.HostConfig:
    return zl.HostConfig(
        mesh=mesh, store_dsn=dsn, request_timeout=30.0, transport_security=security
    )


# --- a host process (child) ----------------------------------------------------------------------


class MoveLog(logging.Handler):
    """Collects the ``MoveTimes`` the moves of this process log (host/moving.py)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.moves: list[MoveTimes] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if isinstance(args, tuple) and args and isinstance(args[0], MoveTimes):
            self.moves.append(args[0])


class HostProcess:
    """Opens, fills, relocates and closes hosts when the parent says so, one JSON line each."""

    def __init__(self, dsn: str, mesh: str, security: str, moves: MoveLog) -> None:
        self.config = config(dsn, mesh, security)
        self.moves = moves
        self.hosts: dict[str, zl.Host] = {}
        self.stops: dict[str, trio.Event] = {}
        self.closed: dict[str, trio.Event] = {}
        self.profiler: cProfile.Profile | None = None

    async def _run_host(self, *, task_status: trio.TaskStatus[zl.Host]) -> None:
        async with zl.open_host(app, self.config) as host:
            rid, stop = host.node_rid.value, trio.Event()
            self.hosts[rid] = host
            self.stops[rid] = stop
            closed = self.closed[rid] = trio.Event()
            task_status.started(host)
            await stop.wait()
            await host.shutdown()
        del self.hosts[rid]
        closed.set()

    async def command(self, nursery: trio.Nursery, words: list[str]) -> dict[str, Any]:
        verb = words[0]
        if verb == "open":
            host = await nursery.start(self._run_host)
            return {"rid": host.node_rid.value}
        if verb == "profile":  # start, or stop and write to words[1]
            if self.profiler is None:
                self.profiler = cProfile.Profile()
                self.profiler.enable()
            else:
                self.profiler.disable()
                self.profiler.dump_stats(words[1])
                self.profiler = None
            return {}
        host = self.hosts[words[1]]
        if verb == "see":
            return {"seen": await sees(host, [zl.NodeRid(rid) for rid in words[2:]])}
        if verb == "warm":
            return {"up": await routes_up(host, [zl.NodeRid(rid) for rid in words[2:]])}
        if verb == "fill":
            kind, prefix, count, size = words[2], words[3], int(words[4]), int(words[5])
            return {"crcs": await fill(host, kind, prefix, count, size)}
        if verb == "relocate":
            self.moves.moves.clear()
            started = time.perf_counter()
            result = await host.relocate(deadline=float(words[2]))
            took = time.perf_counter() - started
            moves = [attrs.astuple(move) for move in self.moves.moves]
            outcome = f"{result.outcome.name}/{result.reason.name}"
            # Trio's clock is perf_counter (one clock for every process here) plus an offset.
            offset = time.perf_counter() - trio.current_time()
            answer = {"result": outcome, "ok": result.relocated, "took": took, "moves": moves}
            return {**answer, "offset": offset}
        if verb == "close":  # answered once the host is closed, so it is not in the next round
            self.stops[words[1]].set()
            await self.closed.pop(words[1]).wait()
            return {}
        raise ValueError(f"unknown command {words!r}")


async def routes_up(host: zl.Host, rids: Iterable[zl.NodeRid]) -> bool:
    """Whether ``host``'s transport routes to every one of ``rids`` are up (connected, and the
    CURVE handshake done) within FORM_TIMEOUT (polled): a long-running mesh has its routes up
    before a relocation, so a round does not count a route that a fresh host is still making.
    Reads the transport through the host's internals, as the MoveTimes log does."""
    mesh = host._tree.remote.mesh  # type: ignore[attr-defined]
    wanted = list(rids)
    deadline = trio.current_time() + FORM_TIMEOUT
    while trio.current_time() < deadline:
        if all(mesh.is_up(rid) is not None for rid in wanted):
            return True
        await trio.sleep(0.005)
    return False


async def sees(host: zl.Host, rids: Iterable[zl.NodeRid]) -> bool:
    """Whether every one of ``rids`` shows in ``host.peers`` within FORM_TIMEOUT (polled)."""
    wanted = set(rids)
    deadline = trio.current_time() + FORM_TIMEOUT
    while trio.current_time() < deadline:
        if wanted.issubset(host.peers):
            return True
        await trio.sleep(0.005)
    return wanted.issubset(host.peers)


async def fill(host: zl.Host, kind: str, prefix: str, count: int, size: int) -> dict[str, int]:
    """Make ``count`` Spots here, each with ``size`` bytes of data; their data's CRCs by id."""
    crcs: dict[str, int] = {}
    limit = trio.Semaphore(32)

    async def one(spot_id: str) -> None:
        async with limit:
            if kind == "actor":
                await host.actors.create(spot_id, "bench.Agent").submit()
                actor_call = host.route.request_to_actor(spot_id, Fill(size), reply_type=Filled)
                crcs[spot_id] = (await actor_call.submit()).crc
                return
            call = host.route.request_to_spot(spot_id, Fill(size), reply_type=Filled)
            if kind == "instance":
                call = call.instance_spot("bench.HeldInstance")
            else:
                await host.spots.get_or_create(spot_id, "bench.Held").submit()
            crcs[spot_id] = (await call.submit()).crc

    async with trio.open_nursery() as nursery:
        for number in range(count):
            nursery.start_soon(one, f"{prefix}-{number:04}")
    return crcs


async def host_process(dsn: str, mesh: str, security: str) -> None:
    moves = MoveLog()
    logger = logging.getLogger("zlink_trio.runtime.relocation.times")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(moves)
    warnings = logging.StreamHandler(sys.stderr)
    warnings.setLevel(logging.WARNING)
    logging.getLogger().addHandler(warnings)
    process = HostProcess(dsn, mesh, security, moves)
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with trio.open_nursery() as nursery:
        buffer = b""
        while True:
            data = await stdin.receive_some()
            if not data:
                break
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    answer = await process.command(nursery, line.decode().split())
                except Exception as error:  # said to the parent, which stops the run
                    answer = {"error": f"{type(error).__name__}: {error}"}
                print(json.dumps(answer), flush=True)
        for stop in process.stops.values():
            stop.set()


# --- the parent's side of a host process ------------------------------------------------------


class BenchError(Exception):
    """The hosts could not be formed or a relocation failed; nothing can be measured."""


class Child:
    """A host process, driven by one command at a time."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._buffer = b""

    @classmethod
    async def start(cls, dsn: str, mesh: str, security: str) -> Child:
        command = [sys.executable, str(Path(__file__).resolve()), "--host-process", dsn, mesh]
        command.append(security)
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        return cls(process)

    async def ask(self, *words: object, within: float = 120.0) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        await self.process.stdin.send_all((" ".join(map(str, words)) + "\n").encode())
        with trio.move_on_after(within):
            while b"\n" not in self._buffer:
                data = await self.process.stdout.receive_some()
                if not data:
                    raise BenchError(f"a host process ended while asked {words!r}")
                self._buffer += data
            line, self._buffer = self._buffer.split(b"\n", 1)
            answer: dict[str, Any] = json.loads(line)
            if "error" in answer:
                raise BenchError(f"a host process answered {words!r} with {answer['error']}")
            return answer
        raise BenchError(f"a host process did not answer {words!r} within {within} s")

    async def see(self, rid: str, other: str) -> None:
        """Wait until host ``rid`` of this process lists ``other`` in its peers."""
        if not (await self.ask("see", rid, other))["seen"]:
            raise BenchError(f"host {rid} did not see {other} within {FORM_TIMEOUT} s")

    async def stop(self) -> None:
        if self.process.stdin is not None:
            await self.process.stdin.aclose()  # the child shuts its hosts down on EOF
        with trio.move_on_after(30.0):
            await self.process.wait()
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


# --- part 1: one unit's interruption ------------------------------------------------------------

ERRORS_SEEN: dict[str, str] = {}
"""The first error of each kind a caller of this process saw, as it said it."""


def count_error(errors: dict[str, int], error: zl.ZLinkError) -> None:
    errors[error.kind.name] = errors.get(error.kind.name, 0) + 1
    ERRORS_SEEN.setdefault(error.kind.name, str(error))


@attrs.define
class Prober:
    """Sequential requests to one Spot: when each answer came, and what went wrong."""

    spot_id: str
    answers: list[float] = attrs.Factory(list)
    errors: dict[str, int] = attrs.Factory(dict)
    count_errors: int = 0

    async def run(self, client: zl.Host) -> None:
        last = None
        while True:
            call = client.route.request_to_spot(self.spot_id, Ping(), reply_type=Pong)
            try:
                pong = await call.submit()
            except zl.ZLinkError as error:
                count_error(self.errors, error)
                continue
            self.answers.append(time.perf_counter())
            if last is not None and pong.count != last + 1:
                self.count_errors += 1
            last = pong.count

    def longest_gap(self, start: float, end: float) -> float:
        """The longest gap between consecutive answers that overlaps ``[start, end]``."""
        gaps = [
            later - earlier
            for earlier, later in itertools.pairwise(self.answers)
            if later >= start and earlier <= end
        ]
        return max(gaps, default=end - start)


@attrs.define
class Interruption:
    moves: dict[str, list[MoveTimes]] = attrs.Factory(dict)  # by size
    outside: dict[str, list[float]] = attrs.Factory(dict)  # the longest gap of each round
    probers: list[Prober] = attrs.Factory(list)
    crcs_kept: bool = True
    took: list[float] = attrs.Factory(list)


def when_in_move(at: float, spot_id: str, kind: str, moves: list[MoveTimes], offset: float) -> str:
    """Where a failed call's end fell in its Spot's move (``offset`` turns the source's Trio
    clock into this process's ``perf_counter``)."""
    move = next((m for m in moves if m.spot_id == spot_id), None)
    if move is None:
        return f"{kind} for {spot_id}, which did not move"
    after = (at - (move.sealing + offset)) * 1e3
    committed, opened = (move.committed - move.sealing) * 1e3, (move.opened - move.sealing) * 1e3
    return (
        f"{kind} for {spot_id} ended {after:.1f} ms after its seal began"
        f" (its commit at {committed:.1f} ms, the target open at {opened:.1f} ms)"
    )


def step_means(moves: list[MoveTimes]) -> dict[str, float]:
    """The mean milliseconds of each step of the moves (host/moving.py ``MoveTimes``)."""
    steps = {
        "seal (the running turn ends)": [m.sealed - m.sealing for m in moves],
        "capture, RelocateIn + chunks, restore": [m.prepared - m.sealed for m in moves],
        "commit (one conditional write)": [m.committed - m.prepared for m in moves],
        "commit told (one way)": [m.told - m.committed for m in moves],
        "relay, RelocateOpen (it serves)": [m.opened - m.told for m in moves],
    }
    return {step: statistics.fmean(v) * 1e3 if v else 0.0 for step, v in steps.items()}


def part_one_groups(counts: Counts) -> list[tuple[str, int]]:
    """Part 1's groups: each size alone, then ``per_size`` at once (when more than one)."""
    pers = sorted({1, counts.per_size})
    groups = [(size, per) for size in SIZES for per in pers]
    return [group for group in groups if counts.only in (None, group_of(*group))]


def group_of(size: str, per: int) -> str:
    """Part 1's name for the moves of ``per`` Spots of ``size`` relocating at once."""
    return size if per == 1 else f"{size}, {per} at once"


async def measure_interruption(
    client: zl.Host,
    children: tuple[Child, Child],
    counts: Counts,
    size: str,
    per: int,
    figures: Interruption,
) -> None:
    """Part 1 for ``per`` Spots of one size on the relocating host, into ``figures``."""
    prefix = "small" if size == "1 KiB" else "large"
    group = group_of(size, per)
    here = 0
    rid = (await children[here].ask("open"))["rid"]
    filled = await children[here].ask("fill", rid, "user", prefix, per, SIZES[size])
    crcs: dict[str, int] = filled["crcs"]
    probers = [Prober(f"{prefix}-0000")]
    figures.probers += probers
    async with trio.open_nursery() as nursery:
        for prober in probers:
            nursery.start_soon(prober.run, client)
        for _ in range(counts.rounds):
            there = 1 - here
            new = (await children[there].ask("open"))["rid"]
            await children[there].see(new, rid)
            await children[here].see(rid, new)
            if not await sees(client, [zl.NodeRid(new)]):
                raise BenchError(f"the client did not see the new host {new}")
            if not (await children[here].ask("warm", rid, new))["up"]:
                raise BenchError(f"the route from {rid} to the new host {new} did not come up")
            start = time.perf_counter()
            answer = await children[here].ask("relocate", rid, 30.0)
            end = time.perf_counter()
            if not answer["ok"]:
                raise BenchError(f"a relocation of {per} Spots: {answer['result']}")
            figures.took.append(answer["took"])
            for move in (MoveTimes(*fields) for fields in answer["moves"]):
                figures.moves.setdefault(group, []).append(move)
            for prober in probers:
                gap = prober.longest_gap(start, end)
                figures.outside.setdefault(group, []).append(gap)
            await children[here].ask("close", rid)
            here, rid = there, new
        nursery.cancel_scope.cancel()
    for spot_id, crc in crcs.items():
        check = await client.route.request_to_spot(spot_id, Check(), reply_type=Filled).submit()
        figures.crcs_kept = figures.crcs_kept and check.crc == crc
    await children[here].ask("close", rid)


# --- part 2: the baseline ----------------------------------------------------------------------


def load_transport() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_transport", HERE / "transport.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def serve_zmq() -> None:
    """The baseline's receiving process: answer every message with one byte."""
    transport = load_transport()
    router: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
    router.bind("tcp://127.0.0.1:*")
    print("READY", router.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
    while True:
        identity, _payload = await transport.trio_receive(router)
        await transport.trio_send(router, [identity, b"k"])


async def measure_transfers(counts: Counts) -> dict[str, list[float]]:
    transport = load_transport()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve-zmq"]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
    dealer: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    try:
        assert process.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            line += await process.stdout.receive_some(1)
        dealer.connect(line.decode().split()[1])
        figures: dict[str, list[float]] = {}
        for size, total in counts.transfers.items():
            payload = os.urandom(SIZES[size])
            latencies = figures[size] = []
            for index in range(total // 10 + total):  # a tenth more as warm-up
                started = time.perf_counter()
                await transport.trio_send(dealer, [payload])
                await transport.trio_receive(dealer)
                if index >= total // 10:
                    latencies.append(time.perf_counter() - started)
        return figures
    finally:
        dealer.close(linger=0)
        process.kill()
        await process.wait()


# --- part 3: a host of many units -------------------------------------------------------------


@attrs.define
class HostFigures:
    units: int
    took: float
    result: str
    steps: dict[str, float]  # mean ms of each step of a move
    moves: int
    answers: int
    errors: dict[str, int]
    longest_gap: float
    failures: list[str]  # each failed call, placed in its Spot's move
    cpu: tuple[float, float]  # CPU seconds of the source's and the target's process during it


async def measure_host(
    client: zl.Host, children: tuple[Child, Child], counts: Counts, profile: Path | None
) -> HostFigures:
    source, target = children
    rid = (await source.ask("open"))["rid"]
    half = counts.units // 2
    await source.ask("fill", rid, "user", "unit-u", half, UNIT_STATE, within=600.0)
    await source.ask("fill", rid, "instance", "unit-i", counts.units - half, UNIT_STATE)
    await source.ask("fill", rid, "actor", "unit-a", counts.units, UNIT_STATE, within=600.0)
    ids = [f"unit-u-{n:04}" for n in range(half)]
    ids += [f"unit-i-{n:04}" for n in range(counts.units - half)]
    ids += [f"unit-a-{n:04}" for n in range(counts.units)]
    new = (await target.ask("open"))["rid"]
    await target.see(new, rid)
    await source.see(rid, new)
    if not await sees(client, [zl.NodeRid(new)]):
        raise BenchError(f"the client did not see the target host {new}")
    answers: list[float] = []
    errors: dict[str, int] = {}
    failed: list[tuple[float, str, str]] = []  # when a call failed, to which Spot, the kind

    async def traffic(seed: int) -> None:
        pick = random.Random(seed)
        while True:
            spot_id = pick.choice(ids)
            if spot_id.startswith("unit-a-"):
                call: Any = client.route.request_to_actor(spot_id, Ping(), reply_type=Pong)
            else:
                call = client.route.request_to_spot(spot_id, Ping(), reply_type=Pong)
            try:
                await call.submit()
                answers.append(time.perf_counter())
            except zl.ZLinkError as error:
                count_error(errors, error)
                failed.append((time.perf_counter(), spot_id, error.kind.name))

    async with trio.open_nursery() as nursery:
        for seed in range(counts.traffic):
            nursery.start_soon(traffic, seed)
        await trio.sleep(0.5)
        if profile is not None:
            await source.ask("profile")
            await target.ask("profile")
        pids = (source.process.pid, target.process.pid)
        cpu = [cpu_seconds(pid) for pid in pids]
        start = time.perf_counter()
        answer = await source.ask("relocate", rid, 120.0, within=300.0)
        end = time.perf_counter()
        cpu = [cpu_seconds(pid) - before for pid, before in zip(pids, cpu, strict=True)]
        if profile is not None:
            await source.ask("profile", profile / "source.prof")
            await target.ask("profile", profile / "target.prof")
        await trio.sleep(0.5)
        nursery.cancel_scope.cancel()
    moves = [MoveTimes(*fields) for fields in answer["moves"]]
    failures = [
        when_in_move(at, spot_id, kind, moves, answer["offset"]) for at, spot_id, kind in failed
    ]
    mean = step_means(moves)
    # Moves overlap (MOVES_AT_ONCE): the host's time per unit, not the rest of one move.
    mean["the host's time per unit (moves overlap)"] = answer["took"] / max(len(moves), 1) * 1e3
    gaps = [b - a for a, b in itertools.pairwise(answers) if b >= start and a <= end]
    await source.ask("close", rid)
    await target.ask("close", new)
    return HostFigures(
        counts.units,
        answer["took"],
        answer["result"],
        mean,
        len(moves),
        sum(1 for a in answers if start <= a <= end),
        errors,
        max(gaps, default=0.0),
        failures,
        (cpu[0], cpu[1]),
    )


# --- the run ---------------------------------------------------------------------------------


def verdict(met: bool) -> str:
    return "met" if met else "missed"


def report(
    parts: Interruption, base: dict[str, list[float]], host: HostFigures | None, counts: Counts
) -> None:
    print(
        f"\n1. service interruption of one unit ({counts.rounds} relocations of each group: a"
        f" Spot alone, and {counts.per_size} Spots of the size at once; one group at a time; ms)"
    )
    print(f"  {'':44} {'n':>5} {'p50':>8} {'p99':>8} {'max':>8}")
    for size, per in part_one_groups(counts):
        group = group_of(size, per)
        moves = parts.moves.get(group, [])
        inside = [m.opened - m.sealing for m in moves]
        submitted = [m.told - m.sealing for m in moves]
        if moves:
            committed = [m.committed - m.sealing for m in moves]
            p50 = percentile(committed, 0.5) * 1e3
            report_figure(f"{group} seal -> commit done p50, ms", p50, "lower")
        rows = (
            ("inside: seal start -> cutover submitted", submitted),
            ("inside: seal start -> target serves it", inside),
            ("inside: seal start -> commit done", [m.committed - m.sealing for m in moves]),
            ("outside: longest gap in the round", parts.outside.get(group, [])),
            ("baseline: one plain ZeroMQ transfer", base[size]),
        )
        print(f"  {group}")
        for name, values in rows:
            if not values:
                print(f"    {name:42} {0:5d}")
                continue
            p50, p99 = percentile(values, 0.5) * 1e3, percentile(values, 0.99) * 1e3
            print(f"    {name:42} {len(values):5d} {p50:8.2f} {p99:8.2f} {max(values) * 1e3:8.2f}")
        outside = parts.outside.get(group, [])
        b50, b99 = percentile(base[size], 0.5), percentile(base[size], 0.99)
        if inside and outside:
            i99, o99 = percentile(inside, 0.99) * 1e3, percentile(outside, 0.99) * 1e3
            print(
                f"    ratios to the baseline: inside p50 {percentile(inside, 0.5) / b50:.1f}x"
                f" p99 {percentile(inside, 0.99) / b99:.1f}x; outside p50"
                f" {percentile(outside, 0.5) / b50:.1f}x p99 {percentile(outside, 0.99) / b99:.1f}x"
            )
            target = TARGET_MS[size]
            s99 = percentile(submitted, 0.99) * 1e3
            print(
                f"    interruption p99 (target <= {target:g} ms): to the cutover submit"
                f" {s99:.2f} ms, {verdict(s99 <= target)} (issue 14's measure); to the target"
                f" serving {i99:.2f} ms, {verdict(i99 <= target)}; outside {o99:.2f} ms,"
                f" {verdict(o99 <= target)}"
            )
            steps = ", ".join(f"{step} {ms:.2f}" for step, ms in step_means(moves).items())
            print(f"    mean ms of each step: {steps}")
            slowest = sorted(moves, key=lambda m: m.opened - m.sealing)[-max(len(moves) // 50, 1) :]
            steps = ", ".join(f"{step} {ms:.2f}" for step, ms in step_means(slowest).items())
            print(f"    the same for the slowest 2 % ({len(slowest)} moves): {steps}")
    errors = {kind: n for prober in parts.probers for kind, n in prober.errors.items()}
    count_errors = sum(prober.count_errors for prober in parts.probers)
    answered = sum(len(prober.answers) for prober in parts.probers)
    print(
        f"  the probes: {answered} answers, errors {errors or 'none'}, {count_errors} counts"
        f" out of sequence; every Spot's data intact after the last move:"
        f" {'yes' if parts.crcs_kept else 'NO'}"
    )
    if host is None:
        print(f"\n3. host relocation: not measured (--group {counts.only!r})")
        return
    units = 2 * host.units
    print(f"\n3. host relocation: {host.units} Spots (half User Spots, half Instance Spots)")
    print(f"   and {host.units} Actors of the Entry Spot, each with a {UNIT_STATE}-byte adapter")
    print(f"   payload; {counts.traffic} client task(s) sending to all of them")
    print(f"  result: {host.result}; {host.moves} moves")
    scaled = "" if host.units == 1000 else ", scaled to 2,000 units"
    per_unit = host.took / max(units, 1) * 1e3
    report_figure("host relocation, ms a unit", per_unit, "lower")
    print(
        f"  host.relocate() took {host.took:.2f} s, {per_unit:.2f} ms a unit (target for"
        f" 1,000 Spots and 1,000 Actors: <= 5 s{scaled}): {verdict(per_unit * 2000 <= 5000)}"
    )
    print(
        f"  CPU used meanwhile (every thread): the relocating process {host.cpu[0]:.2f} s,"
        f" the target's {host.cpu[1]:.2f} s"
    )
    print("  mean time of each step of one move, ms:")
    for step, ms in host.steps.items():
        print(f"    {step:44} {ms:7.2f}")
    print(
        f"  traffic during it: {host.answers} answers, errors {host.errors or 'none'},"
        f" longest gap between answers {host.longest_gap * 1e3:.1f} ms"
    )
    for failure in host.failures[:10]:
        print(f"  {failure}")
    for kind, said in ERRORS_SEEN.items():
        print(f"  the first {kind} a caller saw: {said}")


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) a process has used so far; 0 without /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def steal() -> tuple[int, int]:
    """The machine's (steal, total) jiffies so far, from /proc/stat; (0, 0) without it."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


def print_profile(title: str, path: Path) -> None:
    if not path.exists():
        print(f"\n{title}: no profile written")
        return
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)
    print(f"\n{title} while part 3's host relocated, by own time, then cumulative:")
    print("\n".join(out.getvalue().splitlines()))


async def run(args: argparse.Namespace, dsn: str, profile_dir: Path | None) -> None:
    counts = QUICK if args.quick else FULL
    if args.rounds is not None:
        counts = attrs.evolve(counts, rounds=args.rounds)
    if args.group is not None:
        names = [group_of(*group) for group in part_one_groups(counts)]
        if args.group not in names:
            raise BenchError(f"--group {args.group!r}: part 1's groups are {names}")
        counts = attrs.evolve(counts, only=args.group)
    print(f"python {sys.version.split()[0]}, pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}")
    print(f"transport_security={args.security!r} for every host; the baseline is plain ZeroMQ")
    started = time.perf_counter()
    base = await measure_transfers(counts)
    print(f"baseline measured in {time.perf_counter() - started:.1f} s")
    mesh = f"bench-{uuid.uuid4().hex[:8]}"
    async with zl.open_host(client_app, config(dsn, mesh, args.security)) as client:
        children = (
            await Child.start(dsn, mesh, args.security),
            await Child.start(dsn, mesh, args.security),
        )
        try:
            started = time.perf_counter()
            parts = Interruption()
            for size, per in part_one_groups(counts):  # one group at a time
                await measure_interruption(client, children, counts, size, per, parts)
            print(f"part 1 measured in {time.perf_counter() - started:.1f} s")
            started = time.perf_counter()
            host = None
            if counts.only is None:
                host = await measure_host(client, (children[1], children[0]), counts, profile_dir)
                print(f"part 3 measured in {time.perf_counter() - started:.1f} s")
        finally:
            with trio.CancelScope(shield=True):
                for child in children:
                    await child.stop()
        await client.shutdown()
    report(parts, base, host, counts)
    if profile_dir is not None:
        print_profile("the relocating host's process", profile_dir / "source.prof")
        print_profile("the target host's process", profile_dir / "target.prof")


def measure(args: argparse.Namespace) -> int:
    total = time.perf_counter()
    stolen, jiffies = steal()
    failure = None
    with tempfile.TemporaryDirectory(prefix="zlink-bench-relocation-") as folder:
        profile_dir = Path(folder) if args.profile else None
        dsn = os.environ.get(DSN_VARIABLE) or None
        server = None if dsn else EmbeddedPostgres(Path(folder) / "pgdata")
        try:
            if server is not None:
                dsn = trio.run(server.start, 60.0)
                print("store: embedded PostgreSQL (temporary)")
            else:
                print(f"store: {DSN_VARIABLE}")
            assert dsn is not None
            trio.run(run, args, dsn, profile_dir)
        except (BenchError, zl.ZLinkError, zl.ConfigurationError) as error:
            failure = f"{type(error).__name__}: {error}"
        finally:
            if server is not None:
                trio.run(server.stop, 60.0)
    if failure is not None:
        print(f"bench/relocation.py: nothing measured: {failure}", file=sys.stderr)
        return 1
    stolen2, jiffies2 = steal()
    share = (stolen2 - stolen) / max(jiffies2 - jiffies, 1) * 100
    load = ", ".join(f"{figure:.1f}" for figure in os.getloadavg())
    print(
        f"\ntotal {time.perf_counter() - total:.1f} s; load average {load} on {os.cpu_count()}"
        f" CPUs; CPU steal during the run {share:.1f} %"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts, a smoke run")
    parser.add_argument(
        "--rounds",
        type=int,
        help="relocations of each part-1 group (default 40, whose p99 is their slowest)",
    )
    parser.add_argument(
        "--group",
        help="measure only this group of part 1 (e.g. '1 KiB', '1 MiB, 5 at once'), not part 3",
    )
    parser.add_argument("--security", choices=("curve", "none"), default="curve")
    parser.add_argument("--profile", action="store_true", help="cProfile the host processes")
    parser.add_argument("--host-process", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--serve-zmq", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_zmq:
        trio.run(serve_zmq)
        return 0
    if args.host_process:
        trio.run(host_process, *args.host_process)
        return 0
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
