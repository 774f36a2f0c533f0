"""Many hosts: Spot requests and sends between two host processes through the public API, next
to the minimal pyzmq+Trio loop of ``bench/transport.py`` measured in the same run.

    python bench/mesh.py [--quick] [--profile] [--security both|curve|none]

Uses ZLINK_STORE_DSN when set, otherwise a throw-away embedded PostgreSQL in a temporary folder.
Exactly two hosts of one (fresh) mesh share that store: the *server* host runs in a child process
(``python bench/mesh.py --serve ...``) and owns the User Spot ``bench.Echo``; the *measuring*
host runs in this process. Each waits until it sees the other in ``host.peers``; the measuring
host's ``get_or_create`` of the Spot must name the server as owner (``spot_ref.node_rid``).
Then, 64-byte payloads:

- request latency: sequential ``request_to_spot(...).submit()``, p50 and p99;
- request throughput: 64 tasks, each with one request outstanding, a fixed total;
- one-way: ``send_to_spot(...).submit()`` from one task, ended by a request that returns the
  server's count, so the rate counts delivered messages.

Baseline, same run, two processes: the minimal loop of ``bench/transport.py`` (non-blocking
DEALER/ROUTER on 127.0.0.1, waiting on ``zmq.FD``): sequential round trips, one task keeping 64
requests in flight, and pipelined one-way messages.

It also prints, per phase, the CPU time per operation of each process (every thread, from
``/proc``), which moves less with the machine's load than the latencies and rates do.

Targets: p50 <= 1.5x and p99 <= 2x the minimal loop; >= 20,000 requests/s with 64 outstanding;
>= 50,000 one-way sends/s. A benchmark reports and exits 0, except when the cluster cannot be
formed at all (the server does not start, the hosts do not see each other, the Spot does not
land on the server, or a request to it fails): then it says why on stderr and exits 1.
``--security`` (default ``both``) measures the two hosts with CURVE security and then plain,
each against the same baseline, and prints what encryption costs (specs/security.md SEC-8).
``--profile`` runs both processes under cProfile and prints where each spends its time (the
figures of such a run are slower and are not the ones to record).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import trio
import zmq
from members import NoMembers
from ratios import percentile, report

import zlink_trio as zl
from zlink_trio._integration.store import DSN_VARIABLE, EmbeddedPostgres

HERE = Path(__file__).resolve().parent
SECURITY_MODES = {"both": ("curve", "none"), "curve": ("curve",), "none": ("none",)}
"""The hosts' ``transport_security`` per ``--security`` choice."""
PAYLOAD = b"x" * 64
SPOT = "bench-echo"
OUTSTANDING = 64
FORM_TIMEOUT = 60.0  # seconds for the server to start and the hosts to see each other


@attrs.frozen
class Counts:
    warmup: int
    requests: int
    concurrent: int  # total requests of the 64-outstanding phase
    sends: int


FULL = Counts(warmup=500, requests=5_000, concurrent=20_000, sends=100_000)
QUICK = Counts(warmup=50, requests=300, concurrent=1_280, sends=2_000)

# --- the application both hosts run --------------------------------------------------------

app = zl.Application()


@app.message("bench.Echo.Req")
@attrs.frozen
class EchoReq:
    payload: bytes


@app.message("bench.Echo.Rep")
@attrs.frozen
class EchoRep:
    payload: bytes


@app.message("bench.Tick")
@attrs.frozen
class Tick:
    payload: bytes


@app.message("bench.GetCount")
@attrs.frozen
class GetCount:
    reset: bool


@app.message("bench.Count")
@attrs.frozen
class Count:
    value: int


@app.user_spot("bench.Echo")
class Echo(NoMembers):
    def __init__(self) -> None:
        self.count = 0

    @zl.request_handler(EchoReq)
    async def echo(self, req: EchoReq) -> EchoRep:
        return EchoRep(req.payload)

    @zl.packet_handler(Tick)
    async def tick(self, msg: Tick) -> None:
        self.count += 1

    @zl.request_handler(GetCount)
    async def get_count(self, req: GetCount) -> Count:
        value = self.count
        if req.reset:
            self.count = 0
        return Count(value)


class ClusterError(Exception):
    """The two hosts could not form a cluster; the benchmark cannot measure anything."""


# --- the server host (child process) -------------------------------------------------------


async def sees(host: zl.Host, rid: zl.NodeRid) -> bool:
    """Whether ``rid`` shows in ``host.peers`` within FORM_TIMEOUT (polled: no public event)."""
    deadline = trio.current_time() + FORM_TIMEOUT
    while trio.current_time() < deadline:
        if rid in host.peers:
            return True
        await trio.sleep(0.01)
    return rid in host.peers


async def serve(dsn: str, mesh: str, client_rid: str, security: str) -> None:
    config = zl.HostConfig(
        mesh=mesh, store_dsn=dsn, request_timeout=30.0, transport_security=security
    )
    async with zl.open_host(app, config) as host:
        created = await host.spots.get_or_create(SPOT, "bench.Echo").submit()
        seen = "yes" if await sees(host, zl.NodeRid(client_rid)) else "no"
        print("READY", host.node_rid.value, created.spot_ref.node_rid.value, seen, flush=True)
        # Serve until the parent closes our stdin, then shut the host down in order.
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        while await stdin.receive_some():
            pass
        await host.shutdown()


# --- the baseline: the minimal pyzmq+Trio loop of bench/transport.py -----------------------


def load_transport() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_transport", HERE / "transport.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) a process has used so far; 0 without /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU microseconds per operation of a phase, in this process and in the server process."""

    def __init__(self, server_pid: int) -> None:
        self.pids = (os.getpid(), server_pid)
        self.phases: dict[str, tuple[float, float]] = {}
        self._start = (0.0, 0.0)

    def start(self) -> None:
        self._start = (cpu_seconds(self.pids[0]), cpu_seconds(self.pids[1]))

    def stop(self, phase: str, operations: int) -> None:
        used = (cpu_seconds(pid) - start for pid, start in zip(self.pids, self._start, strict=True))
        client, server = (seconds * 1e6 / operations for seconds in used)
        self.phases[phase] = (client, server)


PHASES = ("sequential request", "request, 64 outstanding", "one-way send")


@attrs.frozen
class Figures:
    latencies: list[float]  # seconds, sequential round trips after warm-up
    concurrent_rate: float  # requests/s with 64 outstanding
    one_way_rate: float  # delivered messages/s
    cpu: CpuMeter

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies) * 1e6

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 0.99) * 1e6


async def measure_minimal(counts: Counts) -> Figures:
    transport = load_transport()
    trio_send, trio_receive = transport.trio_send, transport.trio_receive
    command = [sys.executable, str(HERE / "transport.py"), "--serve", "trio"]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
    dealer: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    try:
        assert process.stdout is not None
        line = await read_line(process.stdout)
        dealer.connect(line.split()[1])
        cpu = CpuMeter(process.pid)
        latencies = []
        for index in range(counts.warmup + counts.requests):
            if index == counts.warmup:
                cpu.start()
            started = time.perf_counter()
            await trio_send(dealer, [b"req", PAYLOAD])
            await trio_receive(dealer)
            if index >= counts.warmup:
                latencies.append(time.perf_counter() - started)
        cpu.stop(PHASES[0], counts.requests)

        # One task keeps 64 requests in flight: send until 64 are out, then one per reply.
        cpu.start()
        started = time.perf_counter()
        sent = answered = 0
        while answered < counts.concurrent:
            while sent < counts.concurrent and sent - answered < OUTSTANDING:
                await trio_send(dealer, [b"req", PAYLOAD])
                sent += 1
            await trio_receive(dealer)
            answered += 1
        concurrent_rate = counts.concurrent / (time.perf_counter() - started)
        cpu.stop(PHASES[1], counts.concurrent)

        cpu.start()
        started = time.perf_counter()
        for _ in range(counts.sends):
            await trio_send(dealer, [b"one", PAYLOAD])
        await trio_send(dealer, [transport.DONE, b""])
        counted = int((await trio_receive(dealer))[0])
        one_way_rate = counted / (time.perf_counter() - started)
        cpu.stop(PHASES[2], counts.sends)
        return Figures(latencies, concurrent_rate, one_way_rate, cpu)
    finally:
        dealer.close(linger=0)
        process.kill()
        await process.wait()


# --- ours: two hosts -----------------------------------------------------------------------


async def read_line(stream: trio.abc.ReceiveStream) -> str:
    line = b""
    while not line.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        line += chunk
    return line.decode()


async def request_echo(host: zl.Host) -> None:
    await host.route.request_to_spot(SPOT, EchoReq(PAYLOAD), reply_type=EchoRep).submit()


async def server_count(host: zl.Host, reset: bool) -> int:
    """The server Spot's count. While one-way sends still wait for it on the server, the Spot
    is full and refuses requests UNAVAILABLE (specs/overload.md): ask again until it answers."""
    with trio.fail_after(60.0):
        while True:
            request = host.route.request_to_spot(SPOT, GetCount(reset), reply_type=Count)
            try:
                return (await request.timeout(60.0).submit()).value
            except zl.ZLinkError as error:
                if error.kind is not zl.ErrorKind.UNAVAILABLE:
                    raise
            await trio.sleep(0.01)


async def measure_ours(host: zl.Host, server_pid: int, counts: Counts) -> tuple[Figures, int]:
    """The three figures through the public API, and how many sends were delivered."""
    cpu = CpuMeter(server_pid)
    latencies = []
    for index in range(counts.warmup + counts.requests):
        if index == counts.warmup:
            cpu.start()
        started = time.perf_counter()
        await request_echo(host)
        if index >= counts.warmup:
            latencies.append(time.perf_counter() - started)
    cpu.stop(PHASES[0], counts.requests)

    async def worker(share: int) -> None:
        for _ in range(share):
            await request_echo(host)

    share = counts.concurrent // OUTSTANDING
    cpu.start()
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(OUTSTANDING):
            nursery.start_soon(worker, share)
    concurrent_rate = share * OUTSTANDING / (time.perf_counter() - started)
    cpu.stop(PHASES[1], share * OUTSTANDING)

    tick = Tick(PAYLOAD)
    for _ in range(counts.warmup):
        await host.route.send_to_spot(SPOT, tick).submit()
    await server_count(host, reset=True)
    cpu.start()
    started = time.perf_counter()
    for _ in range(counts.sends):
        await host.route.send_to_spot(SPOT, tick).submit()
    # The count request follows the sends; if it overtook some, wait until they are all in.
    delivered = await server_count(host, reset=False)
    with trio.move_on_after(30.0):
        while delivered < counts.sends:
            await trio.sleep(0.001)
            delivered = await server_count(host, reset=False)
    one_way_rate = delivered / (time.perf_counter() - started)
    cpu.stop(PHASES[2], max(delivered, 1))
    return Figures(latencies, concurrent_rate, one_way_rate, cpu), delivered


async def form_cluster(
    host: zl.Host, dsn: str, mesh: str, security: str, profile: Path | None
) -> tuple[trio.Process, zl.NodeRid]:
    """Start the server host, see each other, and check the Spot lives on the server."""
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", dsn, mesh]
    command += [host.node_rid.value, security]
    if profile is not None:
        command += ["--profile-to", str(profile)]
    process = await trio.lowlevel.open_process(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        return await _see_each_other(host, process)
    except BaseException:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
        raise


async def _see_each_other(host: zl.Host, process: trio.Process) -> tuple[trio.Process, zl.NodeRid]:
    assert process.stdout is not None
    line = ""
    with trio.move_on_after(FORM_TIMEOUT + 30.0):  # the server's start plus its wait for us
        line = await read_line(process.stdout)
    fields = line.split() if line else []
    if len(fields) != 4 or fields[0] != "READY":
        raise ClusterError(f"the server host did not start (it said {line.strip()!r})")
    server, owner, saw_us = zl.NodeRid(fields[1]), fields[2], fields[3]
    if owner != server.value:
        raise ClusterError(f"the server created {SPOT} but its owner is {owner}, not itself")
    if saw_us != "yes":
        raise ClusterError(
            f"the server host did not see this host in its peers within {FORM_TIMEOUT} s"
        )
    if not await sees(host, server):
        raise ClusterError(
            f"this host did not see the server in host.peers within {FORM_TIMEOUT} s"
        )
    try:
        result = await host.spots.get_or_create(SPOT, "bench.Echo").submit()
    except zl.ZLinkError as error:
        raise ClusterError(f"get_or_create of the server's Spot failed: {error!r}") from None
    if result.spot_ref.node_rid != server:
        raise ClusterError(
            f"get_or_create placed {SPOT} on {result.spot_ref.node_rid.value}, not on the server "
            f"{server.value} (status {result.status.value})"
        )
    try:
        await request_echo(host)
    except zl.ZLinkError as error:
        raise ClusterError(f"a request to the server's Spot failed: {error!r}") from None
    return process, server


async def stop_server(process: trio.Process) -> None:
    if process.stdin is not None:
        await process.stdin.aclose()  # the server shuts its host down on EOF
    with trio.move_on_after(15.0):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


# --- the run -------------------------------------------------------------------------------


def verdict(met: bool) -> str:
    return "met" if met else "missed"


def print_report(
    security: str, base: Figures, ours: Figures, delivered: int, counts: Counts
) -> None:
    print(f"\n{'':34} {'p50 us':>8} {'p99 us':>8} {'req/s 64 out':>13} {'one-way/s':>10}")
    for name, figures in (("minimal pyzmq+Trio loop (baseline)", base), ("ours (two hosts)", ours)):
        print(
            f"{name:34} {figures.p50:8.0f} {figures.p99:8.0f} {figures.concurrent_rate:13.0f}"
            f" {figures.one_way_rate:10.0f}"
        )
    if delivered != counts.sends:
        print(f"NOTE: {delivered} of {counts.sends} sends were delivered within the wait")
    p50, p99 = ours.p50 / base.p50, ours.p99 / base.p99
    throughput = ours.concurrent_rate / base.concurrent_rate
    one_way = ours.one_way_rate / base.one_way_rate
    print("\nratios, ours / minimal loop, and targets:")
    report(f"{security} request p50 / minimal loop", p50, "lower")
    report(f"{security} request p99 / minimal loop", p99, "shown")
    report(f"{security} 64 outstanding / minimal loop", throughput, "higher")
    report(f"{security} one-way / minimal loop", one_way, "higher")
    print(f"  request p50            {p50:6.2f}x  (target <= 1.5x): {verdict(p50 <= 1.5)}")
    print(f"  request p99            {p99:6.2f}x  (target <= 2x): {verdict(p99 <= 2.0)}")
    rate = ours.concurrent_rate
    print(
        f"  64 outstanding         {throughput:6.2f}x  {rate:8.0f} req/s"
        f" (target >= 20000): {verdict(rate >= 20_000)}"
    )
    rate = ours.one_way_rate
    print(
        f"  one-way sends          {one_way:6.2f}x  {rate:8.0f} msg/s"
        f" (target >= 50000): {verdict(rate >= 50_000)}"
    )
    print("\nCPU per operation, us (every thread; sender process / receiving process):")
    print(f"  {'':26} {'minimal loop':>15} {'ours':>15}")
    for phase in PHASES:
        mine, theirs = ours.cpu.phases[phase], base.cpu.phases[phase]
        print(f"  {phase:26} {theirs[0]:7.0f} /{theirs[1]:6.0f} {mine[0]:7.0f} /{mine[1]:6.0f}")


def print_profile(title: str, path: Path) -> None:
    if not path.exists():
        print(f"\n{title}: no profile written")
        return
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    stats.sort_stats("tottime").print_stats(25)
    print(f"\n{title}, by own time:")
    print("\n".join(out.getvalue().splitlines()[6:]))


async def run(args: argparse.Namespace, dsn: str, profile_dir: Path | None) -> str | None:
    """Measure and report; the reason when the cluster could not be formed, else None."""
    counts = QUICK if args.quick else FULL
    print(f"python {sys.version.split()[0]}, pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}")
    print(
        f"{counts.requests} sequential requests after {counts.warmup} warm-up,"
        f" {counts.concurrent} requests {OUTSTANDING} outstanding, {counts.sends} one-way sends,"
        " 64-byte payload"
    )
    started = time.perf_counter()
    base = await measure_minimal(counts)
    print(
        f"minimal loop measured in {time.perf_counter() - started:.1f} s:"
        f" request p50 {base.p50:.0f} us p99 {base.p99:.0f} us,"
        f" {base.concurrent_rate:.0f} req/s with {OUTSTANDING} outstanding,"
        f" one-way {base.one_way_rate:.0f} msg/s"
    )
    results: list[tuple[str, Figures, int]] = []
    for security in SECURITY_MODES[args.security]:
        mesh = f"bench-{uuid.uuid4().hex[:8]}"
        config = zl.HostConfig(
            mesh=mesh, store_dsn=dsn, request_timeout=30.0, transport_security=security
        )
        client_profile = None
        profiling = profile_dir if not results else None  # the first mode only
        async with zl.open_host(app, config) as host:
            started = time.perf_counter()
            try:
                process, server = await form_cluster(
                    host, dsn, mesh, security, profiling / "server.prof" if profiling else None
                )
            except ClusterError as error:
                return str(error)
            try:
                print(
                    f"cluster of 2 hosts formed in {time.perf_counter() - started:.1f} s"
                    f" (mesh {mesh}, transport_security={security!r}); {SPOT} lives on the"
                    f" server {server.value}"
                )
                profiler = cProfile.Profile() if profiling else None
                if profiler is not None:
                    profiler.enable()
                started = time.perf_counter()
                ours, delivered = await measure_ours(host, process.pid, counts)
                if profiler is not None and profiling is not None:
                    profiler.disable()
                    client_profile = profiling / "client.prof"
                    profiler.dump_stats(str(client_profile))
                print(f"ours measured in {time.perf_counter() - started:.1f} s")
            finally:
                await stop_server(process)
        results.append((security, ours, delivered))
        if profile_dir is not None and client_profile is not None:
            print_profile("measuring host (this process)", client_profile)
            print_profile("server host (child process)", profile_dir / "server.prof")
    for security, ours, delivered in results:
        print(f"\n== transport_security={security!r}")
        print_report(security, base, ours, delivered, counts)
    if len(results) == 2:
        (_, curve, _), (_, plain, _) = results
        print("\nthe cost of encryption (specs/security.md SEC-8), CURVE / plain, same run:")
        print(f"  request p50            {curve.p50 / plain.p50:6.2f}x")
        print(f"  request p99            {curve.p99 / plain.p99:6.2f}x")
        print(f"  64 outstanding         {curve.concurrent_rate / plain.concurrent_rate:6.2f}x")
        print(f"  one-way sends          {curve.one_way_rate / plain.one_way_rate:6.2f}x")
    return None


def measure(args: argparse.Namespace) -> int:
    total = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="zlink-bench-mesh-") as folder:
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
            failure = trio.run(run, args, dsn, profile_dir)
        except (zl.ZLinkError, zl.ConfigurationError) as error:  # the store or a host's start
            failure = f"{type(error).__name__}: {error}"
        finally:
            if server is not None:
                trio.run(server.stop, 60.0)
    if failure is not None:
        print(f"bench/mesh.py: the cluster could not be formed: {failure}", file=sys.stderr)
        return 1
    load = ", ".join(f"{figure:.1f}" for figure in os.getloadavg())
    print(
        f"total {time.perf_counter() - total:.1f} s; load average {load} on {os.cpu_count()} CPUs"
    )
    return 0


def profiled(function: Callable[..., Any], path: str, *args: Any) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        trio.run(function, *args)
    finally:
        profiler.disable()
        profiler.dump_stats(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts, a smoke run")
    parser.add_argument("--profile", action="store_true", help="cProfile both processes")
    parser.add_argument(
        "--security",
        choices=sorted(SECURITY_MODES),
        default="both",
        help="transport_security of the two hosts (default: both, CURVE then plain)",
    )
    parser.add_argument(
        "--serve",
        nargs=4,
        metavar=("DSN", "MESH", "CLIENT_RID", "SECURITY"),
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        if args.profile_to:
            profiled(serve, args.profile_to, *args.serve)
        else:
            trio.run(serve, *args.serve)
        return 0
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
