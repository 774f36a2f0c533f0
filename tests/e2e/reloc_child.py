"""One host of the relocation e2e tests in its own process (tests/e2e/test_relocation.py).

Run as ``python reloc_child.py --mesh M --dsn DSN --rid R --peers N --lease S --version V
--folder F``. It starts a host of ``reloc_app.app`` (application version ``V``) that writes its
turns to ``F/turns-R.jsonl`` and its senders' calls to ``F/calls-R.jsonl`` (the records of
tests/e2e/history_check.py), waits until it lists ``N`` peers and prints
``{"ready": true, "node_rid": R, "generation": G}``. Then it answers one JSON command per line:

- ``create {rooms, counters}``: makes the User Spots ``rooms`` here and activates the Instance
  Spots ``counters`` here; answers where each room lives;
- ``arm {points}``: arms ``reloc_app.gates`` points (``capture``, ``restore``, ``closing``);
- ``traffic {senders, rooms, counters, seed, pause, timeout}``: starts one task per sender name,
  each sending bursts of one to four ``Note``s and ``Ask``s (30 %) with its own increasing
  sequence numbers to a random one of the ids, one call at a time, ``pause`` seconds between
  bursts, each request bounded by ``timeout``;
- ``stop {grace}``: stops the senders after their current call, waiting ``grace`` seconds at
  most (a call still running then stays without an end in the records); answers how many calls;
- ``relocate {mode, version, deadline, shutdown}``: starts ``host.relocate`` (or
  ``relocate_and_shutdown``) and answers at once; its result goes to ``F/R.result`` as
  ``{"outcome", "reason"}``. A host that relocated and shut down then exits 0;
- ``status``: the host's status and peers.

``{"op": "shutdown"}`` or the end of input shuts the host down and exits 0. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import reloc_app  # the script's own folder is first on sys.path
import trio

import zlink_trio as zl

POLL = 0.05


def say(answer: dict[str, Any]) -> None:
    print(json.dumps(answer), flush=True)


async def lines(stream: trio.lowlevel.FdStream) -> Any:
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = await stream.receive_some()
            if not chunk:
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        if line.strip():
            yield json.loads(line)


class Senders:
    """The sender tasks of this host and their call records."""

    def __init__(self, host: zl.Host, record: reloc_app.Sink) -> None:
        self.host = host
        self.record = record
        self.stopping = trio.Event()
        self.scopes: list[trio.CancelScope] = []
        self.running = 0
        self.done = trio.Event()
        self.calls = 0

    async def call(
        self, name: str, seq: int, spot_id: str, instance: bool, kind: str, budget: float
    ) -> None:
        """One call, recorded before it is submitted and when it ends."""
        self.calls += 1
        self.record(
            {"phase": "issue", "sender": name, "seq": seq, "id": spot_id, "kind": kind}
            | {"at": time.monotonic()}
        )
        end: dict[str, Any] = {"phase": "end", "sender": name, "seq": seq}
        route = self.host.route
        try:
            if kind == "send":
                send = route.send_to_spot(spot_id, reloc_app.Note(name, seq))
                await (send.instance_spot(reloc_app.COUNTER) if instance else send).submit()
                end["ok"] = True
            else:
                ask = route.request_to_spot(
                    spot_id, reloc_app.Ask(name, seq), reply_type=reloc_app.Answer
                )
                ask = ask.instance_spot(reloc_app.COUNTER) if instance else ask
                answer = await ask.timeout(budget).submit()
                end.update(ok=True, host=answer.host, act=answer.act)
        except zl.ZLinkError as error:
            end.update(ok=False, error=error.kind.name, text=error.message)
        end["at"] = time.monotonic()
        self.record(end)

    async def sender(
        self, name: str, targets: list[tuple[str, bool]], seed: int, pause: float, budget: float
    ) -> None:
        rng = random.Random(f"{seed}-{name}")
        seq = 0
        try:
            while not self.stopping.is_set():
                spot_id, instance = rng.choice(targets)
                for _ in range(rng.randint(1, 4)):
                    seq += 1
                    kind = "request" if rng.random() < 0.3 else "send"
                    await self.call(name, seq, spot_id, instance, kind, budget)
                    if self.stopping.is_set():
                        break
                await trio.sleep(pause)
        finally:
            self.running -= 1
            if not self.running:
                self.done.set()

    def start(self, nursery: trio.Nursery, command: dict[str, Any]) -> None:
        targets = [(spot_id, False) for spot_id in command["rooms"]]
        targets += [(spot_id, True) for spot_id in command["counters"]]
        for name in command["senders"]:
            self.running += 1
            nursery.start_soon(
                self._scoped,
                name,
                targets,
                command["seed"],
                command["pause"],
                command["timeout"],
            )

    async def _scoped(self, *arguments: Any) -> None:
        with trio.CancelScope() as scope:
            self.scopes.append(scope)
            await self.sender(*arguments)

    async def stop(self, grace: float) -> int:
        self.stopping.set()
        if self.running:
            with trio.move_on_after(grace):
                await self.done.wait()
        for scope in self.scopes:
            scope.cancel()
        return self.calls


async def relocate(
    host: zl.Host, command: dict[str, Any], result: Path, done: trio.CancelScope
) -> None:
    mode = zl.RelocationMode[command["mode"]]
    call = host.relocate_and_shutdown if command["shutdown"] else host.relocate
    outcome = await call(mode, target_version=command["version"], deadline=command["deadline"])
    # Written whole, then renamed: the test polls for the file and must never read it half done.
    written = result.with_suffix(".writing")
    written.write_text(json.dumps({"outcome": outcome.outcome.name, "reason": outcome.reason.name}))
    written.replace(result)
    if command["shutdown"] and outcome.relocated:
        done.cancel()  # the host shut down: the process ends


async def execute(
    host: zl.Host,
    senders: Senders,
    nursery: trio.Nursery,
    folder: Path,
    command: dict[str, Any],
) -> dict[str, Any]:
    op = command["op"]
    if op == "create":
        where = {}
        for spot_id in command["rooms"]:
            created = await host.spots.get_or_create(spot_id, reloc_app.ROOM).submit()
            where[spot_id] = created.spot_ref.node_rid.value
        for spot_id in command["counters"]:
            touch = host.route.send_to_spot(spot_id, reloc_app.Touch())
            await touch.instance_spot(reloc_app.COUNTER).submit()
            # The send completes in the new activation's queue, before its claim: ask it, so
            # that nobody's traffic activates the counter elsewhere first.
            ask = host.route.request_to_spot(
                spot_id, reloc_app.Where(), reply_type=reloc_app.Answer
            )
            where[spot_id] = (await ask.instance_spot(reloc_app.COUNTER).submit()).host
        return {"ok": True, "rooms": where}
    if op == "arm":
        reloc_app.gates.armed.update(command["points"])
        return {"ok": True}
    if op == "traffic":
        senders.start(nursery, command)
        return {"ok": True}
    if op == "stop":
        return {"ok": True, "calls": await senders.stop(command["grace"])}
    if op == "relocate":
        result = folder / f"{host.node_rid.value}.result"
        nursery.start_soon(relocate, host, command, result, nursery.cancel_scope)
        return {"ok": True}
    if op == "status":
        peers = sorted(rid.value for rid in host.peers)
        return {"ok": True, "status": host.status.name, "peers": peers}
    return {"ok": False, "error": f"unknown op {op}"}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mesh", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--rid", required=True)
    parser.add_argument("--peers", type=int, required=True)
    parser.add_argument("--lease", type=float, required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--folder", required=True)
    parser.add_argument("--ready-timeout", type=float, default=45.0)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format=f"[{args.rid}] %(name)s: %(message)s"
    )
    folder = Path(args.folder)
    reloc_app.sink = reloc_app.file_sink(folder / f"turns-{args.rid}.jsonl")
    reloc_app.gates.folder, reloc_app.gates.host = folder, args.rid
    config = zl.HostConfig(
        mesh=args.mesh,
        store_dsn=args.dsn,
        node_rid=args.rid,
        node_lease=args.lease,
        application_version=args.version,
    )
    async with zl.open_host(reloc_app.app, config) as host:
        with trio.fail_after(args.ready_timeout):
            while len(host.peers) < args.peers:  # noqa: ASYNC110  # the store has no local event
                await trio.sleep(POLL)
        generation = str(host.node_generation.value)
        say({"ready": True, "node_rid": host.node_rid.value, "generation": generation})
        senders = Senders(host, reloc_app.file_sink(folder / f"calls-{args.rid}.jsonl"))

        async def commands(nursery: trio.Nursery) -> None:
            stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
            async for command in lines(stdin):
                if command["op"] == "shutdown":
                    await senders.stop(0)
                    await host.shutdown()
                    say({"ok": True})
                    break
                say(await execute(host, senders, nursery, folder, command))
            nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(commands, nursery)
        await host.shutdown()


if __name__ == "__main__":
    trio.run(main)
