"""A RouteMesh node in its own process, driven line by line over stdin/stdout by the tests.

Run as ``python node.py --rid b [--mesh m] [--send-hwm N] [--receive-hwm N]``. It prints
``READY <application endpoint> <completion endpoint> <generation>`` once bound, ``UP <rid>`` /
``LOST <rid>`` on route changes, and answers these commands:

- ``peer <rid> <application endpoint> <completion endpoint>``: add a peer;
- ``send <rid> <count> <payload bytes>``: one-way messages numbered 0..count-1, then ``SENT``;
- ``request <rid> <count>``: echo requests one after another, then ``REQUESTED <ok>``;
- ``count``: ``COUNT <received Sends> <1 if numbered in order else 0>``;
- ``resume``: let a reader blocked by a ``block`` Send go on.

Requests of type ``echo`` get their payload back; ``hang`` gets nothing. A Send of type
``block`` holds the application reader until ``resume``, so its HWM fills.
"""

from __future__ import annotations

import argparse
import os
import sys

import trio

from zlink_trio._integration.transport import (
    MeshConfig,
    PeerAddress,
    PeerRun,
    RouteLost,
    RouteUp,
    open_route_mesh,
)
from zlink_trio._wire import OperationId, Reply, Request, Send
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, SpotId, StableTypeName

ECHO = StableTypeName("echo")
BLOCK = StableTypeName("block")


def say(*words: object) -> None:
    print(*words, flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rid", required=True)
    parser.add_argument("--mesh", default="test-mesh")
    parser.add_argument("--send-hwm", type=int, default=1000)
    parser.add_argument("--receive-hwm", type=int, default=1000)
    parser.add_argument("--heartbeat", type=float, default=0.1)
    parser.add_argument("--window", type=float, default=1.0)
    args = parser.parse_args()
    resume = trio.Event()
    received = 0
    in_order = True

    async def on_message(origin: PeerRun, message: Send | Request) -> None:
        nonlocal received, in_order
        if type(message) is Request:
            if message.message_type == ECHO:
                reply = Reply(
                    message.reply_route,
                    message.operation_id,
                    origin.generation,
                    ECHO,
                    message.payload,
                )
                mesh.reply(origin, reply)
            return
        if message.message_type == BLOCK:
            await resume.wait()
            return
        number = int.from_bytes(message.payload[:8], "big")
        in_order = in_order and number == received
        received += 1

    config = MeshConfig(
        mesh=MeshName(args.mesh),
        node_rid=NodeRid(args.rid),
        generation=NodeGeneration.new(),
        send_hwm=args.send_hwm,
        receive_hwm=args.receive_hwm,
        heartbeat_interval=args.heartbeat,
        liveness_window=args.window,
    )
    async with open_route_mesh(config, on_message) as mesh:

        async def report_routes() -> None:
            async for change in mesh.route_changes:
                word = "UP" if type(change) is RouteUp else "LOST"
                assert isinstance(change, RouteUp | RouteLost)
                say(word, change.run.node_rid.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(report_routes)
            say(
                "READY",
                mesh.application_endpoint,
                mesh.completion_endpoint,
                config.generation.value,
            )
            stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
            buffer = b""
            while True:
                chunk = await stdin.receive_some()
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    words = line.decode().split()
                    if words:
                        await command(mesh, words, resume, lambda: (received, in_order))
            nursery.cancel_scope.cancel()


async def command(mesh, words, resume, counts):  # type: ignore[no-untyped-def]  # test driver
    verb = words[0]
    if verb == "peer":
        mesh.add_peer(PeerAddress(NodeRid(words[1]), words[2], words[3]))
    elif verb == "send":
        peer, count, size = NodeRid(words[1]), int(words[2]), int(words[3])
        padding = b"p" * max(0, size - 8)
        for number in range(count):
            message = Send(SpotId("s"), StableTypeName("n"), number.to_bytes(8, "big") + padding)
            await mesh.send(peer, message)
        say("SENT")
    elif verb == "request":
        peer, count, ok = NodeRid(words[1]), int(words[2]), 0
        for number in range(count):
            try:
                reply = await mesh.request(
                    peer,
                    operation_id=OperationId.new(),
                    target=SpotId("s"),
                    message_type=ECHO,
                    payload=number.to_bytes(8, "big"),
                    timeout=10.0,
                )
            except ZLinkError as error:
                say("ERROR", error.kind.name)
                continue
            ok += reply.payload == number.to_bytes(8, "big")
        say("REQUESTED", ok)
    elif verb == "count":
        received, in_order = counts()
        say("COUNT", received, int(in_order))
    elif verb == "resume":
        resume.set()


if __name__ == "__main__":
    trio.run(main)
