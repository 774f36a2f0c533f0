"""RouteMesh transport benchmark: ours next to plain pyzmq, two OS processes, one run.

Run ``python bench/transport.py``. Each of three pairs of processes measures, 64-byte payloads:

- request/reply latency: sequential round trips, p50 and p99;
- one-way throughput: pipelined messages, counted by the receiver, ended by one round trip.

The pairs are (a) sync pyzmq: blocking DEALER -> ROUTER echo; (b) minimal Trio loop: the same
sockets, non-blocking calls, waiting on ``zmq.FD`` after re-checking ``zmq.EVENTS``, one checkpoint
per operation (send or receive); (c) ours: ``RouteMesh.request`` / ``RouteMesh.send`` between two
meshes (wire encoding, handshake, completion connection, pending table included).

It prints the figures and the ratios ours / minimal Trio loop. Targets: request p50 <= 1.3x,
p99 <= 1.5x, one-way throughput >= 0.7x. A benchmark reports; it always exits 0.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import trio
import zmq
from ratios import percentile, report

from zlink_trio._integration.transport import MeshConfig, PeerAddress, PeerRun, open_route_mesh
from zlink_trio._wire import OperationId, Reply, Request, Send
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, SpotId, StableTypeName

ROUND_TRIPS = 5_000
WARMUP = 500
ONE_WAY = 100_000
PAYLOAD = b"x" * 64
DONE = b"done"
MESH = MeshName("bench")
ECHO = StableTypeName("echo")
COUNT = StableTypeName("count")


# --- (a) sync pyzmq ---------------------------------------------------------------------------


def serve_sync() -> None:
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.bind("tcp://127.0.0.1:*")
    print("READY", router.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
    received = 0
    while True:
        identity, kind, body = router.recv_multipart()
        if kind == b"req":
            router.send_multipart([identity, body])
        elif kind == b"one":
            received += 1
        else:
            router.send_multipart([identity, str(received).encode()])
            received = 0


def measure_sync(endpoint: str) -> tuple[list[float], float]:
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.connect(endpoint)
    latencies = []
    for index in range(WARMUP + ROUND_TRIPS):
        started = time.perf_counter()
        dealer.send_multipart([b"req", PAYLOAD])
        dealer.recv_multipart()
        if index >= WARMUP:
            latencies.append(time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(ONE_WAY):
        dealer.send_multipart([b"one", PAYLOAD])
    dealer.send_multipart([DONE, b""])
    counted = int(dealer.recv_multipart()[0])
    elapsed = time.perf_counter() - started
    assert ONE_WAY == counted
    dealer.close(linger=0)
    return latencies, ONE_WAY / elapsed


# --- (b) minimal Trio loop --------------------------------------------------------------------


async def trio_send(socket: zmq.Socket[bytes], frames: list[bytes]) -> None:
    while True:
        try:
            socket.send_multipart(frames, zmq.NOBLOCK)
            break
        except zmq.Again:
            while not socket.getsockopt(zmq.EVENTS) & zmq.POLLOUT:  # type: ignore[operator]  # an int
                await trio.lowlevel.wait_readable(socket.fileno())
    await trio.lowlevel.checkpoint()


async def trio_receive(socket: zmq.Socket[bytes]) -> list[bytes]:
    while True:
        try:
            frames = socket.recv_multipart(zmq.NOBLOCK)
            break
        except zmq.Again:
            if not socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:  # type: ignore[operator]  # an int
                await trio.lowlevel.wait_readable(socket.fileno())
    await trio.lowlevel.checkpoint()
    return frames


async def serve_trio() -> None:
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.bind("tcp://127.0.0.1:*")
    print("READY", router.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
    received = 0
    while True:
        identity, kind, body = await trio_receive(router)
        if kind == b"req":
            await trio_send(router, [identity, body])
        elif kind == b"one":
            received += 1
        else:
            await trio_send(router, [identity, str(received).encode()])
            received = 0


async def measure_trio(endpoint: str) -> tuple[list[float], float]:
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.connect(endpoint)
    latencies = []
    for index in range(WARMUP + ROUND_TRIPS):
        started = time.perf_counter()
        await trio_send(dealer, [b"req", PAYLOAD])
        await trio_receive(dealer)
        if index >= WARMUP:
            latencies.append(time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(ONE_WAY):
        await trio_send(dealer, [b"one", PAYLOAD])
    await trio_send(dealer, [DONE, b""])
    counted = int((await trio_receive(dealer))[0])
    elapsed = time.perf_counter() - started
    assert ONE_WAY == counted
    dealer.close(linger=0)
    return latencies, ONE_WAY / elapsed


# --- (c) ours ---------------------------------------------------------------------------------


def mesh_config(rid: str) -> MeshConfig:
    return MeshConfig(mesh=MESH, node_rid=NodeRid(rid), generation=NodeGeneration.new())


async def serve_ours(application: str, completion: str) -> None:
    received = 0
    meshes = []

    async def handle(origin: PeerRun, message: Send | Request) -> None:
        nonlocal received
        if type(message) is Send:
            received += 1
            return
        assert type(message) is Request
        payload = message.payload if message.message_type == ECHO else str(received).encode()
        if message.message_type == COUNT:
            received = 0
        meshes[0].reply(
            origin,
            Reply(message.reply_route, message.operation_id, origin.generation, ECHO, payload),
        )

    async with open_route_mesh(mesh_config("server"), handle) as mesh:
        meshes.append(mesh)
        mesh.add_peer(PeerAddress(NodeRid("client"), application, completion))
        print("READY", mesh.application_endpoint, mesh.completion_endpoint, flush=True)
        await trio.sleep_forever()


async def measure_ours() -> tuple[list[float], float]:
    async def ignore(_origin: PeerRun, _message: Send | Request) -> None:
        return

    async with open_route_mesh(mesh_config("client"), ignore) as mesh:
        command = [sys.executable, __file__, "--serve", "ours"]
        command += [mesh.application_endpoint, mesh.completion_endpoint]
        process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
        try:
            assert process.stdout is not None
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive_some(1)
            _, application, completion = line.decode().split()
            server = NodeRid("server")
            mesh.add_peer(PeerAddress(server, application, completion))
            while mesh.is_up(server) is None:
                await mesh.route_changes.receive()

            async def request(kind: StableTypeName) -> Reply:
                return await mesh.request(
                    server,
                    operation_id=OperationId.new(),
                    target=SpotId("s"),
                    message_type=kind,
                    payload=PAYLOAD,
                    timeout=10.0,
                )

            latencies = []
            for index in range(WARMUP + ROUND_TRIPS):
                started = time.perf_counter()
                await request(ECHO)
                if index >= WARMUP:
                    latencies.append(time.perf_counter() - started)
            message = Send(SpotId("s"), StableTypeName("one"), PAYLOAD)
            started = time.perf_counter()
            for _ in range(ONE_WAY):
                await mesh.send(server, message)
            counted = int((await request(COUNT)).payload)
            elapsed = time.perf_counter() - started
            assert ONE_WAY == counted
            return latencies, ONE_WAY / elapsed
        finally:
            process.kill()
            await process.wait()


# --- the run ----------------------------------------------------------------------------------


def with_server(
    kind: str, measure: Callable[[str], tuple[list[float], float]]
) -> tuple[list[float], float]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().split()[1]
        return measure(endpoint)
    finally:
        process.kill()
        process.wait()


def run_trio(
    measure: Callable[[str], Awaitable[tuple[list[float], float]]],
) -> Callable[[str], tuple[list[float], float]]:
    return lambda endpoint: trio.run(measure, endpoint)


def ratios(ours: tuple[float, float, float], base: tuple[float, float, float]) -> str:
    p50, p99, rate = (mine / theirs for mine, theirs in zip(ours, base, strict=True))
    return f"  request p50 {p50:.2f}x  p99 {p99:.2f}x  one-way {rate:.2f}x"


def main() -> None:
    print(f"python {sys.version.split()[0]}, pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}")
    print(f"{ROUND_TRIPS} round trips after {WARMUP} warm-up, {ONE_WAY} one-way, 64-byte payload")
    results = {
        "sync pyzmq": with_server("sync", measure_sync),
        "minimal Trio loop": with_server("trio", run_trio(measure_trio)),
        "ours (RouteMesh)": trio.run(measure_ours),
    }
    print(f"{'':20} {'p50 us':>8} {'p99 us':>8} {'msgs/s':>10}")
    figures = {}
    for name, (latencies, rate) in results.items():
        p50, p99 = statistics.median(latencies) * 1e6, percentile(latencies, 0.99) * 1e6
        figures[name] = (p50, p99, rate)
        print(f"{name:20} {p50:8.0f} {p99:8.0f} {rate:10.0f}")
    ours, base, sync = (
        figures["ours (RouteMesh)"],
        figures["minimal Trio loop"],
        figures["sync pyzmq"],
    )
    print("ours / minimal Trio loop (targets: p50 <= 1.3, p99 <= 1.5, one-way >= 0.7):")
    print(ratios(ours, base))
    p50, p99, rate = (mine / theirs for mine, theirs in zip(ours, base, strict=True))
    report("request p50 / minimal loop", p50, "lower")
    report("request p99 / minimal loop", p99, "shown")
    report("one-way / minimal loop", rate, "higher")
    print("ours / sync pyzmq:")
    print(ratios(ours, sync))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        if sys.argv[2] == "sync":
            serve_sync()
        elif sys.argv[2] == "trio":
            trio.run(serve_trio)
        else:
            trio.run(serve_ours, sys.argv[3], sys.argv[4])
    else:
        main()
