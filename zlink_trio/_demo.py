"""``zlink-trio demo``: a workload over several host processes, watched live (specs/demo.md).

The parent (``main``) resolves a store (``--dsn``, else ``ZLINK_STORE_DSN``, else a temporary
embedded PostgreSQL), writes one node configuration per host (the TOML format of ``zlink-trio
node``, with a ``[demo]`` table for the workload) and starts each host as its own process,
``python -m zlink_trio demo --child FILE``, in a session of its own so a Ctrl-C reaches the
parent only and the parent decides the order of shutdown.

Parent and children talk in lines. A child writes JSON objects on stdout, one a line, each with
an ``event``; the parent writes bare commands on the child's stdin::

    child -> parent                         parent -> child
    ready    host up, every peer seen       go        set up: rooms, users, joins
    set      rooms owned, users joined      run       run the workload until ...
    stats    counts since the last stats    stop      ... stop, send the last stats
    stopped  the workload has ended         shutdown  host.shutdown(), then exit 0
    closed   the host has shut down         (end of input, SIGTERM: shut down as well)
    failed   what went wrong (then exit 1)

Each phase waits for every child (a barrier), so no host addresses a room or a user before it
exists, and no host shuts down while another still sends to it. Hosts shut down one at a time,
the last started first. The workload (``_Workload``) touches every kind of object from every
host: rooms are User Spots that each host get-or-creates (one activation wins cluster-wide),
users are Actors created on their own host that join rooms their host owns, counters are
Instance Spots activated cold by whichever host sends to them first; sends and requests pick
their target at random, so most cross processes.

Only the public API is used, plus ``_inspect`` (activations per node, read from the store) and
``EmbeddedPostgres`` (the temporary store).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
import uuid
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

import attrs
import trio

import zlink_trio as zl
from zlink_trio import _inspect, _node

__all__ = ["app", "child_main", "main", "percentile"]

# --- the application -----------------------------------------------------------------------

app = zl.Application()


@app.message("demo.Say")
@attrs.frozen
class Say:
    text: str


@app.message("demo.Enter")
@attrs.frozen
class Enter:
    room: str


@app.message("demo.Speak")
@attrs.frozen
class Speak:
    text: str


@app.message("demo.Ping")
@attrs.frozen
class Ping:
    seq: int


@app.message("demo.Pong")
@attrs.frozen
class Pong:
    seq: int
    user: str


@app.message("demo.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("demo.Read")
@attrs.frozen
class Read:
    pass


@app.message("demo.Total")
@attrs.frozen
class Total:
    value: int


@app.message("demo.Status")
@attrs.frozen
class Status:
    pass


@app.message("demo.UserStatus")
@attrs.frozen
class UserStatus:
    room: str | None
    outcome: str | None
    error: str | None


ROOM_TYPE = "demo.Room"
COUNTER_TYPE = "demo.Counter"
USER_TYPE = "demo.User"


@app.user_spot(ROOM_TYPE)
class Room(zl.Spot):
    """A chat room: counts what is said in it; users join it as members."""

    def __init__(self) -> None:
        self.lines = 0
        self.members = 0

    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        return zl.SpotActorJoinResult.accept()

    async def on_joined_actor(self, actor: object) -> None:
        self.members += 1

    async def on_leave_actor(self, actor: object) -> None:
        self.members -= 1

    @zl.packet_handler(Say)
    async def say(self, msg: Say) -> None:
        self.lines += 1

    @zl.request_handler(Read)
    async def read(self, req: Read) -> Total:
        return Total(self.lines)


@app.instance_spot(COUNTER_TYPE)
class Counter(zl.InstanceSpot):
    """A counter, activated cold by the first message any host sends it."""

    def __init__(self) -> None:
        self.total = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.total += msg.amount

    @zl.request_handler(Read)
    async def read(self, req: Read) -> Total:
        return Total(self.total)


@app.actor(USER_TYPE)
class User(zl.Actor):
    """A user: joins a room of its own host, speaks into it, answers pings from anywhere."""

    def __init__(self) -> None:
        self.room: str | None = None
        self.outcome: str | None = None
        self.error: str | None = None

    @zl.packet_handler(Enter)
    async def enter(self, msg: Enter) -> None:
        self.context.join_spot(msg.room).defer()

    async def on_join_completed(self, completion: zl.ActorJoinCompletion) -> None:
        self.outcome = completion.outcome.name
        if completion.outcome is zl.ActorJoinOutcome.ACCEPTED:
            self.room = completion.spot_id
        elif completion.error is not None:
            self.error = completion.error.kind.name

    @zl.packet_handler(Speak)
    async def speak(self, msg: Speak) -> None:
        if self.room is not None:
            await self.context.route.send_to_spot(self.room, Say(msg.text)).submit()

    @zl.request_handler(Ping)
    async def ping(self, req: Ping) -> Pong:
        return Pong(req.seq, self.context.actor_id.value)

    @zl.request_handler(Status)
    async def status(self, req: Status) -> UserStatus:
        return UserStatus(self.room, self.outcome, self.error)


# --- shared helpers ------------------------------------------------------------------------

EMBEDDED_START_TIMEOUT = 60.0
READY_TIMEOUT = 90.0
"""Seconds for every host to start and see all its peers."""
SET_UP_TIMEOUT = 60.0
"""Seconds for every host to create its rooms and users and finish the joins."""
STOP_TIMEOUT = 30.0
"""Seconds for every workload to stop after ``stop``."""
CLOSE_TIMEOUT = 30.0
"""Seconds each host gets to shut down before it is killed."""
STATS_INTERVAL = 0.5
"""How often a child reports its counts."""
WORKERS_PER_HOST = 8
"""Concurrent workload loops in each child."""
REQUEST_TIMEOUT = 5.0

EXPECTED_ERROR_KINDS: frozenset[str] = frozenset()
"""Error kinds that do not fail the demo: none; every failed call is a finding."""


def percentile(values: list[int], fraction: float) -> int | None:
    """The nearest-rank percentile of ``values`` (sorted here), or ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _micros(value: int | None) -> str:
    return "-" if value is None else f"{value:,}µs"


def _toml_string(value: str) -> str:
    # JSON's string escapes are a subset of TOML basic strings' escapes.
    return json.dumps(value, ensure_ascii=False)


def _emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


# --- the child: one host ---------------------------------------------------------------------


@attrs.frozen
class Plan:
    """The workload of one child, from the ``[demo]`` table of its configuration."""

    index: int
    rids: tuple[str, ...]
    rooms: tuple[str, ...]
    counters: tuple[str, ...]
    users_per_host: int
    user_prefix: str

    @property
    def rid(self) -> str:
        return self.rids[self.index]

    def users_of(self, index: int) -> list[str]:
        return [f"{self.user_prefix}{index}.{n}" for n in range(self.users_per_host)]

    def all_users(self) -> list[str]:
        return [user for index in range(len(self.rids)) for user in self.users_of(index)]

    def rooms_in_order(self) -> list[str]:
        """Every room, this host's "home" rooms first (so each host usually wins some)."""
        count = len(self.rids)
        return sorted(
            self.rooms, key=lambda room: (self.rooms.index(room) % count != self.index, room)
        )

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> Plan:
        return cls(
            int(section["index"]),
            tuple(str(rid) for rid in section["rids"]),
            tuple(str(room) for room in section["rooms"]),
            tuple(str(counter) for counter in section["counters"]),
            int(section["users_per_host"]),
            str(section["user_prefix"]),
        )


class _Stats:
    """Counts since the last report."""

    def __init__(self) -> None:
        self.sends = 0
        self.requests = 0
        self.latencies: list[int] = []
        self.errors: Tally[str] = Tally()
        self.samples: dict[str, str] = {}
        self.sampled: set[str] = set()

    def failed(self, what: str, error: zl.ZLinkError) -> None:
        """Count a failed call; the first failure of each kind is kept as an example."""
        kind = error.kind.name
        self.errors[kind] += 1
        if kind not in self.sampled:
            self.sampled.add(kind)
            self.samples[kind] = f"{what}: {' '.join(str(error).split())}"

    def take(self) -> dict[str, object]:
        taken: dict[str, object] = {
            "sends": self.sends,
            "requests": self.requests,
            "latencies": self.latencies,
            "errors": dict(self.errors),
            "samples": self.samples,
        }
        self.sends, self.requests, self.latencies, self.errors = 0, 0, [], Tally()
        self.samples = {}
        return taken


class _Workload:
    """The calls one child makes, cycling through six kinds with random targets."""

    def __init__(self, host: zl.Host, plan: Plan, stats: _Stats) -> None:
        self.host = host
        self.plan = plan
        self.stats = stats
        self.users = plan.all_users()
        self.seq = 0

    async def _send(self, what: str, call: zl.SpotSendCall | zl.ActorSendCall) -> None:
        try:
            await call.submit()
        except zl.ZLinkError as error:
            self.stats.failed(f"send to {what}", error)
        else:
            self.stats.sends += 1

    async def _request(self, what: str, submit: Callable[[], Any]) -> None:
        started = trio.current_time()
        try:
            await submit()
        except zl.ZLinkError as error:
            self.stats.failed(f"request to {what}", error)
        else:
            self.stats.requests += 1
            self.stats.latencies.append(round((trio.current_time() - started) * 1_000_000))

    async def one_round(self, rng: random.Random) -> None:
        route = self.host.route
        self.seq += 1
        room = rng.choice(self.plan.rooms)
        user = rng.choice(self.users)
        counter = rng.choice(self.plan.counters)
        say = Say(f"{self.plan.rid} says {self.seq}")
        await self._send(f"room {room}", route.send_to_spot(room, say))
        await self._request(
            f"room {room}",
            route.request_to_spot(room, Read(), reply_type=Total).timeout(REQUEST_TIMEOUT).submit,
        )
        await self._send(f"user {user}", route.send_to_actor(user, Speak(f"hello {self.seq}")))
        await self._request(
            f"user {user}",
            route.request_to_actor(user, Ping(self.seq), reply_type=Pong)
            .timeout(REQUEST_TIMEOUT)
            .submit,
        )
        add = route.send_to_spot(counter, Add(1)).instance_spot(COUNTER_TYPE)
        await self._send(f"counter {counter}", add)
        await self._request(
            f"counter {counter}",
            route.request_to_spot(counter, Read(), reply_type=Total)
            .instance_spot(COUNTER_TYPE)
            .timeout(REQUEST_TIMEOUT)
            .submit,
        )

    async def run(self, worker: int) -> None:
        rng = random.Random(f"{self.plan.rid}/{worker}")
        while True:
            await self.one_round(rng)
            await trio.lowlevel.checkpoint()


async def _lines(stream: trio.abc.ReceiveStream) -> Any:
    """The lines of ``stream`` as text, without their ends; the last one even without one."""
    buffer = b""
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            if buffer:
                yield buffer.decode("utf-8", "replace")
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode("utf-8", "replace").rstrip("\r")


class _Child:
    """One demo host: follows the parent's commands, reports on stdout."""

    def __init__(self, config: _node.NodeConfig, plan: Plan) -> None:
        self.config = config
        self.plan = plan
        self.stats = _Stats()
        self.commands: trio.MemorySendChannel[str]
        self.inbox: trio.MemoryReceiveChannel[str]
        self.commands, self.inbox = trio.open_memory_channel[str](16)

    async def read_stdin(self) -> None:
        stream = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        async with stream:
            async for line in _lines(stream):
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
            if command in wanted or command == "shutdown":
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

    async def report(self) -> None:
        while True:
            await trio.sleep(STATS_INTERVAL)
            _emit("stats", rid=self.plan.rid, **self.stats.take())

    async def run_workload(self, host: zl.Host) -> str:
        workload = _Workload(host, self.plan, self.stats)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.report)
            for worker in range(WORKERS_PER_HOST):
                nursery.start_soon(workload.run, worker)
            command = await self.expect("stop")
            nursery.cancel_scope.cancel()
        _emit("stats", rid=self.plan.rid, **self.stats.take())
        return command

    async def run(self) -> int:
        async with trio.open_nursery() as outer:
            outer.start_soon(self.read_stdin)
            outer.start_soon(self.watch_signals)
            async with zl.open_host(self.config.app, self.config.host) as host:
                await self.wait_for_peers(host)
                _emit("ready", rid=host.node_rid.value, peers=len(host.peers))
                if await self.expect("go") == "go":
                    _emit("set", rid=self.plan.rid, **(await self.set_up(host)))
                    if (
                        await self.expect("run") == "run"
                        and await self.run_workload(host) == "stop"
                    ):
                        _emit("stopped", rid=self.plan.rid)
                        await self.expect()
                await host.shutdown()
            _emit("closed", rid=self.plan.rid)
            outer.cancel_scope.cancel()
        return 0


def child_main(config_path: str) -> int:
    """One demo host (``zlink-trio demo --child FILE``); 0 once it has shut down cleanly."""
    try:
        config = _node.load_config(Path(config_path), sections=("demo",))
        plan = Plan.from_section(config.sections["demo"])
        return trio.run(_Child(config, plan).run)
    except BaseException as error:  # the parent shows it; the details go to stderr
        traceback.print_exc()
        _emit("failed", error=f"{type(error).__name__}: {error}")
        return 1


# --- the parent: starts, watches and stops the hosts ----------------------------------------


@attrs.define
class _Host:
    """What the parent knows about one child."""

    index: int
    rid: str
    config: Path
    process: trio.Process | None = None
    phase: str = "starting"
    sends: int = 0
    requests: int = 0
    latencies: list[int] = attrs.field(factory=list)
    errors: Tally[str] = attrs.field(factory=Tally)
    set_up: dict[str, Any] = attrs.field(factory=dict)
    failure: str | None = None
    samples: dict[str, str] = attrs.field(factory=dict)
    """The first failed call of each error kind, as the host described it."""
    stderr_tail: deque[str] = attrs.field(factory=lambda: deque(maxlen=40))
    returncode: int | None = None
    output_ended: trio.Event = attrs.field(factory=trio.Event)

    @property
    def name(self) -> str:
        return f"h{self.index + 1}"


class DemoFailed(Exception):
    """A phase did not complete; the message says which and why."""


class _Parent:
    def __init__(self, hosts: int, seconds: float, dsn: str, workdir: Path, out: TextIO) -> None:
        self.token = uuid.uuid4().hex[:8]
        self.mesh = f"demo-{self.token}"
        self.seconds = seconds
        self.dsn = dsn
        self.workdir = workdir
        self.out = out
        self.tty = out.isatty()
        self.hosts = [
            _Host(index, f"{self.mesh}-h{index + 1}", workdir / f"h{index + 1}.toml")
            for index in range(hosts)
        ]
        self.activations: dict[str, int] | None = None
        self.interval_latencies: list[int] = []
        self.interval_ops = 0
        self.interval_errors: Tally[str] = Tally()
        self.changed = trio.Event()
        self.running = False

    def note(self) -> None:
        """Wake every waiter: some host's phase, failure or exit changed."""
        self.changed.set()
        self.changed = trio.Event()

    def say(self, text: str) -> None:
        if self.tty:
            self.out.write("\r\x1b[K")
        print(text, file=self.out, flush=True)

    # configuration and processes

    def write_configs(self) -> None:
        count = len(self.hosts)
        rooms = [f"room-{n}" for n in range(2 * count)]
        counters = [f"counter-{n}" for n in range(4 * count)]
        rids = [host.rid for host in self.hosts]
        for host in self.hosts:
            lines = [
                f'app = "{__name__}:app"',
                f"mesh = {_toml_string(self.mesh)}",
                f"store_dsn = {_toml_string(self.dsn)}",
                f"node_rid = {_toml_string(host.rid)}",
                "",
                "[demo]",
                f"index = {host.index}",
                f"rids = [{', '.join(_toml_string(rid) for rid in rids)}]",
                f"rooms = [{', '.join(_toml_string(room) for room in rooms)}]",
                f"counters = [{', '.join(_toml_string(c) for c in counters)}]",
                "users_per_host = 4",
                f"user_prefix = {_toml_string(f'{self.mesh}.user.')}",
            ]
            host.config.write_text("\n".join(lines) + "\n", encoding="utf-8")

    async def start(self, host: _Host, nursery: trio.Nursery) -> None:
        host.process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "zlink_trio", "demo", "--child", str(host.config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        nursery.start_soon(self.read_events, host)
        nursery.start_soon(self.read_stderr, host)
        nursery.start_soon(self.wait_exit, host)

    async def read_events(self, host: _Host) -> None:
        assert host.process is not None
        assert host.process.stdout is not None
        try:
            async with host.process.stdout as stream:
                async for line in _lines(stream):
                    try:
                        event = json.loads(line)
                    except json.JSONDecodeError:
                        host.stderr_tail.append(f"(stdout) {line}")
                        continue
                    self.on_event(host, event)
        finally:
            host.output_ended.set()

    async def read_stderr(self, host: _Host) -> None:
        assert host.process is not None
        assert host.process.stderr is not None
        async with host.process.stderr as stream:
            async for line in _lines(stream):
                host.stderr_tail.append(line)

    async def wait_exit(self, host: _Host) -> None:
        assert host.process is not None
        returncode = await host.process.wait()
        with trio.move_on_after(5.0):  # its last events, written before it exited
            await host.output_ended.wait()
        host.returncode = returncode
        if host.process.stdin is not None:
            await host.process.stdin.aclose()
        if host.phase != "closed" or host.returncode != 0:
            host.failure = host.failure or f"exited with status {host.returncode}"
        host.phase = "exited"
        self.note()

    def on_event(self, host: _Host, event: Mapping[str, Any]) -> None:
        kind = event.get("event")
        if kind == "stats":
            host.sends += int(event["sends"])
            host.requests += int(event["requests"])
            latencies = [int(value) for value in event["latencies"]]
            host.latencies.extend(latencies)
            errors = Tally({str(k): int(v) for k, v in dict(event["errors"]).items()})
            host.errors.update(errors)
            self.interval_latencies.extend(latencies)
            self.interval_ops += int(event["sends"]) + int(event["requests"])
            self.interval_errors.update(errors)
            for error_kind, sample in dict(event.get("samples", {})).items():
                host.samples.setdefault(str(error_kind), str(sample))
            return
        if kind == "set":
            host.set_up = dict(event)
        if kind == "failed":
            host.failure = str(event.get("error"))
        if isinstance(kind, str):
            host.phase = kind
        self.note()

    async def send(self, host: _Host, command: str) -> None:
        if host.process is None or host.process.stdin is None or host.returncode is not None:
            return
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await host.process.stdin.send_all(f"{command}\n".encode())

    async def barrier(self, phase: str, limit: float) -> None:
        """Wait until every host reports ``phase``; ``DemoFailed`` when one fails or exits."""
        with trio.move_on_after(limit) as scope:
            while True:
                failed = [host for host in self.hosts if host.failure is not None]
                if failed:
                    raise DemoFailed(
                        "; ".join(f"{host.name} ({host.rid}) {host.failure}" for host in failed)
                    )
                waiting = [host for host in self.hosts if host.phase != phase]
                if not waiting:
                    return
                await self.changed.wait()
        if scope.cancelled_caught:
            late = ", ".join(f"{h.name} ({h.phase})" for h in self.hosts if h.phase != phase)
            raise DemoFailed(f"not every host reached {phase!r} within {limit:.0f}s: {late}")

    async def watch_failures(self) -> None:
        """Raises ``DemoFailed`` as soon as a host fails during the workload."""
        while True:
            for host in self.hosts:
                if host.failure is not None:
                    raise DemoFailed(f"{host.name} ({host.rid}) {host.failure}")
            await trio.sleep(0.1)

    # the store view

    async def read_activations(self) -> dict[str, int] | None:
        try:
            snapshot = await _inspect._inspect(self.dsn, zl.MeshName(self.mesh))
        except Exception:  # the view is best effort; the store's own errors show in hosts
            return None
        counts = {host.rid: 0 for host in self.hosts}
        view = snapshot.meshes.get(self.mesh)
        rows = list(view.spots) if view is not None else []
        rows.extend(snapshot.actors)
        for row in rows:
            owner = row.record.owner.value
            if owner in counts:
                counts[owner] += 1
        return counts

    async def poll_activations(self) -> None:
        while True:
            counts = await self.read_activations()
            if counts is not None:
                self.activations = counts
            await trio.sleep(1.0)

    def activations_text(self) -> str:
        if self.activations is None:
            return "activations ?"
        return "activations " + " ".join(
            f"{host.name}={self.activations.get(host.rid, 0)}" for host in self.hosts
        )

    # progress and summary

    def progress_line(self, elapsed: float, span: float) -> str:
        rate = self.interval_ops / span if span > 0 else 0.0
        p50 = percentile(self.interval_latencies, 0.50)
        p99 = percentile(self.interval_latencies, 0.99)
        errors = _errors_text(self.interval_errors)
        self.interval_ops, self.interval_latencies, self.interval_errors = 0, [], Tally()
        return (
            f"[{elapsed:5.1f}s] {rate:>9,.0f} msg/s  req p50 {_micros(p50):>9} "
            f"p99 {_micros(p99):>9}  {self.activations_text()}  errors {errors}"
        )

    async def run_workload(self) -> None:
        self.say(
            f"workload: {self.seconds:g}s over {_count(len(self.hosts), 'host')} "
            "(rooms, users, counters; sends and requests from every host)"
        )
        self.running = True
        for host in self.hosts:
            await self.send(host, "run")
        started = last = trio.current_time()
        end = started + self.seconds
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.watch_failures)
            while True:
                now = trio.current_time()
                if now >= end:
                    break
                await trio.sleep(min(1.0, end - now))
                now = trio.current_time()
                line = self.progress_line(now - started, now - last)
                last = now
                if self.tty:
                    self.out.write("\r\x1b[K" + line)
                    self.out.flush()
                else:
                    print(line, file=self.out, flush=True)
            nursery.cancel_scope.cancel()
        if self.tty:
            self.out.write("\n")

    def summary(self, elapsed: float) -> str:
        header = (
            f"{'host':<6} {'node':<24} {'sends':>9} {'requests':>9} {'msg/s':>9} "
            f"{'req p50':>10} {'req p99':>10} {'activations':>11} {'errors':>6} {'exit':>4}"
        )
        rows = [header, "-" * len(header)]
        activations = self.activations or {}
        for host in self.hosts:
            rows.append(
                _summary_row(
                    host.name,
                    host.rid,
                    host.sends,
                    host.requests,
                    elapsed,
                    host.latencies,
                    activations.get(host.rid),
                    sum(host.errors.values()),
                    host.returncode,
                )
            )
        every: list[int] = [value for host in self.hosts for value in host.latencies]
        errors: Tally[str] = Tally()
        for host in self.hosts:
            errors.update(host.errors)
        rows.append("-" * len(header))
        rows.append(
            _summary_row(
                "all",
                f"mesh {self.mesh}",
                sum(host.sends for host in self.hosts),
                sum(host.requests for host in self.hosts),
                elapsed,
                every,
                sum(activations.values()) if self.activations is not None else None,
                sum(errors.values()),
                None,
            )
        )
        rows.append(f"errors by kind: {_errors_text(errors)}")
        for host in self.hosts:
            for kind, sample in sorted(host.samples.items()):
                rows.append(f"  first {kind} on {host.name}: {sample}")
        return "\n".join(rows)

    # the whole run

    async def run(self, interrupted: trio.Event) -> bool:
        """The whole demo; ``True`` when every host exited 0 and no call failed."""
        self.write_configs()
        problem: str | None = None
        started: float | None = None
        elapsed = 0.0
        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as phases:
                nursery.start_soon(_cancel_on, interrupted, phases)
                try:
                    self.say(f"starting {_count(len(self.hosts), 'host')} in mesh {self.mesh}")
                    for host in self.hosts:
                        await self.start(host, nursery)
                    await self.barrier("ready", READY_TIMEOUT)
                    self.say(
                        "hosts ready, each sees its "
                        f"{_count(len(self.hosts) - 1, 'peer')}: "
                        + ", ".join(f"{h.name}={h.rid}" for h in self.hosts)
                    )
                    for host in self.hosts:
                        await self.send(host, "go")
                    await self.barrier("set", SET_UP_TIMEOUT)
                    self.say(self.set_up_text())
                    started = trio.current_time()
                    async with trio.open_nursery() as view:
                        view.start_soon(self.poll_activations)
                        await self.run_workload()
                        view.cancel_scope.cancel()
                    for host in self.hosts:
                        await self.send(host, "stop")
                    await self.barrier("stopped", STOP_TIMEOUT)
                    self.running = False
                    self.activations = await self.read_activations() or self.activations
                except DemoFailed as error:
                    problem = str(error)
            if phases.cancelled_caught or interrupted.is_set():
                problem = problem or "interrupted"
            if problem is not None:
                self.say(f"demo: {problem}")
            with trio.CancelScope(shield=True):
                if started is not None:  # the workload ran (or runs until the stop below)
                    elapsed = trio.current_time() - started
                await self.shut_down()
            nursery.cancel_scope.cancel()
        self.say("")
        self.say(f"summary ({_count(len(self.hosts), 'host')}, {elapsed:.1f}s of workload):")
        self.say(self.summary(elapsed))
        for host in self.hosts:
            if host.failure is not None or host.returncode != 0:
                self.say(f"{host.name} ({host.rid}): {host.failure or 'failed'}")
                for line in host.stderr_tail:
                    self.say(f"  {host.name} | {line}")
        errors: Tally[str] = Tally()
        for host in self.hosts:
            errors.update(host.errors)
        unexpected = {kind for kind in errors if kind not in EXPECTED_ERROR_KINDS}
        ok = (
            problem is None
            and not unexpected
            and all(host.returncode == 0 and host.failure is None for host in self.hosts)
        )
        self.say(
            "demo: ok" if ok else "demo: interrupted" if interrupted.is_set() else "demo: FAILED"
        )
        return ok

    def set_up_text(self) -> str:
        owned = ", ".join(
            f"{host.name} owns {_count(len(host.set_up.get('own_rooms', [])), 'room')}, "
            f"{host.set_up.get('joined', 0)}/{host.set_up.get('users', 0)} users joined, "
            f"{_count(host.set_up.get('counters', 0), 'counter')} activated cold"
            for host in self.hosts
        )
        return f"set up: {owned}"

    async def shut_down(self) -> None:
        """Stop the workload everywhere if it still runs, then shut the hosts down one at a
        time, the last started first."""
        if self.running:
            for host in self.hosts:
                await self.send(host, "stop")
            with contextlib.suppress(DemoFailed):
                await self.barrier("stopped", STOP_TIMEOUT)
            self.running = False
        order: list[str] = []
        for host in reversed(self.hosts):
            if host.process is None:
                continue
            await self.send(host, "shutdown")
            with trio.move_on_after(CLOSE_TIMEOUT) as scope:
                while host.returncode is None:
                    await self.changed.wait()
            if scope.cancelled_caught:
                host.failure = host.failure or f"did not shut down within {CLOSE_TIMEOUT:.0f}s"
                host.process.kill()
                await host.process.wait()
                host.returncode = host.process.returncode
            order.append(f"{host.name} exit {host.returncode}")
        if order:
            self.say("shutdown: " + ", ".join(order))


def _summary_row(
    name: str,
    node: str,
    sends: int,
    requests: int,
    elapsed: float,
    latencies: list[int],
    activations: int | None,
    errors: int,
    returncode: int | None,
) -> str:
    rate = (sends + requests) / elapsed if elapsed > 0 else 0.0
    return (
        f"{name:<6} {node:<24} {sends:>9,} {requests:>9,} {rate:>9,.0f} "
        f"{_micros(percentile(latencies, 0.5)):>10} {_micros(percentile(latencies, 0.99)):>10} "
        f"{'?' if activations is None else activations:>11} {errors:>6} "
        f"{'' if returncode is None else returncode:>4}"
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _errors_text(errors: Mapping[str, int]) -> str:
    found = {kind: count for kind, count in errors.items() if count}
    if not found:
        return "none"
    return " ".join(f"{kind}={count}" for kind, count in sorted(found.items()))


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _watch_signals(interrupted: trio.Event, hosts: Iterable[_Host]) -> None:
    """The first Ctrl-C (or SIGTERM) ends the workload and starts the ordered shutdown; a
    second one kills the hosts that are still running."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _signum in signals:
            if not interrupted.is_set():
                print("\ninterrupted: shutting every host down", file=sys.stderr, flush=True)
                interrupted.set()
                continue
            for host in hosts:
                if host.process is not None and host.returncode is None:
                    host.process.kill()


async def _demo(hosts: int, seconds: float, dsn: str | None) -> int:
    from zlink_trio._integration.store import DSN_VARIABLE, EmbeddedPostgres

    interrupted = trio.Event()
    workdir = Path(tempfile.mkdtemp(prefix="zlink-demo-"))
    server: EmbeddedPostgres | None = None
    try:
        async with trio.open_nursery() as nursery:
            parent_hosts: list[_Host] = []
            nursery.start_soon(_watch_signals, interrupted, parent_hosts)
            dsn = dsn or os.environ.get(DSN_VARIABLE) or None
            if dsn is None:
                print(f"store: a temporary embedded PostgreSQL in {workdir}", flush=True)
                server = EmbeddedPostgres(workdir / "pgdata")
                dsn = await server.start(EMBEDDED_START_TIMEOUT)
            else:
                print("store: the PostgreSQL named by --dsn / $ZLINK_STORE_DSN", flush=True)
            parent = _Parent(hosts, seconds, dsn, workdir, sys.stdout)
            parent_hosts.extend(parent.hosts)
            ok = await parent.run(interrupted)
            nursery.cancel_scope.cancel()
    finally:
        if server is not None:
            with trio.CancelScope(shield=True):
                await server.stop(EMBEDDED_START_TIMEOUT)
        shutil.rmtree(workdir, ignore_errors=True)
    if interrupted.is_set():
        return 130
    return 0 if ok else 1


def main(*, hosts: int, seconds: float, dsn: str | None) -> int:
    """``zlink-trio demo``: 0 when every host exited 0 and no call failed."""
    try:
        return trio.run(_demo, hosts, seconds, dsn)
    except (zl.ZLinkError, zl.ConfigurationError) as error:
        print(f"zlink-trio demo: {error}", file=sys.stderr)
        return 1
