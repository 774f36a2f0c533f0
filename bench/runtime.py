"""Single-host runtime: Spot request latency and one-way throughput through the public API, next
to a bare Trio request/reply over memory channels in the same run, and the memory of idle Spot
activations.

    python bench/runtime.py [--requests 20000] [--sends 100000] [--activations 10000]

Uses ZLINK_STORE_DSN when set, otherwise a throw-away embedded PostgreSQL in a temporary folder
(``HostConfig.store_data_dir``). Everything runs in one Trio loop, one host, one process.

- request: one Trio task awaits ``host.route.request_to_spot(...).submit()`` to a SPOT_WIDE
  User Spot whose request handler returns at once, one at a time; p50/p99 of each round trip.
  Baseline: a server task that receives ``(request, reply channel)`` on a memory channel and
  answers on a fresh one-slot reply channel, the same way, one at a time.
- one-way: one task submits ``send_to_spot(...).submit()`` in a loop to the same Spot's packet
  handler; the rate counts until the handler has seen the last message. Baseline: the same count
  of ``send()`` on a memory channel to a task that receives them.
- idle activations: ``get_or_create`` of N Spots (32 tasks at a time; each goes through the
  store's authority claim), measured with ``tracemalloc``: the Python heap that stays allocated
  per activation after ``gc.collect()``, with the same figure for the application's own Spot
  object (instance and its ``__dict__``) shown beside it and subtracted for "runtime overhead".
  The process RSS delta is printed as a cross-check.

Targets (issue): request p50 at most 2x the bare Trio p50; one-way at least 100 k msg/s; at
most 2 KiB per idle activation.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path

import attrs
import trio
import trio.testing
from members import NoMembers
from ratios import percentile, report

import zlink_trio as zl
from zlink_trio._integration.store import DSN_VARIABLE

app = zl.Application()


@app.message("bench.Ping")
@attrs.frozen
class Ping:
    n: int


@app.message("bench.Pong")
@attrs.frozen
class Pong:
    n: int


@app.message("bench.Tick")
@attrs.frozen
class Tick:
    n: int


class Counter:
    def __init__(self) -> None:
        self.seen = 0
        self.target = 0
        self.done = trio.Event()


counter = Counter()


@app.user_spot("bench.Echo")
class Echo(NoMembers):
    @zl.request_handler(Ping)
    async def ping(self, req: Ping) -> Pong:
        return Pong(req.n)

    @zl.packet_handler(Tick)
    async def tick(self, msg: Tick) -> None:
        counter.seen += 1
        if counter.seen == counter.target:
            counter.done.set()


@app.user_spot("bench.Idle")
class Idle(NoMembers):
    @zl.packet_handler(Tick)
    async def tick(self, msg: Tick) -> None:
        pass


def micros(samples: list[int], q: float) -> float:
    return percentile(samples, q) / 1000.0  # ns -> us


def line(name: str, samples: list[int]) -> tuple[float, float]:
    p50, p99 = micros(samples, 0.50), micros(samples, 0.99)
    rate = len(samples) / (sum(samples) / 1e9)
    print(f"  {name:<34} p50 {p50:8.1f} us  p99 {p99:8.1f} us  {rate:10.0f} req/s")
    return p50, p99


async def bare_requests(count: int) -> list[int]:
    send, receive = trio.open_memory_channel[tuple[Ping, trio.MemorySendChannel[Pong]]](0)

    async def server() -> None:
        async for request, reply in receive:
            await reply.send(Pong(request.n))

    samples: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server)
        for i in range(count):
            start = time.perf_counter_ns()
            reply_send, reply_receive = trio.open_memory_channel[Pong](1)
            await send.send((Ping(i), reply_send))
            answer = await reply_receive.receive()
            samples.append(time.perf_counter_ns() - start)
            assert answer.n == i
        await send.aclose()
    return samples


async def spot_requests(host: zl.Host, count: int) -> list[int]:
    samples: list[int] = []
    for i in range(count):
        start = time.perf_counter_ns()
        answer = await host.route.request_to_spot("echo", Ping(i), reply_type=Pong).submit()
        samples.append(time.perf_counter_ns() - start)
        assert answer.n == i
    return samples


async def bare_one_way(count: int) -> float:
    send, receive = trio.open_memory_channel[Tick](1024)
    done = trio.Event()

    async def consumer() -> None:
        seen = 0
        async for _ in receive:
            seen += 1
            if seen == count:
                done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consumer)
        start = time.perf_counter()
        for i in range(count):
            await send.send(Tick(i))
        await done.wait()
        elapsed = time.perf_counter() - start
        await send.aclose()
    return count / elapsed


async def spot_one_way(host: zl.Host, count: int) -> float:
    global counter
    counter = Counter()
    counter.target = count
    start = time.perf_counter()
    for i in range(count):
        await host.route.send_to_spot("echo", Tick(i)).submit()
    with trio.fail_after(60):
        await counter.done.wait()
    return count / (time.perf_counter() - start)


def rss_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


async def activations(host: zl.Host, count: int, budget: float) -> int:
    """Create idle Spots and print their memory; returns how many were created in all."""
    prefix = uuid.uuid4().hex[:6]
    limit = trio.CapacityLimiter(32)

    async def create(ids: list[str]) -> None:
        async def one(spot_id: str) -> None:
            async with limit:
                await host.spots.get_or_create(spot_id, "bench.Idle").submit()

        async with trio.open_nursery() as nursery:
            for spot_id in ids:
                nursery.start_soon(one, spot_id)

    # Warm-up: first-use caches of the create path are not per-activation memory.
    await create([f"warm-{prefix}-{i}" for i in range(200)])

    # 1. RSS: as many of `count` as the time budget allows, in chunks, tracemalloc off.
    gc.collect()
    rss_before = rss_kib()
    made = 0
    start = time.perf_counter()
    while made < count and time.perf_counter() - start < budget:
        chunk = min(500, count - made)
        await create([f"idle-{prefix}-{made + i}" for i in range(chunk)])
        made += chunk
    elapsed = time.perf_counter() - start
    gc.collect()
    rss_per = (rss_kib() - rss_before) * 1024 / made
    rate = made / elapsed
    print(f"  created {made} idle activations in {elapsed:.1f} s ({rate:.0f}/s, 32 at a time)")
    report("creations per second", rate, "higher")
    print(f"  RSS delta per activation               {rss_per:8.0f} B ({rss_per / 1024:.2f} KiB)")

    # 2. tracemalloc on a smaller batch: the Python heap that stays allocated per activation.
    # Each create's call deadline leaves a stale entry in Trio's deadline heap until Trio prunes
    # it (more than 1,000 stale entries); a batch of 2,000 spreads that bounded heap over the
    # activations instead of counting every entry of a small batch as theirs.
    traced = 2000
    tracemalloc.start()
    gc.collect()
    snapshot_before = tracemalloc.take_snapshot()
    before = tracemalloc.get_traced_memory()[0]
    await create([f"traced-{prefix}-{i}" for i in range(traced)])
    await trio.testing.wait_all_tasks_blocked()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    top = tracemalloc.take_snapshot().compare_to(snapshot_before, "filename")
    tracemalloc.stop()
    one = Idle.__new__(Idle)
    own = sys.getsizeof(one) + sys.getsizeof(one.__dict__)
    per = (after - before) / traced
    print(f"  tracemalloc heap per activation ({traced}) {per:8.0f} B ({per / 1024:.2f} KiB)")
    print(f"  of it the application's Spot object    {own:8d} B (instance + __dict__)")
    rest = per - own
    report("heap per idle activation, KiB", per / 1024, "lower")
    print(f"  runtime overhead per activation        {rest:8.0f} B ({rest / 1024:.2f} KiB)")
    print("  largest growth by file, per activation:")
    for stat in top[:6]:
        name = "/".join(Path(stat.traceback[0].filename).parts[-2:])
        print(f"    {stat.size_diff / traced:8.0f} B  {name}")
    if made < count:
        print(
            f"  NOTE: {made} of the requested {count} activations fit the {budget:.0f} s budget;"
            f" {count} would take about {count / rate:.0f} s to create at the measured rate"
            " (extrapolated, not measured)"
        )
    return 200 + made + traced


async def main(args: argparse.Namespace) -> None:
    dsn = os.environ.get(DSN_VARIABLE) or None
    with tempfile.TemporaryDirectory(prefix="zlink-bench-") as folder:
        config = zl.HostConfig(
            mesh=f"bench-{uuid.uuid4().hex[:8]}",
            store_dsn=dsn,
            store_data_dir=None if dsn else Path(folder) / "pgdata",
        )
        started = time.perf_counter()
        async with zl.open_host(app, config) as host:
            print(f"store: {'ZLINK_STORE_DSN' if dsn else 'embedded PostgreSQL (temporary)'}")
            print(f"host started in {time.perf_counter() - started:.1f} s")
            await host.spots.get_or_create("echo", "bench.Echo").submit()
            # Warm-up of both paths, not measured.
            await bare_requests(1000)
            await spot_requests(host, 1000)

            print(f"\nrequest round trip, {args.requests} sequential requests")
            bare = line("bare Trio (memory channels)", await bare_requests(args.requests))
            spot = line("Spot request_to_spot().submit()", await spot_requests(host, args.requests))
            print(
                f"  ratio p50 {spot[0] / bare[0]:.2f}x (target <= 2x), p99 {spot[1] / bare[1]:.2f}x"
            )
            report("request p50 / bare Trio", spot[0] / bare[0], "lower")

            print(f"\none-way, {args.sends} messages from one task")
            bare_rate = await bare_one_way(args.sends)
            spot_rate = await spot_one_way(host, args.sends)
            print(f"  {'bare Trio (memory channel)':<34} {bare_rate:10.0f} msg/s")
            name = "Spot send_to_spot().submit()"
            print(f"  {name:<34} {spot_rate:10.0f} msg/s  (target >= 100000)")
            print(f"  ratio {bare_rate / spot_rate:.1f}x slower than the bare channel")
            report("one-way / bare Trio", spot_rate / bare_rate, "higher")

            print("\nidle activations (target <= 2 KiB each)")
            spots = await activations(host, args.activations, args.budget)
            shutting = time.perf_counter()
            await host.shutdown()
            took = time.perf_counter() - shutting
            print(f"\nshutdown of {spots + 1} Spots took {took:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--sends", type=int, default=100000)
    parser.add_argument("--activations", type=int, default=10000)
    parser.add_argument(
        "--budget", type=float, default=30.0, help="seconds the activation phase may take"
    )
    total = time.perf_counter()
    trio.run(main, parser.parse_args())
    print(f"total {time.perf_counter() - total:.1f} s")
