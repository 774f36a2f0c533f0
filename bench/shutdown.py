"""Shutdown of a host with many Spots, next to the same work done bare in the same run.

    python bench/shutdown.py [--spots 10000]

Uses ZLINK_STORE_DSN when set, otherwise a throw-away embedded PostgreSQL in a temporary folder.
One host, one process, one Trio loop.

- host: ``get_or_create`` of N User Spots (64 at a time), then ``host.shutdown()`` timed, with
  the garbage collector's collections during it (count and seconds, per generation).
- baseline: what a shutdown of N activations cannot avoid, measured in the same process with as
  many live objects: N bare Trio tasks, each serving a memory channel in a nursery of its own
  until the channel closes, closed together and awaited, with the garbage collector paused as
  ``host.shutdown()`` pauses it (SHUT-4.16); then N store keys deleted in
  conditional batches of 512 through the host's own Location Store (reached through an
  internal attribute, so both use one server).

Target (issue 11, item 9): 10,000 Spots shut down in under 2 s with no record left.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
import uuid
from pathlib import Path

import trio
import trio.testing
from members import NoMembers
from ratios import report

import zlink_trio as zl
from zlink_trio._integration.store import (
    DSN_VARIABLE,
    Applied,
    Batch,
    Delete,
    IfMissing,
    IfVersion,
    LocationStore,
    Put,
)
from zlink_trio._runtime.engines.heap import collector_paused

app = zl.Application()


@app.user_spot("bench.Room")
class Room(NoMembers):
    """A Spot with nothing to do: only its activation and its shutdown count."""


class Collections:
    """What the garbage collector did while the block ran."""

    def __init__(self) -> None:
        self.by_generation: dict[int, list[float]] = {}
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            spent = self.by_generation.setdefault(info["generation"], [0, 0.0])
            spent[0] += 1
            spent[1] += time.perf_counter() - self._started

    def __enter__(self) -> Collections:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._callback)

    def __str__(self) -> str:
        parts = [
            f"gen{generation} {int(count)}x {spent:.2f}s"
            for generation, (count, spent) in sorted(self.by_generation.items())
        ]
        return ", ".join(parts) or "none"


async def bare_tasks(count: int) -> float:
    async def serve(receive: trio.MemoryReceiveChannel[int]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            async for _ in receive:
                pass
            nursery.cancel_scope.cancel()

    senders = []
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            send, receive = trio.open_memory_channel[int](1)
            senders.append(send)
            nursery.start_soon(serve, receive)
        await trio.testing.wait_all_tasks_blocked()
        # The same treatment of the garbage collector as host.shutdown() (SHUT-4.16).
        with collector_paused():
            started = time.perf_counter()
            for send in senders:
                send.close()
            await trio.testing.wait_all_tasks_blocked()
            ended = time.perf_counter()
    return ended - started


async def bare_deletes(store: LocationStore, count: int) -> float:
    prefix = f"bench-{uuid.uuid4().hex[:8]}/"
    versions: dict[str, int] = {}
    keys = [f"{prefix}{number}" for number in range(count)]
    for start in range(0, count, 512):
        chunk = keys[start : start + 512]
        written = await store.write(
            Batch([IfMissing(key) for key in chunk], [Put(key, b"x") for key in chunk])
        )
        assert isinstance(written, Applied)
        versions.update(zip(chunk, written.versions, strict=True))
    started = time.perf_counter()
    for start in range(0, count, 512):
        chunk = keys[start : start + 512]
        conditions = [IfVersion(key, versions[key]) for key in chunk]
        await store.write(Batch(conditions, [Delete(key) for key in chunk]))
    return time.perf_counter() - started


async def main(args: argparse.Namespace) -> None:
    dsn = os.environ.get(DSN_VARIABLE) or None
    with tempfile.TemporaryDirectory(prefix="zlink-bench-") as folder:
        data_dir = None if dsn else Path(folder) / "pgdata"
        config = zl.HostConfig(
            mesh=f"bench-{uuid.uuid4().hex[:8]}", store_dsn=dsn, store_data_dir=data_dir
        )
        print(f"store: {'ZLINK_STORE_DSN' if dsn else 'embedded PostgreSQL (temporary)'}")
        async with zl.open_host(app, config) as host:
            limit = trio.Semaphore(64)

            async def create(number: int) -> None:
                async with limit:
                    await host.spots.get_or_create(f"room-{number}", "bench.Room").submit()

            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for number in range(args.spots):
                    nursery.start_soon(create, number)
            print(f"{args.spots} Spots created in {time.perf_counter() - started:.1f} s")
            with Collections() as collections:
                tasks = await bare_tasks(args.spots)
            print(
                f"  baseline: {args.spots} bare Trio tasks ended in {tasks:.2f} s ({collections})"
            )
            # Through the host's own Location Store (an internal), so both use one server.
            deletes = await bare_deletes(host._node.authority._store, args.spots)
            print(f"  baseline: {args.spots} keys deleted in 512-key batches in {deletes:.2f} s")
            with Collections() as collections:
                started = time.perf_counter()
                await host.shutdown()
                took = time.perf_counter() - started
            print(f"  host.shutdown() of {args.spots} Spots: {took:.2f} s ({collections})")
            report("shutdown / baseline", took / (tasks + deletes), "lower")
            print(
                f"  ratio {took / (tasks + deletes):.2f}x the baseline "
                f"({tasks + deletes:.2f} s); target: under 2 s"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spots", type=int, default=10_000)
    trio.run(main, parser.parse_args())
