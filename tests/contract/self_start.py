"""A User Spot that sends to its own id from ``on_initialize``, run as its own process by
test_send_self_start.py (specs/completion.md CMP-7.12): were the send to wait for the Spot's
creation, which waits for that very turn, this process would hang, and the test kills it
rather than hang with it.

    python self_start.py DSN     prints one JSON line: the creation's status and what the send saw
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import ClassVar

import attrs
import trio

import zlink_trio as zl

app = zl.Application()


@app.message("self_start.Note")
@attrs.frozen
class Note:
    n: int


@app.user_spot("self_start.Selfish")
class Selfish(zl.Spot):
    """Sends to its own id from its start-up, before it is Ready."""

    seen: ClassVar[list[str]] = []

    async def on_initialize(self) -> None:
        try:
            await self.context.route.send_to_spot(self.context.spot_id, Note(5)).submit()
        except zl.ZLinkError as error:
            Selfish.seen.append(error.kind.name)
        else:
            Selfish.seen.append("admitted")

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        Selfish.seen.append(f"handled {msg.n}")


async def main(dsn: str) -> None:
    config = zl.HostConfig(mesh=f"self-start-{uuid.uuid4().hex[:8]}", store_dsn=dsn)
    async with zl.open_host(app, config) as host:
        created = await host.spots.get_or_create("s", "self_start.Selfish").submit()
        await trio.sleep(0.2)  # a message admitted after all would be handled by now
        print(json.dumps({"status": created.status.name, "seen": Selfish.seen}), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
