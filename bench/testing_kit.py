"""The testing kit's costs: a host start and close on the run's shared store, and an example of
25 steps on one host, next to the same steps done bare in the same run.

    python bench/testing_kit.py [--rounds 40]

Uses ZLINK_STORE_DSN when set, otherwise the kit's shared embedded store (KIT-1). One process,
one Trio loop (as the hypothesis harness runs its examples).

- start / close: ``open_test_host`` on a pool the hosts of the run share (KIT-8), p50 and p90 of
  ``--rounds`` hosts; and, for comparison, with a pool of each host's own.
- example: a fresh host, then 25 steps on a counter Spot (get_or_create, sends, requests,
  close, get_or_create again) and the host's close, per example; beside it the bare cost of the
  same 25 steps as Trio tasks on memory channels, with a fresh ``trio.run`` per example.
- hypothesis: ``--examples`` examples of 25 steps of a ``HostStateMachine`` over the counter
  (the harness: a fresh host per example in its loop thread), total and per example.

Targets (issue 13): start ≤ 20 ms, close ≤ 10 ms, an example of 25 steps ≤ 50 ms, 200 examples
of 25 steps in under 15 s.
"""

from __future__ import annotations

import argparse
import time

import attrs
import trio
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule, run_state_machine_as_test
from members import NoMembers
from ratios import percentile, report

import zlink_trio as zl
from zlink_trio.testing import HostStateMachine, open_test_host, open_test_stores, shared_store
from zlink_trio.testing.stateful import stop_harness_loop

app = zl.Application()


@app.message("benchkit.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("benchkit.Get")
@attrs.frozen
class Get:
    pass


@app.message("benchkit.Count")
@attrs.frozen
class Count:
    value: int


@app.user_spot("benchkit.Counter")
class Counter(NoMembers):
    def __init__(self) -> None:
        self.value = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Count:
        return Count(self.value)


STEPS = 25


async def _example(host: zl.Host | object) -> None:
    """25 steps: create, then sends and requests, a close and a create again halfway."""
    spots = host.spots  # type: ignore[attr-defined]
    route = host.route  # type: ignore[attr-defined]
    created = await spots.get_or_create("c", "benchkit.Counter").submit()
    for step in range(1, STEPS):
        if step == 12:
            await spots.close(created.spot_ref)
            created = await spots.get_or_create("c", "benchkit.Counter").submit()
        elif step % 3:
            await route.send_to_spot("c", Add(step)).submit()
        else:
            await route.request_to_spot("c", Get(), reply_type=Count).submit()


async def _bare_example() -> None:
    """The same 25 steps as Trio tasks: a server task per incarnation on a memory channel."""
    async with trio.open_nursery() as nursery:

        async def serve(receive: trio.MemoryReceiveChannel[object]) -> None:
            value = 0
            async for item in receive:
                if isinstance(item, Add):
                    value += item.amount
                else:
                    reply: trio.MemorySendChannel[int] = item  # type: ignore[assignment]
                    await reply.send(value)

        send, receive = trio.open_memory_channel[object](64)
        nursery.start_soon(serve, receive)
        for step in range(1, STEPS):
            if step == 12:
                await send.aclose()
                send, receive = trio.open_memory_channel[object](64)
                nursery.start_soon(serve, receive)
            elif step % 3:
                await send.send(Add(step))
            else:
                reply_send, reply_receive = trio.open_memory_channel[int](1)
                await send.send(reply_send)
                await reply_receive.receive()
        await send.aclose()


class CounterMachine(HostStateMachine):
    """The counter under hypothesis: create, add, read, close and create again."""

    app = app
    examples = 0

    def __init__(self) -> None:
        super().__init__()
        CounterMachine.examples += 1
        self.ref: zl.SpotRef | None = None
        self.value = 0

    @rule()
    def create(self) -> None:
        result = self.run(self.host.spots.get_or_create("c", "benchkit.Counter").submit)
        if self.ref is None:
            self.value = 0
        self.ref = result.spot_ref

    @precondition(lambda self: self.ref is not None)
    @rule(amount=st.integers(1, 5))
    def add(self, amount: int) -> None:
        self.run(self.host.route.send_to_spot("c", Add(amount)).submit)
        self.value += amount

    @precondition(lambda self: self.ref is not None)
    @rule()
    def read(self) -> None:
        call = self.host.route.request_to_spot("c", Get(), reply_type=Count)
        assert Count(self.value) == self.run(call.submit)

    @precondition(lambda self: self.ref is not None)
    @rule()
    def close(self) -> None:
        assert self.ref is not None
        assert self.run(self.host.spots.close, self.ref) is True
        self.ref = None


def _quantiles(values: list[float]) -> str:
    p50, p90 = percentile(values, 0.5) * 1000, percentile(values, 0.9) * 1000
    return f"p50 {p50:.1f} ms, p90 {p90:.1f} ms"


async def _starts(dsn: str, rounds: int, shared: bool) -> tuple[list[float], list[float]]:
    starts: list[float] = []
    closes: list[float] = []
    async with open_test_stores(dsn) as stores:
        for _ in range(rounds):
            began = time.perf_counter()
            opened = open_test_host(app, dsn=dsn, stores=stores if shared else None)
            await opened.__aenter__()
            started = time.perf_counter()
            await opened.__aexit__(None, None, None)
            starts.append(started - began)
            closes.append(time.perf_counter() - started)
    return starts, closes


async def _examples(dsn: str, rounds: int) -> list[float]:
    took: list[float] = []
    async with open_test_stores(dsn) as stores:
        for _ in range(rounds):
            began = time.perf_counter()
            async with open_test_host(app, dsn=dsn, stores=stores) as host:
                await _example(host)
            took.append(time.perf_counter() - began)
    return took


def main(args: argparse.Namespace) -> None:
    with shared_store() as dsn:
        starts, closes = trio.run(_starts, dsn, args.rounds, True)
        print(f"host start, shared pool: {_quantiles(starts)}  (target ≤ 20 ms)")
        report("host start p50, ms", sorted(starts)[len(starts) // 2] * 1e3, "lower")
        report("host close p50, ms", sorted(closes)[len(closes) // 2] * 1e3, "lower")
        print(f"host close, shared pool: {_quantiles(closes)}  (target ≤ 10 ms)")
        own_starts, own_closes = trio.run(_starts, dsn, max(5, args.rounds // 4), False)
        print(f"host start, own pool:    {_quantiles(own_starts)}")
        print(f"host close, own pool:    {_quantiles(own_closes)}")
        examples = trio.run(_examples, dsn, args.rounds)
        print(f"example of {STEPS} steps with its host: {_quantiles(examples)}  (target ≤ 50 ms)")
        report("example p50, ms", sorted(examples)[len(examples) // 2] * 1e3, "lower")
        bare: list[float] = []
        for _ in range(args.rounds):
            began = time.perf_counter()
            trio.run(_bare_example)
            bare.append(time.perf_counter() - began)
        print(f"the same steps, bare trio.run each: {_quantiles(bare)}")
        CounterMachine.dsn = dsn
        CounterMachine.examples = 0
        began = time.perf_counter()
        run_state_machine_as_test(
            CounterMachine,
            settings=settings(
                max_examples=args.examples,
                stateful_step_count=STEPS,
                deadline=None,
                database=None,
                phases=[Phase.generate],
            ),
        )
        took = time.perf_counter() - began
        stop_harness_loop()  # its pool goes before the store does
        ran = CounterMachine.examples
        print(
            f"hypothesis: {args.examples} examples asked, {ran} machines run (hypothesis runs "
            f"more than it counts), up to {STEPS} steps each, in {took:.1f} s: "
            f"{took / ran * 1000:.1f} ms a machine  (target: 200 examples in under 15 s)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--examples", type=int, default=200)
    main(parser.parse_args())
