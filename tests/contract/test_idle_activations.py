"""A Ready Spot holds no Trio task while it is idle (specs/spots.md SPOT-96; activation.py
Rule 10, engines/mailbox.py Rule 5): none after its start, one gate task while it is served,
none again once that task was parked in the mailbox through a whole idle period."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import zlink_trio as zl
from tests.contract.tally_app import Add, Get, Total, app
from zlink_trio.ids import SpotId
from zlink_trio.testing import open_test_host


def all_tasks() -> list[trio.lowlevel.Task]:
    """Every task of this Trio run now."""
    tasks: list[trio.lowlevel.Task] = []

    def walk(task: trio.lowlevel.Task) -> None:
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                tasks.append(child)
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return tasks


def activation_tasks() -> list[trio.lowlevel.Task]:
    """The tasks of Spot activations running in this Trio run now."""
    return [task for task in all_tasks() if ".Activation." in task.name]


async def until_no_activation_task() -> None:
    """Checkpoints until the retired gate tasks have run to their end (bounded)."""
    with trio.fail_after(10):
        while activation_tasks():  # a task count, not an event
            await trio.lowlevel.checkpoint()


@pytest.mark.spec("SPOT-96")
async def test_an_idle_spot_holds_no_task_and_a_message_starts_one(store_dsn: str) -> None:
    """20 Spots created and never messaged hold no task; three that answered a request each
    keep one gate task, parked, through the period they were served in, and none after a whole
    idle period; a message after that is served by a new gate task, with the Spot's state."""
    async with open_test_host(app, dsn=store_dsn) as host:
        node: Any = host.host._node  # type: ignore[attr-defined]
        catalog: Any = host.host._messaging.spots  # type: ignore[attr-defined]
        for number in range(20):
            await host.spots.get_or_create(f"idle-{number}", "tally.Counter").submit()
        await host.wait_quiet()
        assert [] == activation_tasks()

        served = [f"idle-{number}" for number in range(3)]
        for spot_id in served:
            await host.route.send_to_spot(spot_id, Add(2)).submit()
            ask = host.route.request_to_spot(spot_id, Get(), reply_type=Total)
            assert 2 == (await ask.submit()).value
        await host.wait_quiet()
        assert 3 == len(activation_tasks())
        node.idle_servers.sweep()  # the period they were served in ends: kept
        parked = [catalog.activations[SpotId(spot_id)].mailbox.server_waiting for spot_id in served]
        assert [True, True, True] == parked
        node.idle_servers.sweep()  # a whole idle period: retired
        await until_no_activation_task()

        await host.route.send_to_spot("idle-0", Add(3)).submit()
        total = await host.route.request_to_spot("idle-0", Get(), reply_type=Total).submit()
        assert 5 == total.value
        assert 1 == len(activation_tasks())


@pytest.mark.spec("SPOT-96")
async def test_a_spot_fed_again_within_the_period_keeps_its_gate_task(store_dsn: str) -> None:
    """A message between two sweeps restarts the Spot's idle period: the sweep after it keeps
    the gate task, and the message was served by that same task (no task start)."""
    async with open_test_host(app, dsn=store_dsn) as host:
        node: Any = host.host._node  # type: ignore[attr-defined]
        await host.spots.get_or_create("fed", "tally.Counter").submit()
        await host.route.send_to_spot("fed", Add(1)).submit()
        await host.wait_quiet()
        first = activation_tasks()
        assert 1 == len(first)
        node.idle_servers.sweep()
        await host.route.send_to_spot("fed", Add(1)).submit()
        await host.wait_quiet()
        node.idle_servers.sweep()
        await host.wait_quiet()
        assert [id(task) for task in first] == [id(task) for task in activation_tasks()]
        total = await host.route.request_to_spot("fed", Get(), reply_type=Total).submit()
        assert 2 == total.value


def lanes() -> list[trio.lowlevel.Task]:
    return [task for task in all_tasks() if ".ActorActivation." in task.name]


@pytest.mark.spec("SPOT-96")
async def test_an_idle_actor_holds_no_lane_and_a_message_starts_one(store_dsn: str) -> None:
    """Actors created and never messaged hold no lane; one that answered keeps its lane through
    the period it was served in and none after a whole idle period; a message then starts a
    new lane that sees the Actor's state, and destroying an idle Actor still closes it."""
    async with open_test_host(app, dsn=store_dsn) as host:
        node: Any = host.host._node  # type: ignore[attr-defined]
        refs = [
            (await host.actors.create(f"agent-{number}", "tally.Agent").submit()).actor_ref
            for number in range(10)
        ]
        await host.wait_quiet()
        assert [] == lanes()

        await host.route.send_to_actor("agent-0", Add(2)).submit()
        total = await host.route.request_to_actor("agent-0", Get(), reply_type=Total).submit()
        assert 2 == total.value
        await host.wait_quiet()
        assert 1 == len(lanes())
        node.idle_servers.sweep()
        await host.wait_quiet()
        assert 1 == len(lanes())
        node.idle_servers.sweep()
        with trio.fail_after(10):
            while lanes():  # the retired lane runs to its end
                await trio.lowlevel.checkpoint()

        await host.route.send_to_actor("agent-0", Add(3)).submit()
        total = await host.route.request_to_actor("agent-0", Get(), reply_type=Total).submit()
        assert 5 == total.value
        assert refs[1] is not None
        with trio.fail_after(10):  # an idle Actor closes, though it had no lane
            assert await host.actors.destroy(refs[1])
        with pytest.raises(zl.ZLinkError):
            await host.route.request_to_actor("agent-1", Get(), reply_type=Total).submit()


@pytest.mark.spec("SHUT-4.18", "SPOT-96")
async def test_a_crashed_part_ends_the_host_with_its_own_error_and_closes_idle_units(
    store_dsn: str,
) -> None:
    """A part of the host raises while Spots and Actors sit idle without tasks: the host ends
    with that error alone, and the shutdown still closes every idle unit (its ``_finish``
    runs: the record's release is tried, ``closed`` is set), though the activations' nursery
    had ended before it and with it any task that could have."""
    spots: list[Any] = []
    actors: list[Any] = []

    async def crash() -> None:
        raise RuntimeError("a part of the host crashed")

    async def until_the_crash() -> None:
        async with open_test_host(app, dsn=store_dsn) as host:
            catalog: Any = host.host._messaging.spots  # type: ignore[attr-defined]
            for number in range(3):
                await host.spots.get_or_create(f"crash-{number}", "tally.Counter").submit()
                await host.actors.create(f"crash-agent-{number}", "tally.Agent").submit()
            await host.wait_quiet()
            spots.extend(catalog.activations[SpotId(f"crash-{n}")] for n in range(3))
            actors.extend(host.host._messaging.actors.actors.values())  # type: ignore[attr-defined]
            assert [] == activation_tasks()
            host.host._tree.nursery.start_soon(crash)  # type: ignore[attr-defined]
            await trio.sleep_forever()

    with pytest.raises(RuntimeError, match="a part of the host crashed"):
        await until_the_crash()
    assert 6 == len([*spots, *actors])
    assert all(unit.closed.is_set() for unit in [*spots, *actors])
