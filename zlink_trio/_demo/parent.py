"""The parent of a demo run: starts the hosts and orders their phases and their shutdown.

``Parent`` writes one node configuration per host (the TOML format of ``zlink-trio node`` with a
``[demo]`` table for the ``workload``), starts each host as ``python -m zlink_trio demo --child
FILE`` in a session of its own (so a Ctrl-C in the terminal reaches the parent only), reads their
events and sends their commands (``protocol``). Each phase - ready, set up, run, stop - is a
barrier over every host; then the hosts shut down one at a time, the last started first, and
the parent prints the ``summary``. While the workload runs it polls the store for the
activations per node and feeds the ``view``. ``command`` resolves the store and the signals and
runs one ``Parent``. This is specs/demo.md DEMO-1 (phases as barriers), DEMO-5 (the ordered
shutdown, the exit status) and the parent's side of DEMO-6 (an interruption still shuts down
in order).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from collections import Counter as Tally
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import trio
from rich.console import Console

import zlink_trio as zl
from zlink_trio import _inspect
from zlink_trio._demo import workload
from zlink_trio._demo.protocol import lines
from zlink_trio._demo.record import HostRecord, count
from zlink_trio._demo.summary import Summary
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

EXPECTED_ERROR_KINDS: frozenset[str] = frozenset()
"""Error kinds that do not fail the demo: none; every failed call is a finding."""


class DemoFailed(Exception):
    """A phase did not complete; the message says which and why."""


class Parent:
    """One demo run: ``hosts`` processes on the store ``dsn``, ``seconds`` of workload."""

    def __init__(self, hosts: int, seconds: float, dsn: str, workdir: Path, out: TextIO) -> None:
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

    def note(self) -> None:
        """Wake every waiter: some host's phase, failure or exit changed."""
        self.changed.set()
        self.changed = trio.Event()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    # configuration and processes

    def write_configs(self) -> None:
        rooms = [f"room-{n}" for n in range(2 * len(self.hosts))]
        counters = [f"counter-{n}" for n in range(4 * len(self.hosts))]
        rids = [host.rid for host in self.hosts]
        for host in self.hosts:
            toml = [
                f'app = "{workload.__name__}:app"',
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
        if kind == "stats":
            host.sends += int(event["sends"])
            host.requests += int(event["requests"])
            latencies = [int(value) for value in event["latencies"]]
            host.latencies.extend(latencies)
            errors = Tally({str(k): int(v) for k, v in dict(event["errors"]).items()})
            host.errors.update(errors)
            self.interval.add(int(event["sends"]) + int(event["requests"]), latencies, errors)
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

    async def send(self, host: HostRecord, command: str) -> None:
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
            snapshot = await _inspect._inspect(self.dsn, zl.MeshName(self.mesh), None)
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

    # the whole run

    async def run_workload(self) -> None:
        self.say(
            f"workload: {self.seconds:g}s over {count(len(self.hosts), 'host')} "
            "(rooms, users, counters; sends and requests from every host)"
        )
        self.running = True
        for host in self.hosts:
            await self.send(host, "run")
        started = last = trio.current_time()
        end = started + self.seconds
        with LiveView(self.out, self.console, self.seconds) as view:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.watch_failures)
                while (now := trio.current_time()) < end:
                    await trio.sleep(min(1.0, end - now))
                    now = trio.current_time()
                    activations = activations_of(self.hosts, self.activations)
                    view.show(self.interval.take(now - started, now - last, activations))
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
                    self.say(self.set_up_text())
                    started = trio.current_time()
                    async with trio.open_nursery() as poll:
                        poll.start_soon(self.poll_activations)
                        await self.run_workload()
                        poll.cancel_scope.cancel()
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
        Summary.of(self.hosts, self.mesh, elapsed, self.activations).show(self.out, self.console)
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
            f"{host.name} owns {count(len(host.set_up.get('own_rooms', [])), 'room')}, "
            f"{host.set_up.get('joined', 0)}/{host.set_up.get('users', 0)} users joined, "
            f"{count(host.set_up.get('counters', 0), 'counter')} activated cold"
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


def _toml_string(value: str) -> str:
    # JSON's string escapes are a subset of TOML basic strings' escapes.
    return json.dumps(value, ensure_ascii=False)


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
