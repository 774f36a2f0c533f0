"""The parent of a demo run: starts the hosts and orders their phases and their shutdown.

``Parent`` writes one node configuration per host (the TOML format of ``zlink-trio node`` with a
``[demo]`` table for the ``workload``), starts each host as ``python -m zlink_trio demo --child
FILE`` in a session of its own (so a Ctrl-C in the terminal reaches the parent only), reads their
events and sends their commands (``protocol``). Each phase - ready, set up, run, stop - is a barrier
over every host; then the hosts shut down one at a time, the last started first, and the parent
prints the ``summary``. While the workload runs it polls the store for the activations per node
(``store``) and feeds the ``view``; with ``rolling_update`` it runs the ``update`` a third of the
way in and keeps the workload going until that update has ended (DEMO-7). ``command`` resolves the
store and the signals and runs one ``Parent``. This is specs/demo.md DEMO-1 (phases as barriers),
DEMO-5 (the ordered shutdown, the exit status) and the parent's side of DEMO-6 (an interruption
still shuts down in order).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from collections import Counter as Tally
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import trio
from rich.console import Console

from zlink_trio._demo import app as demo_app
from zlink_trio._demo.protocol import lines
from zlink_trio._demo.record import HostRecord, count, set_up_text
from zlink_trio._demo.store import StoreRows, owned, read_store
from zlink_trio._demo.summary import Summary
from zlink_trio._demo.update import FROM_VERSION, RollingUpdate
from zlink_trio._demo.view import Interval, LiveView, activations_of

__all__ = ["DemoFailed", "Parent"]

READY_TIMEOUT = 90.0
"""Seconds for every host to start and see all its peers."""
SET_UP_TIMEOUT = 60.0
"""Seconds for every host to create its rooms and users and finish the joins."""
STOP_TIMEOUT = 30.0
"""Seconds for every workload to stop after ``stop``."""
CLOSE_TIMEOUT = 30.0
"""Seconds each host gets to shut down before it is killed."""
MIN_SPAN = 0.5
"""Seconds a progress line covers at the least (the hosts report every half second, so a rate
over less would be off by as much: once 213,772 msg/s over a few milliseconds, against 9,000).
The last line before the workload ends takes what is left of the time with it."""

EXPECTED_ERROR_KINDS: frozenset[str] = frozenset()
"""Error kinds that do not fail the demo: none; every failed call is a finding."""


class DemoFailed(Exception):
    """A phase did not complete; the message says which and why."""


class Parent:
    """One demo run: ``hosts`` processes on the store ``dsn``, ``seconds`` of workload, with a
    rolling update of the first host in it unless ``rolling_update`` is false."""

    def __init__(
        self,
        hosts: int,
        seconds: float,
        dsn: str,
        workdir: Path,
        out: TextIO,
        *,
        rolling_update: bool = True,
    ) -> None:
        self.token = uuid.uuid4().hex[:8]
        self.mesh = f"demo-{self.token}"
        self.seconds = seconds
        self.dsn = dsn
        self.workdir = workdir
        self.out = out
        self.console = Console(file=out) if out.isatty() else None
        """Where rich draws the live view and the summary; ``None`` outside a terminal."""
        self.hosts = [
            HostRecord(index, f"{self.mesh}-h{index + 1}", workdir / f"h{index + 1}.toml")
            for index in range(hosts)
        ]
        self.activations: dict[str, int] | None = None
        self.interval = Interval()
        self.changed = trio.Event()
        self.running = False
        self.update = RollingUpdate(self, seconds / 3) if rolling_update else None

    def note(self) -> None:
        """Wake every waiter: some host's phase, failure or exit changed."""
        self.changed.set()
        self.changed = trio.Event()

    def say(self, text: str) -> None:
        if self.console is None:
            print(text, file=self.out, flush=True)
        else:  # above the live view while it is drawn
            self.console.print(text, markup=False, highlight=False)

    async def changed_wait(self) -> None:
        await self.changed.wait()

    # configuration and processes

    def write_configs(self) -> None:
        rids = [host.rid for host in self.hosts]
        for host in self.hosts:
            self.write_config(host, rids, FROM_VERSION, spare=False)

    def write_config(
        self, host: HostRecord, rids: Sequence[str], version: str, *, spare: bool
    ) -> None:
        """The node configuration of ``host``: its application version, its ``[demo]`` plan."""
        workload_hosts = len([host for host in self.hosts if not host.spare])
        node = {
            "app": f"{demo_app.__name__}:app",
            "mesh": self.mesh,
            "store_dsn": self.dsn,
            "node_rid": host.rid,
            "application_version": version,
        }
        plan = {
            "index": host.index,
            "rids": list(rids),
            "rooms": [f"room-{n}" for n in range(2 * workload_hosts)],
            "counters": [f"counter-{n}" for n in range(4 * workload_hosts)],
            "users_per_host": 4,
            "user_prefix": f"{self.mesh}.user.",
            "spare": spare,
        }
        toml = [*_toml(node), "", "[demo]", *_toml(plan)]
        host.config.write_text("\n".join(toml) + "\n", encoding="utf-8")

    async def start(self, host: HostRecord, nursery: trio.Nursery) -> None:
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

    async def read_events(self, host: HostRecord) -> None:
        assert host.process is not None
        assert host.process.stdout is not None
        try:
            async with host.process.stdout as stream:
                async for line in lines(stream):
                    try:
                        event = json.loads(line)
                    except json.JSONDecodeError:
                        host.stderr_tail.append(f"(stdout) {line}")
                        continue
                    self.on_event(host, event)
        finally:
            host.output_ended.set()

    async def read_stderr(self, host: HostRecord) -> None:
        assert host.process is not None
        assert host.process.stderr is not None
        async with host.process.stderr as stream:
            async for line in lines(stream):
                host.stderr_tail.append(line)

    async def wait_exit(self, host: HostRecord) -> None:
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

    def on_event(self, host: HostRecord, event: Mapping[str, Any]) -> None:
        kind = event.get("event")
        if kind in ("status", "relocated"):  # no phase of the protocol
            status = host.report(event)
            if status is not None and self.update is not None and host in self.update.hosts():
                self.say(f"rolling update: {host.name} {status}")
            self.note()
            return
        if kind == "stats":
            latencies, errors = host.add_stats(event)
            self.interval.add(int(event["sends"]) + int(event["requests"]), latencies, errors)
            return
        if kind == "set":
            host.set_up = dict(event)
        if kind == "failed":
            host.failure = str(event.get("error"))
        if isinstance(kind, str):
            host.phase = kind
        self.note()

    async def send(self, host: HostRecord, command: str) -> None:
        if host.process is None or host.process.stdin is None or host.returncode is not None:
            return
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await host.process.stdin.send_all(f"{command}\n".encode())

    def workload_hosts(self) -> list[HostRecord]:
        """The hosts that run the workload now: neither spare nor relocated away."""
        return [host for host in self.hosts if not host.spare and not host.relocated]

    async def barrier(self, phase: str, limit: float) -> None:
        """Wait until every host that runs the workload reports ``phase``; ``DemoFailed`` when
        any host fails or exits."""
        with trio.move_on_after(limit) as scope:
            while True:
                failed = [host for host in self.hosts if host.failure is not None]
                if failed:
                    raise DemoFailed(
                        "; ".join(f"{host.name} ({host.rid}) {host.failure}" for host in failed)
                    )
                waiting = [host for host in self.workload_hosts() if host.phase != phase]
                if not waiting:
                    return
                await self.changed.wait()
        if scope.cancelled_caught:
            late = ", ".join(
                f"{h.name} ({h.phase})" for h in self.workload_hosts() if h.phase != phase
            )
            raise DemoFailed(f"not every host reached {phase!r} within {limit:.0f}s: {late}")

    async def watch_failures(self) -> None:
        """Raises ``DemoFailed`` as soon as a host fails during the workload."""
        while True:
            for host in self.hosts:
                if host.failure is not None:
                    raise DemoFailed(f"{host.name} ({host.rid}) {host.failure}")
            await trio.sleep(0.1)

    # the store view

    async def read_store(self) -> StoreRows | None:
        return await read_store(self.dsn, self.mesh, [host.rid for host in self.hosts])

    async def read_activations(self) -> dict[str, int] | None:
        rows = await self.read_store()
        if rows is None:
            return None
        if self.update is not None:
            self.update.count(rows)
        return owned(rows, [host.rid for host in self.hosts])

    async def poll_activations(self) -> None:
        while True:
            counts = await self.read_activations()
            if counts is not None:
                self.activations = counts
            await trio.sleep(1.0)

    # the whole run

    async def run_workload(self, processes: trio.Nursery) -> None:
        self.say(
            f"workload: {self.seconds:g}s over {count(len(self.hosts), 'host')} "
            "(rooms, users, counters; sends and requests from every host)"
        )
        self.running = True
        for host in self.hosts:
            await self.send(host, "run")
        started = last = trio.current_time()
        end = started + self.seconds
        update = self.update
        with LiveView(self.out, self.console, self.seconds) as view:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.watch_failures)
                if update is not None:
                    nursery.start_soon(update.run, processes)
                # The workload goes on until a while after the update (bounded on its own).
                while (now := trio.current_time()) < (
                    until := end if update is None else update.until(end)
                ):
                    left = until - now  # the last line takes the rest, not a sliver of it
                    await trio.sleep(left if left < 1.0 + MIN_SPAN else 1.0)
                    if (now := trio.current_time()) - last < MIN_SPAN:
                        continue  # the end moved by a sliver: its rate would say nothing
                    activations = activations_of(self.hosts, self.activations)
                    text = None if update is None else update.text()
                    view.show(self.interval.take(now - started, now - last, activations, text))
                    last = now
                nursery.cancel_scope.cancel()

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
                    self.say(f"starting {count(len(self.hosts), 'host')} in mesh {self.mesh}")
                    for host in self.hosts:
                        await self.start(host, nursery)
                    await self.barrier("ready", READY_TIMEOUT)
                    self.say(
                        f"hosts ready, each sees its {count(len(self.hosts) - 1, 'peer')}: "
                        + ", ".join(f"{h.name}={h.rid}" for h in self.hosts)
                    )
                    for host in self.hosts:
                        await self.send(host, "go")
                    await self.barrier("set", SET_UP_TIMEOUT)
                    self.say(set_up_text(self.hosts))
                    started = trio.current_time()
                    async with trio.open_nursery() as poll:
                        poll.start_soon(self.poll_activations)
                        await self.run_workload(nursery)
                        poll.cancel_scope.cancel()
                    for host in self.workload_hosts():
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
        Summary.of(self.hosts, self.mesh, elapsed, self.activations).show(self.out, self.console)
        errors: Tally[str] = Tally()
        for host in self.hosts:
            errors.update(host.errors)
        if self.update is not None and self.update.started:
            for line in self.update.summary(sum(errors.values())):
                self.say(line)
        for host in self.hosts:
            if host.failure is not None or host.returncode != 0:
                self.say(f"{host.name} ({host.rid}): {host.failure or 'failed'}")
                for line in host.stderr_tail:
                    self.say(f"  {host.name} | {line}")
        unexpected = {kind for kind in errors if kind not in EXPECTED_ERROR_KINDS}
        ok = (
            problem is None
            and (self.update is None or self.update.problem is None)
            and not unexpected
            and all(host.returncode == 0 and host.failure is None for host in self.hosts)
        )
        self.say(
            "demo: ok" if ok else "demo: interrupted" if interrupted.is_set() else "demo: FAILED"
        )
        return ok

    async def shut_down(self) -> None:
        """Stop the workload everywhere if it still runs, then shut the hosts down one at a
        time, the last started first."""
        if self.running:
            for host in self.workload_hosts():
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


def _toml(table: Mapping[str, object]) -> list[str]:
    """``key = value`` lines; JSON's strings, numbers, booleans and arrays are TOML's too."""
    return [f"{key} = {json.dumps(value, ensure_ascii=False)}" for key, value in table.items()]


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
