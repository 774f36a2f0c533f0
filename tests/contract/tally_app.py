"""A test application several contract tests share: a User Spot and an Actor that add up the
amounts they are sent and answer the total."""

from __future__ import annotations

import attrs

import zlink_trio as zl
from tests.members import NoMembers

app = zl.Application()


@app.message("tally.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("tally.Get")
@attrs.frozen
class Get:
    pass


@app.message("tally.Total")
@attrs.frozen
class Total:
    value: int


class Tally:
    def __init__(self) -> None:
        self.value = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Total:
        return Total(self.value)


@app.user_spot("tally.Counter")
class Counter(Tally, NoMembers):
    pass


@app.actor("tally.Agent")
class Agent(Tally, zl.Actor):
    pass
