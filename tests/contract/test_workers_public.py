"""Worker offload on the public surface: host.workers and self.context.workers
(specs/completion.md §3, specs/decisions.md DEC-4)."""

from __future__ import annotations

import os
import threading
import uuid

import attrs
import pytest
import trio

import zlink_trio as zl

app = zl.Application()


@app.message("workers.Ask")
@attrs.frozen
class Ask:
    how: str


@app.message("workers.Answer")
@attrs.frozen
class Answer:
    text: str


class Signals:
    def __init__(self) -> None:
        self.waiting = trio.Event()
        self.woken = trio.Event()


signals = Signals()


@app.instance_spot("workers.Pool")
class Pool(zl.InstanceSpot):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        workers = self.context.workers
        if req.how == "thread":
            ident = await workers.run_cpu_worker(threading.get_ident).submit()
            return Answer(str(ident))
        if req.how == "yield":
            # The Wake message below can run only if yield_() gave the gate back.
            signals.waiting.set()
            await workers.run_io_worker(signals.woken.wait).yield_()
            return Answer("woken")
        signals.woken.set()
        return Answer("woke")


def config(store_dsn: str, **values: object) -> zl.HostConfig:
    return zl.HostConfig(mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn, **values)  # type: ignore[arg-type]  # test values


class Blocker:
    """A CPU function that holds its slot until the test releases it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = trio.Event()
        self.finished = threading.Event()
        self.token = trio.lowlevel.current_trio_token()

    def __call__(self) -> str:
        trio.from_thread.run_sync(self.started.set, trio_token=self.token)
        self.release.wait(10)
        self.finished.set()
        return "blocked"


@pytest.mark.spec("CMP-3.1")
async def test_cpu_work_runs_on_a_worker_thread_and_io_work_as_a_trio_task(store_dsn: str) -> None:
    """run_cpu_worker runs on another thread, from the host and from a Spot; run_io_worker runs
    in the host's Trio loop."""

    async def in_trio() -> int:
        trio.lowlevel.current_task()  # raises outside a Trio task
        return threading.get_ident()

    async with zl.open_host(app, config(store_dsn)) as host:
        cpu = await host.workers.run_cpu_worker(threading.get_ident).submit()
        io = await host.workers.run_io_worker(in_trio).submit()
        with trio.fail_after(10):
            call = host.route.request_to_spot("pool-1", Ask("thread"), reply_type=Answer)
            from_spot = await call.instance_spot().submit()
    assert threading.get_ident() != cpu
    assert threading.get_ident() != int(from_spot.text)
    assert threading.get_ident() == io


@pytest.mark.spec("CMP-3.5")
async def test_a_worker_call_returns_the_work_result_itself(store_dsn: str) -> None:
    """A CPU or I/O worker call returns the very object its work returned."""
    value = {"k": [1, 2]}

    async def io_value(item: dict[str, list[int]]) -> dict[str, list[int]]:
        await trio.lowlevel.checkpoint()
        return item

    async with zl.open_host(app, config(store_dsn)) as host:
        assert value is await host.workers.run_cpu_worker(lambda item: item, value).submit()
        assert value is await host.workers.run_io_worker(io_value, value).submit()


@pytest.mark.spec("CMP-3.5", "SPOT-77")
async def test_yield_gives_the_gate_back_while_worker_work_runs(store_dsn: str) -> None:
    """In an Instance Spot turn, a worker call's yield_() lets another turn of the Spot run."""
    signals.waiting = trio.Event()
    signals.woken = trio.Event()
    async with zl.open_host(app, config(store_dsn)) as host:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                waiting = host.route.request_to_spot("pool-2", Ask("yield"), reply_type=Answer)
                nursery.start_soon(waiting.instance_spot().submit)
                # The yielding turn is in its worker call before the Wake turn is sent.
                await signals.waiting.wait()
                wake = host.route.request_to_spot("pool-2", Ask("wake"), reply_type=Answer)
                assert Answer("woke") == await wake.instance_spot().submit()
    assert signals.woken.is_set()


@pytest.mark.spec("CMP-3.2", "CMP-3.3", "CMP-3.4")
async def test_io_work_completes_while_every_cpu_slot_is_busy_and_cpu_calls_wait(
    store_dsn: str,
) -> None:
    """With the one CPU slot busy and another CPU call queued, more I/O calls than CPU slots
    wait at once and all complete."""
    blocker = Blocker()
    gate = trio.Event()
    all_waiting = trio.Event()
    waiting = 0

    async def io_work(n: int) -> int:
        nonlocal waiting
        waiting += 1
        if waiting == 3:
            all_waiting.set()
        await gate.wait()
        return n

    results: list[int] = []

    async def run_io(host: zl.Host, n: int) -> None:
        results.append(await host.workers.run_io_worker(io_work, n).submit())

    async with zl.open_host(app, config(store_dsn, cpu_worker_slots=1)) as host:
        with trio.fail_after(10):
            async with trio.open_nursery() as cpu:
                cpu.start_soon(host.workers.run_cpu_worker(blocker).submit)
                await blocker.started.wait()
                cpu.start_soon(host.workers.run_cpu_worker(lambda: "queued").submit)
                async with trio.open_nursery() as io:
                    for n in range(3):
                        io.start_soon(run_io, host, n)
                    await all_waiting.wait()
                    gate.set()
                assert not blocker.finished.is_set()
                blocker.release.set()
    assert [0, 1, 2] == sorted(results)


@pytest.mark.spec("CMP-3.6", "DEC-4")
async def test_a_cpu_call_waiting_for_a_slot_ends_at_its_deadline_without_running(
    store_dsn: str,
) -> None:
    """A CPU call that finds the only slot busy waits; at its deadline it ends with
    DEADLINE_EXCEEDED and its work never ran."""
    blocker = Blocker()
    ran = threading.Event()
    async with zl.open_host(app, config(store_dsn, cpu_worker_slots=1)) as host:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(host.workers.run_cpu_worker(blocker).submit)
                await blocker.started.wait()
                with pytest.raises(zl.ZLinkError) as caught:
                    await host.workers.run_cpu_worker(ran.set).timeout(0.1).submit()
                blocker.release.set()
    assert zl.ErrorKind.DEADLINE_EXCEEDED == caught.value.kind
    assert not ran.is_set()


@pytest.mark.spec("CMP-3.7", "DEC-4")
async def test_work_that_raises_ends_the_call_with_internal_failure(store_dsn: str) -> None:
    """CPU or I/O work that raises ends its call with INTERNAL_FAILURE naming the class."""

    def cpu_fails() -> None:
        raise ValueError("bad input")

    async def io_fails() -> None:
        await trio.lowlevel.checkpoint()
        raise KeyError("k")

    async with zl.open_host(app, config(store_dsn)) as host:
        with pytest.raises(zl.ZLinkError) as cpu:
            await host.workers.run_cpu_worker(cpu_fails).submit()
        with pytest.raises(zl.ZLinkError) as io:
            await host.workers.run_io_worker(io_fails).submit()
    assert zl.ErrorKind.INTERNAL_FAILURE == cpu.value.kind
    assert "ValueError: bad input" in str(cpu.value)
    assert zl.ErrorKind.INTERNAL_FAILURE == io.value.kind


@pytest.mark.spec("CMP-3.8")
async def test_work_finishing_after_its_deadline_produces_no_second_result(
    store_dsn: str,
) -> None:
    """CPU work that outlives its deadline finishes on its thread but the call's only result
    stays DEADLINE_EXCEEDED; I/O work is cancelled at its deadline and never finishes."""
    blocker = Blocker()
    io_outcome: list[str] = []

    async def io_forever() -> None:
        try:
            await trio.sleep_forever()
        finally:
            io_outcome.append("cancelled")

    async with zl.open_host(app, config(store_dsn, cpu_worker_slots=1)) as host:
        call = host.workers.run_cpu_worker(blocker).timeout(0.1)
        with pytest.raises(zl.ZLinkError) as caught:
            await call.submit()
        assert zl.ErrorKind.DEADLINE_EXCEEDED == caught.value.kind
        blocker.release.set()
        # The slot comes back once the thread ends; the next call gets its own result.
        with trio.fail_after(10):
            assert "next" == await host.workers.run_cpu_worker(lambda: "next").submit()
        assert blocker.finished.is_set()
        with pytest.raises(zl.ZLinkError) as again:
            await call.submit()
        assert zl.ErrorKind.INVALID_OPERATION == again.value.kind
        with trio.fail_after(10), pytest.raises(zl.ZLinkError) as io:
            await host.workers.run_io_worker(io_forever).timeout(0.1).submit()
    assert zl.ErrorKind.DEADLINE_EXCEEDED == io.value.kind
    assert ["cancelled"] == io_outcome


@pytest.mark.spec("CMP-3.9")
async def test_a_worker_call_has_no_deadline_unless_timeout_sets_one(store_dsn: str) -> None:
    """Without timeout() a worker call outlasts request_timeout; timeout() is set at most once,
    and run_cpu_worker refuses a coroutine function at once."""

    async def not_sync() -> None:
        await trio.lowlevel.checkpoint()

    async with zl.open_host(app, config(store_dsn, request_timeout=0.01)) as host:
        slow = await host.workers.run_io_worker(trio.sleep, 0.1).submit()
        assert slow is None
        call = host.workers.run_cpu_worker(lambda: 1).timeout(1)
        with pytest.raises(zl.ZLinkError) as twice:
            call.timeout(2)
        assert zl.ErrorKind.INVALID_OPERATION == twice.value.kind
        with pytest.raises(TypeError):
            host.workers.run_cpu_worker(not_sync)  # type: ignore[arg-type]  # refused on purpose


@pytest.mark.spec("CMP-3.10")
def test_cpu_worker_slots_default_to_the_cpu_count_and_are_checked() -> None:
    """HostConfig.cpu_worker_slots defaults to the CPU count; 0, 1025, a bool or a float is a
    ConfigurationError."""
    assert min(os.cpu_count() or 1, 1024) == zl.HostConfig(mesh="m").cpu_worker_slots
    assert 3 == zl.HostConfig(mesh="m", cpu_worker_slots=3).cpu_worker_slots
    for bad in [0, 1025, True, 1.5]:
        with pytest.raises(zl.ConfigurationError):
            zl.HostConfig(mesh="m", cpu_worker_slots=bad)  # type: ignore[arg-type]  # bad on purpose


@pytest.mark.spec("CMP-5.14", "SHUT-4.6")
async def test_a_worker_call_after_shutdown_ends_with_shutting_down(store_dsn: str) -> None:
    """Once the host has shut down, a new worker call ends with SHUTTING_DOWN unrun."""
    ran = threading.Event()
    async with zl.open_host(app, config(store_dsn)) as host:
        pass
    with pytest.raises(zl.ZLinkError) as caught:
        await host.workers.run_cpu_worker(ran.set).submit()
    assert zl.ErrorKind.SHUTTING_DOWN == caught.value.kind
    assert not ran.is_set()
