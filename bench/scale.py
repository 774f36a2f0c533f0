"""Scale: what an idle mesh of N hosts costs each host and the store, and how soon every member
sees a join and a leave (issue 16 item 4; the model is specs/scale.md).

    python bench/scale.py [--quick] [--hosts 2,4,8] [--lease 3.0] [--idle 15]

Uses ZLINK_STORE_DSN when set, otherwise a throw-away embedded PostgreSQL in a temporary folder
(whose ``max_connections`` the bench raises first, so that the hosts' connections fit). For
each N (default 2, 4, 8, 16, 32, 64; ``--quick``: 2 and 4) a fresh mesh of N hosts, one per OS
process (``--host-process``, a child of this script; one process per host also keeps each host
within libzmq's per-context socket limit), each opened with ``zl.open_host`` of a tiny
application and ``node_lease=--lease``. The children start a few at a time, each waited for.
A child prints one JSON line when its host is up, and one for every peer it sees come or go,
each with a ``time.perf_counter()`` time stamp (CLOCK_MONOTONIC: one clock for every process
on Linux). It reads what its host sees from the host's membership subscription, through the
internal ``host._tree.membership`` (the public ``host.peers`` can only be polled, which would
cost the CPU this bench measures).

Once every host sees every other one, and a settling pause, over the idle window:

- store transactions: ``xact_commit + xact_rollback`` of the bench's database in
  ``pg_stat_database``, its growth minus the bench's own statement, per host per second (the
  server publishes a backend's counts up to a second late, at both ends of the window alike);
- PostgreSQL connections: client backends of that database in ``pg_stat_activity`` but the
  bench's own, at the start and the end of the window, and per host;
- RSS of each host process (``/proc/<pid>/status`` VmRSS) at the end;
- CPU of all host processes together (``/proc/<pid>/stat`` utime + stime), and of the
  PostgreSQL backends serving them, as % of one core.

Then a join (one more host opens: from its ``open_host`` returning until the last member
reported it; negative when every member saw it before that) and a leave (that host shuts down:
from its ``shutdown()`` call until the last member reported it gone).

Targets (issue 16): idle store transactions per host per second <= 2 / (node_lease / 3) and
flat in N; a join or leave seen everywhere within one renewal interval plus one notification;
<= 1.5 PostgreSQL connections per idle host; 64 idle hosts under 10 % of one core in total. A
benchmark reports and exits 0 whatever the figures; a run of one N that fails (a process dies,
a timeout) is reported with what it measured and the next N runs; the bench exits 1, with the
reason on stderr, only when no N could be measured at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import attrs
import trio
from members import NoMembers
from ratios import report as report_figure

import zlink_trio as zl
from zlink_trio._integration.store import DSN_VARIABLE, EmbeddedPostgres
from zlink_trio._runtime.ownership.node_record import PeerDown, PeerUp

FULL_HOSTS = (2, 4, 8, 16, 32, 64)
QUICK_HOSTS = (2, 4)
START_AT_ONCE = 4
"""Host processes started together; each batch is up before the next starts."""
START_TIMEOUT = 120.0
CONVERGE_TIMEOUT = 120.0
EVENT_TIMEOUT = 60.0
NOTIFY_ALLOWANCE = 0.25
"""Seconds allowed for "one notification" when judging the convergence target."""
STORE_TARGET_RENEWALS = 2
CONNECTIONS_TARGET = 1.5
CPU_TARGET = 10.0  # % of one core, for 64 hosts in total
CONNECTIONS_PER_HOST_ROOM = 6
"""Connections per host the throw-away server makes room for (max_connections)."""
T = TypeVar("T")

# --- the application and a host process (child) ------------------------------------------------

app = zl.Application()


@app.message("scale.Ping")
@attrs.frozen
class Ping:
    pass


@app.user_spot("scale.Idle")
class Idle(NoMembers):
    @zl.request_handler(Ping)
    async def ping(self, req: Ping) -> Ping:
        return req


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


async def host_process(dsn: str, mesh: str, lease: float) -> None:
    """Open one host, report it and every peer it sees come or go; shut down on a line or EOF."""
    config = zl.HostConfig(mesh=mesh, store_dsn=dsn, node_lease=lease)
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with zl.open_host(app, config) as host:
        say(up=host.node_rid.value, pid=os.getpid(), t=time.perf_counter())
        membership = host._tree.membership  # internal (see the module's docstring)
        assert membership is not None  # set before open_host hands the host out
        events = membership.subscribe()

        async def report_peers() -> None:
            async for event in events:
                if isinstance(event, PeerUp):
                    say(peer="up", rid=event.record.rid.value, t=time.perf_counter())
                elif isinstance(event, PeerDown):
                    say(peer="down", rid=event.rid.value, t=time.perf_counter())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(report_peers)
            buffer = b"x"
            while buffer and b"\n" not in buffer:  # a line or EOF
                buffer = await stdin.receive_some()
            say(stopping=time.perf_counter())
            await host.shutdown()
            nursery.cancel_scope.cancel()
    say(closed=time.perf_counter())


# --- the parent's side of the host processes ----------------------------------------------------


class BenchError(Exception):
    """A run of one N cannot go on: a host process died, or something did not happen in time."""


@attrs.define(eq=False)
class Member:
    """One host process as its lines describe it."""

    process: trio.Process
    errors: Path
    rid: str = ""
    pid: int = 0
    up_at: float = math.nan
    stopping_at: float = math.nan
    closed_at: float = math.nan
    ended: bool = False
    peers: set[str] = attrs.Factory(set)
    seen_up: dict[str, float] = attrs.Factory(dict)
    seen_down: dict[str, float] = attrs.Factory(dict)

    def take(self, line: dict[str, Any]) -> None:
        if "up" in line:
            self.rid, self.pid, self.up_at = line["up"], line["pid"], line["t"]
        elif line.get("peer") == "up":
            self.peers.add(line["rid"])
            self.seen_up.setdefault(line["rid"], line["t"])
        elif line.get("peer") == "down":
            self.peers.discard(line["rid"])
            self.seen_down.setdefault(line["rid"], line["t"])
        elif "stopping" in line:
            self.stopping_at = line["stopping"]
        elif "closed" in line:
            self.closed_at = line["closed"]

    def last_words(self) -> str:
        lines = self.errors.read_text(errors="replace").strip().splitlines()
        return " | ".join(lines[-3:]) or "nothing on stderr"


class Board:
    """Every host process of one run, read by one task each; waits on what they said."""

    def __init__(self, nursery: trio.Nursery, folder: Path, dsn: str, mesh: str, lease: float):
        self.nursery, self.folder, self.dsn, self.mesh, self.lease = (
            nursery,
            folder,
            dsn,
            mesh,
            lease,
        )
        self.members: list[Member] = []
        self._changed = trio.Event()

    async def start(self) -> Member:
        command = [sys.executable, str(Path(__file__).resolve()), "--host-process", self.dsn]
        command += [self.mesh, str(self.lease)]
        errors = self.folder / f"host-{len(self.members)}.stderr"
        with errors.open("wb") as sink:
            process = await trio.lowlevel.open_process(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sink
            )
        member = Member(process, errors)
        self.members.append(member)
        self.nursery.start_soon(self._read, member)
        return member

    async def _read(self, member: Member) -> None:
        assert member.process.stdout is not None
        buffer = b""
        while True:
            data = await member.process.stdout.receive_some()
            if not data:
                break
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                member.take(json.loads(line))
            self._wake()
        member.ended = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def until(self, done: Callable[[], bool], within: float, what: str) -> None:
        """Return once ``done()``; ``BenchError`` when a process that should run ended first,
        or after ``within`` seconds."""
        with trio.move_on_after(within):
            while not done():
                dead = [m for m in self.members if m.ended and math.isnan(m.stopping_at)]
                if dead:
                    raise BenchError(
                        f"a host process (pid {dead[0].process.pid}) ended while waiting for"
                        f" {what}: {dead[0].last_words()}"
                    )
                await self._changed.wait()
            return
        raise BenchError(f"no {what} within {within:.0f} s")

    async def stop(self, member: Member) -> None:
        """Tell ``member`` to shut its host down; its process ends on its own."""
        assert member.process.stdin is not None
        await member.process.stdin.send_all(b"stop\n")

    async def end_all(self) -> None:
        """End every process: EOF (an orderly shutdown), then a kill after a while."""
        for member in self.members:
            if member.process.stdin is not None:
                with trio.move_on_after(1.0):
                    await member.process.stdin.aclose()
        with trio.move_on_after(30.0 + len(self.members)):
            for member in self.members:
                await member.process.wait()
        for member in self.members:
            if member.process.returncode is None:
                member.process.kill()
                await member.process.wait()


# --- what the bench reads: PostgreSQL's statistics, /proc --------------------------------------

SAMPLE = """
SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database
        WHERE datname = current_database()) AS transactions,
       array(SELECT pid FROM pg_stat_activity WHERE datname = current_database()
             AND backend_type = 'client backend' AND pid <> pg_backend_pid()) AS backends
"""


@attrs.frozen
class Sample:
    at: float
    transactions: int
    backends: tuple[int, ...]
    cpu: float  # CPU seconds of the host processes
    backend_cpu: dict[int, float]  # CPU seconds of each of those backends (0 without /proc)


class Statistics:
    """One asyncpg connection on a private asyncio loop, each call run to its end in a worker
    thread: the bench's own connection, left out of every figure."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._loop = asyncio.SelectorEventLoop()  # not the policy's: trio-asyncio replaces it
        self._connection: Any = None

    async def _run(self, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return await trio.to_thread.run_sync(lambda: self._loop.run_until_complete(call()))

    async def open(self) -> None:
        self._connection = await self._run(lambda: asyncpg.connect(self._dsn))

    async def close(self, *, for_good: bool = True) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await self._run(connection.close)
        if for_good:
            self._loop.close()

    async def value(self, sql: str) -> Any:
        return await self._run(lambda: self._connection.fetchval(sql))

    async def execute(self, sql: str) -> None:
        await self._run(lambda: self._connection.execute(sql))

    async def sample(self, pids: list[int]) -> Sample:
        row = await self._run(lambda: self._connection.fetchrow(SAMPLE))
        backends = tuple(row["backends"])
        cpu = sum(cpu_seconds(pid) for pid in pids)
        backend_cpu = {pid: cpu_seconds(pid) for pid in backends}
        return Sample(time.perf_counter(), row["transactions"], backends, cpu, backend_cpu)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) a process has used so far; 0 without /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """Resident memory of a process in MiB; NaN without /proc."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


# --- one mesh of N hosts -----------------------------------------------------------------------


@attrs.define
class Figures:
    """What one run of N hosts measured; NaN (or empty) where it did not get that far."""

    hosts: int
    failure: str | None = None
    started_in: float = math.nan  # seconds to start every host
    converged_in: float = math.nan  # from the last host up until every host saw every other
    window: float = math.nan
    transactions: float = math.nan  # store transactions per second, the whole mesh
    connections: tuple[int, int] | None = None  # at the start and the end of the window
    rss: list[float] = attrs.Factory(list)  # MiB per host process
    cpu: float = math.nan  # % of one core, every host process together
    backend_cpu: float = math.nan  # % of one core, the backends present at both ends
    join: float = math.nan  # seconds
    leave: float = math.nan


def model_per_host(hosts: int, lease: float) -> float:
    """Store transactions per idle host per second as specs/scale.md's model has them: a
    renewal every lease/3, a poll every lease/2 (one scan, one transaction whatever its pages),
    and the janitor's sweep (two scans in a mesh without records) every 30 leases, once a mesh."""
    return 3 / lease + 2 / lease + 2 / (30 * lease * hosts)


def all_up(members: list[Member]) -> bool:
    return all(member.rid for member in members)


async def form(board: Board, hosts: int, figures: Figures) -> list[Member]:
    """Start ``hosts`` host processes a few at a time; return once each sees every other."""
    started = time.perf_counter()
    for first in range(0, hosts, START_AT_ONCE):
        batch = [await board.start() for _ in range(min(START_AT_ONCE, hosts - first))]
        what = f"start of hosts {first + 1}..{first + len(batch)}"
        await board.until(partial(all_up, batch), START_TIMEOUT, what)
    members = list(board.members)
    figures.started_in = time.perf_counter() - started
    last_up = time.perf_counter()
    rids = {m.rid for m in members}
    await board.until(
        lambda: all(m.peers >= rids - {m.rid} for m in members),
        CONVERGE_TIMEOUT,
        "moment when every host saw every other",
    )
    figures.converged_in = time.perf_counter() - last_up
    return members


async def measure_idle(
    board: Board, members: list[Member], stats: Statistics, idle: float, figures: Figures
) -> None:
    await trio.sleep(board.lease)  # the start-up's last writes and notifications settle
    pids = [m.pid for m in members]
    before = await stats.sample(pids)
    await trio.sleep(idle)
    after = await stats.sample(pids)
    dead = [m for m in members if m.ended]
    if dead:
        raise BenchError(f"a host process ended while idle: {dead[0].last_words()}")
    window = figures.window = after.at - before.at
    # The first sample's own statement is counted in the growth; the second's is not yet.
    figures.transactions = (after.transactions - before.transactions - 1) / window
    figures.connections = (len(before.backends), len(after.backends))
    figures.rss = [rss_mib(pid) for pid in pids]
    figures.cpu = (after.cpu - before.cpu) / window * 100
    both = set(before.backend_cpu) & set(after.backend_cpu)
    used = sum(after.backend_cpu[pid] - before.backend_cpu[pid] for pid in both)
    figures.backend_cpu = used / window * 100


async def measure_join_and_leave(board: Board, members: list[Member], figures: Figures) -> None:
    joiner = await board.start()
    await board.until(lambda: bool(joiner.rid), START_TIMEOUT, "start of the joining host")
    await board.until(
        lambda: all(joiner.rid in m.seen_up for m in members),
        EVENT_TIMEOUT,
        "sight of the joining host at every member",
    )
    figures.join = max(m.seen_up[joiner.rid] for m in members) - joiner.up_at
    await board.stop(joiner)
    await board.until(
        lambda: (
            not math.isnan(joiner.stopping_at) and all(joiner.rid in m.seen_down for m in members)
        ),
        EVENT_TIMEOUT,
        "sight of the leaving host gone at every member",
    )
    figures.leave = max(m.seen_down[joiner.rid] for m in members) - joiner.stopping_at


async def measure_size(
    hosts: int, args: argparse.Namespace, dsn: str, stats: Statistics, folder: Path
) -> Figures:
    figures = Figures(hosts)
    mesh = f"scale-{hosts}-{uuid.uuid4().hex[:8]}"
    async with trio.open_nursery() as nursery:
        board = Board(nursery, folder, dsn, mesh, args.lease)
        try:
            members = await form(board, hosts, figures)
            await measure_idle(board, members, stats, args.idle, figures)
            await measure_join_and_leave(board, members, figures)
        except BenchError as error:
            figures.failure = str(error)
        finally:
            with trio.CancelScope(shield=True):
                await board.end_all()
            nursery.cancel_scope.cancel()
    return figures


# --- the report --------------------------------------------------------------------------------


def verdict(met: bool) -> str:
    return "met" if met else "missed"


def shown(value: float, form: str = ".2f") -> str:
    return "-" if math.isnan(value) else format(value, form)


def report_size(f: Figures, lease: float) -> None:
    renewal = lease / 3
    print(f"\nN = {f.hosts} hosts")
    if not math.isnan(f.started_in):
        print(
            f"  started in {f.started_in:.1f} s ({START_AT_ONCE} at a time); every host saw"
            f" every other {shown(f.converged_in)} s after the last was up"
        )
    if not math.isnan(f.transactions):
        per_host = f.transactions / f.hosts
        target = STORE_TARGET_RENEWALS / renewal
        report_figure(f"{f.hosts} hosts: idle store transactions per host per s", per_host, "shown")
        print(f"  idle window {f.window:.1f} s")
        print(f"  store transactions, whole mesh      {f.transactions:8.2f} /s")
        print(
            f"  store transactions per host         {per_host:8.2f} /s  (model"
            f" {model_per_host(f.hosts, lease):.2f}; target <= {target:.2f}:"
            f" {verdict(per_host <= target)})"
        )
    if f.connections is not None:
        per_host = f.connections[1] / f.hosts
        print(
            f"  PostgreSQL connections              {f.connections[0]:5d} at the start,"
            f" {f.connections[1]} at the end of the window; {per_host:.2f} per host"
            f" (target <= {CONNECTIONS_TARGET}: {verdict(per_host <= CONNECTIONS_TARGET)})"
        )
    if f.rss:
        print(
            f"  RSS per host process                {statistics.fmean(f.rss):8.1f} MiB mean,"
            f" {max(f.rss):.1f} MiB max"
        )
    if not math.isnan(f.cpu):
        judged = verdict(f.cpu < CPU_TARGET) if f.hosts >= 64 else "the target is for 64 hosts"
        print(
            f"  CPU of all host processes           {f.cpu:8.2f} % of one core"
            f" ({f.cpu / f.hosts:.3f} % per host; target < {CPU_TARGET:g} %: {judged})"
        )
        print(f"  CPU of their PostgreSQL backends    {f.backend_cpu:8.2f} % of one core")
    bound = renewal + NOTIFY_ALLOWANCE
    for name, value in (("join", f.join), ("leave", f.leave)):
        if not math.isnan(value):
            report_figure(f"{f.hosts} hosts: {name}, ms", value * 1e3, "shown")
            print(
                f"  {name}: the last member saw it {value * 1e3:8.1f} ms after"
                f" {'open_host returned' if name == 'join' else 'shutdown() was called'}"
                f" (target <= one renewal {renewal:.2f} s + one notification, judged as"
                f" {bound:.2f} s: {verdict(value <= bound)})"
            )
    if f.failure is not None:
        print(f"  FAILED: {f.failure}")


def report_all(results: list[Figures], lease: float) -> None:
    print(f"\nsummary (node_lease {lease:g} s; store transactions and connections per host)")
    print(
        f"  {'N':>4} {'txn/s mesh':>10} {'txn/s host':>10} {'model':>6} {'conns':>6}"
        f" {'conn/host':>9} {'RSS MiB':>8} {'CPU %':>7} {'PG CPU %':>8} {'join ms':>8}"
        f" {'leave ms':>8}"
    )
    for f in results:
        connections = f.connections[1] if f.connections is not None else math.nan
        rss = statistics.fmean(f.rss) if f.rss else math.nan
        print(
            f"  {f.hosts:>4} {shown(f.transactions):>10} {shown(f.transactions / f.hosts):>10}"
            f" {model_per_host(f.hosts, lease):>6.2f} {shown(connections, '.0f'):>6}"
            f" {shown(connections / f.hosts):>9} {shown(rss, '.1f'):>8} {shown(f.cpu):>7}"
            f" {shown(f.backend_cpu):>8} {shown(f.join * 1e3, '.1f'):>8}"
            f" {shown(f.leave * 1e3, '.1f'):>8}{'  (failed)' if f.failure else ''}"
        )
    per_host = [f.transactions / f.hosts for f in results if not math.isnan(f.transactions)]
    if len(per_host) >= 2:
        spread = max(per_host) / min(per_host)
        print(
            f"  idle store transactions per host, largest / smallest over N: {spread:.2f}"
            f" (flat in N: {verdict(spread <= 1.25)}, judged as within 25 %)"
        )


# --- the run -----------------------------------------------------------------------------------


async def make_room(stats: Statistics, server: EmbeddedPostgres | None, hosts: int) -> str:
    """Raise the throw-away server's ``max_connections`` to fit ``hosts`` hosts (a restart);
    what it is now, and whence."""
    current = int(await stats.value("SHOW max_connections"))
    needed = (hosts + 1) * CONNECTIONS_PER_HOST_ROOM + 20
    if server is None or current >= needed:
        return f"{current} ({'the throw-away server' if server else DSN_VARIABLE})"
    await stats.execute(f"ALTER SYSTEM SET max_connections = {needed}")
    await stats.close(for_good=False)
    await server.stop(60.0)
    await server.start(60.0)
    await stats.open()
    now = await stats.value("SHOW max_connections")
    return f"{now} (raised from {current} on the throw-away server)"


async def run(args: argparse.Namespace, dsn: str, server: EmbeddedPostgres | None) -> list[Figures]:
    sizes = args.hosts or (QUICK_HOSTS if args.quick else FULL_HOSTS)
    stats = Statistics(dsn)
    await stats.open()
    results: list[Figures] = []
    try:
        room = await make_room(stats, server, max(sizes))
        print(f"max_connections: {room}")
        print(
            f"node_lease {args.lease:g} s: renewal every {args.lease / 3:.2f} s, peer poll every"
            f" {args.lease / 2:.2f} s; idle window {args.idle:g} s;"
            f" N = {', '.join(map(str, sizes))}"
        )
        with tempfile.TemporaryDirectory(prefix="zlink-bench-scale-") as folder:
            for hosts in sizes:
                started = time.perf_counter()
                figures = await measure_size(hosts, args, dsn, stats, Path(folder))
                results.append(figures)
                report_size(figures, args.lease)
                print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)
    finally:
        with trio.CancelScope(shield=True):
            await stats.close()
    report_all(results, args.lease)
    return results


def measure(args: argparse.Namespace) -> int:
    total = time.perf_counter()
    results: list[Figures] = []
    failure = None
    with tempfile.TemporaryDirectory(prefix="zlink-bench-scale-pg-") as folder:
        dsn = os.environ.get(DSN_VARIABLE) or None
        server = None if dsn else EmbeddedPostgres(Path(folder) / "pgdata")
        try:
            if server is not None:
                dsn = trio.run(server.start, 60.0)
                print("store: embedded PostgreSQL (temporary)")
            else:
                print(f"store: {DSN_VARIABLE}")
            assert dsn is not None
            results = trio.run(run, args, dsn, server)
        except (OSError, zl.ZLinkError, zl.ConfigurationError) as error:
            failure = f"{type(error).__name__}: {error}"
        finally:
            if server is not None:
                trio.run(server.stop, 60.0)
    if failure is None and not any(f.connections is not None for f in results):
        failure = "; ".join(f"N={f.hosts}: {f.failure}" for f in results) or "no N to run"
    if failure is not None:
        print(f"bench/scale.py: nothing measured: {failure}", file=sys.stderr)
        return 1
    load = ", ".join(f"{figure:.1f}" for figure in os.getloadavg())
    print(
        f"\ntotal {time.perf_counter() - total:.1f} s; load average {load} on {os.cpu_count()} CPUs"
    )
    return 0


def sizes(text: str) -> tuple[int, ...]:
    values = tuple(int(part) for part in text.split(","))
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError("every N must be at least 1")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"N = {QUICK_HOSTS}")
    parser.add_argument("--hosts", type=sizes, help="comma-separated N (default 2,4,...,64)")
    parser.add_argument("--lease", type=float, default=3.0, help="node_lease, seconds")
    parser.add_argument("--idle", type=float, default=15.0, help="idle window, seconds")
    parser.add_argument("--host-process", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.host_process:
        dsn, mesh, lease = args.host_process
        trio.run(host_process, dsn, mesh, float(lease))
        return 0
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
