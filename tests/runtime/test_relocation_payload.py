"""The payload of one capture and one restore, without a move (specs/relocation.md RELOC-4,
RELOC-5, RELOC-9..RELOC-12; zlink_trio/_runtime/declarations/relocation.py).

The move of issue 14 calls ``capture_payload`` on the source and ``restore_payload`` on the
target; these tests drive the two functions alone with adapters that record what they saw.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._runtime.declarations.relocation import (
    AdapterFailure,
    capture_payload,
    restore_payload,
)


class Room(NoMembers):
    pass


class Member(zl.Actor):
    pass


class Gives(zl.SpotRelocationAdapter[Room]):
    """Captures whatever ``value`` holds; records every restore."""

    def __init__(self, value: object = b"") -> None:
        self.value = value
        self.captured_from: list[object] = []
        self.restored: list[tuple[object, object]] = []

    async def capture(self, target: Room) -> Any:
        self.captured_from.append(target)
        return self.value

    async def restore(self, target: Room, payload: bytes) -> None:
        self.restored.append((target, payload))


class Raises(zl.SpotRelocationAdapter[Room]):
    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def capture(self, target: Room) -> bytes:
        raise self.error

    async def restore(self, target: Room, payload: bytes) -> None:
        raise self.error


class Remembers(zl.ActorRelocationAdapter[Member]):
    def __init__(self) -> None:
        self.seen: list[tuple[Member, bytes]] = []

    async def capture(self, target: Member) -> bytes:
        return b"member"

    async def restore(self, target: Member, payload: bytes) -> None:
        self.seen.append((target, payload))


def target() -> Room:
    return object.__new__(Room)  # an instance without a context: the adapter only holds it


# --- the adapter API ----------------------------------------------------------------------------


@pytest.mark.spec("RELOC-4")
async def test_capture_and_restore_are_called_with_the_instance_and_the_payload() -> None:
    """capture gets the Spot or Actor instance itself; restore gets that instance and the
    payload; both base methods are async, and an adapter is made with no arguments."""
    for base in (zl.SpotRelocationAdapter, zl.ActorRelocationAdapter):
        assert inspect.iscoroutinefunction(base.capture)
        assert inspect.iscoroutinefunction(base.restore)
        assert ["self", "target"] == list(inspect.signature(base.capture).parameters)
        assert ["self", "target", "payload"] == list(inspect.signature(base.restore).parameters)
        with pytest.raises(TypeError):
            base()  # type: ignore[abstract]  # both methods are the subclass's to write
    room = target()
    adapter = Gives(b"state")
    assert b"state" == await capture_payload(adapter, room)
    assert [room] == adapter.captured_from
    assert adapter.captured_from[0] is room
    await restore_payload(adapter, room, b"state")
    [(restored_into, payload)] = adapter.restored
    assert restored_into is room
    assert b"state" == payload
    member = object.__new__(Member)
    actor_adapter = Remembers()
    assert b"member" == await capture_payload(actor_adapter, member)
    await restore_payload(actor_adapter, member, b"member")
    assert [(member, b"member")] == actor_adapter.seen


@pytest.mark.spec("RELOC-5")
def test_the_adapter_api_takes_and_gives_only_bytes() -> None:
    """No state class: capture is typed to return bytes and restore to take bytes, the bases
    have one type parameter (the target), and the public surface names no state type."""
    for base in (zl.SpotRelocationAdapter, zl.ActorRelocationAdapter):
        assert 1 == len(getattr(base, "__parameters__"))  # noqa: B009  # Generic's, untyped
        capture = typing.get_type_hints(base.capture)
        restore = typing.get_type_hints(base.restore)
        assert bytes is capture["return"]
        assert bytes is restore["payload"]
        assert type(None) is restore["return"]
        assert {"capture", "restore"} == {name for name in vars(base) if not name.startswith("_")}
    assert [] == [name for name in zl.__all__ if "State" in name or "Contract" in name]


# --- what a capture gives -----------------------------------------------------------------------


@pytest.mark.spec("RELOC-9")
async def test_an_empty_payload_is_valid_and_no_size_is_refused() -> None:
    """b"" (as bytes, bytearray or memoryview) is a payload like any other and restores as b"";
    a payload larger than a message and than a chunk is kept whole."""
    for empty in (b"", bytearray(), memoryview(b"")):
        payload = await capture_payload(Gives(empty), target())
        assert b"" == payload
        assert bytes is type(payload)
    adapter = Gives()
    await restore_payload(adapter, target(), b"")
    assert b"" == adapter.restored[0][1]
    big = bytes(range(256)) * (zl.HostConfig(mesh="m").max_message_bytes // 256 + 1)
    for form in (big, bytearray(big), memoryview(big)):
        assert big == await capture_payload(Gives(form), target())
    await restore_payload(adapter, target(), big)
    assert big == adapter.restored[1][1]


@pytest.mark.spec("RELOC-10")
async def test_a_captured_bytearray_or_memoryview_is_copied_when_capture_completes() -> None:
    """The payload is exactly bytes, and changing the bytearray the adapter returned, or the
    buffer under its memoryview, does not change it."""
    returned = bytearray(b"before")
    payload = await capture_payload(Gives(returned), target())
    returned[:] = b"after!"
    assert b"before" == payload
    assert bytes is type(payload)
    under = bytearray(b"viewed")
    payload = await capture_payload(Gives(memoryview(under)), target())
    under[:] = b"change"
    assert b"viewed" == payload
    assert bytes is type(payload)

    class Lies(bytes):
        def __bytes__(self) -> bytes:
            return b"not the payload"

    payload = await capture_payload(Gives(Lies(b"held")), target())
    assert b"held" == payload
    assert bytes is type(payload)


@pytest.mark.spec("RELOC-11")
@pytest.mark.parametrize("returned", [None, "text", 7, [1, 2], bytes])
async def test_a_capture_that_is_not_bytes_is_a_contract_violation(returned: object) -> None:
    """None or anything not bytes-like ends the capture with AdapterFailure."""
    with pytest.raises(AdapterFailure) as failed:
        await capture_payload(Gives(returned), target())
    assert "capture" == failed.value.stage
    assert "contract violation" in str(failed.value)


@pytest.mark.spec("RELOC-11")
async def test_an_exception_from_capture_is_the_same_typed_error_with_its_cause() -> None:
    """An exception from capture or restore, or a capture that is not a coroutine, is
    AdapterFailure with the original as its cause; a released memoryview too."""
    error = LookupError("no state")
    with pytest.raises(AdapterFailure) as failed:
        await capture_payload(Raises(error), target())
    assert "capture" == failed.value.stage
    assert failed.value.__cause__ is error
    with pytest.raises(AdapterFailure) as failed:
        await restore_payload(Raises(error), target(), b"x")
    assert "restore" == failed.value.stage
    assert failed.value.__cause__ is error

    class Sync(Gives):
        def capture(self, target: Room) -> Any:  # misuse under test: not async
            return b"not awaitable"

    with pytest.raises(AdapterFailure) as failed:
        await capture_payload(Sync(), target())
    assert isinstance(failed.value.__cause__, TypeError)
    released = memoryview(b"gone")
    released.release()
    with pytest.raises(AdapterFailure) as failed:
        await capture_payload(Gives(released), target())
    assert isinstance(failed.value.__cause__, ValueError)


@pytest.mark.spec("RELOC-11")
async def test_cancellation_is_not_an_adapter_failure() -> None:
    """A capture or restore cancelled while it waits is cancelled, never reported as the
    adapter's fault."""

    class Waits(zl.SpotRelocationAdapter[Room]):
        async def capture(self, target: Room) -> bytes:
            await trio.sleep_forever()
            raise AssertionError("unreachable")

        async def restore(self, target: Room, payload: bytes) -> None:
            await trio.sleep_forever()

    with trio.CancelScope() as scope:
        scope.cancel()
        await capture_payload(Waits(), target())
    assert scope.cancelled_caught
    with trio.CancelScope() as scope:
        scope.cancel()
        await restore_payload(Waits(), target(), b"x")
    assert scope.cancelled_caught


# --- what a restore gets ------------------------------------------------------------------------


@pytest.mark.spec("RELOC-12")
async def test_each_restore_gets_a_new_immutable_copy_equal_to_the_payload() -> None:
    """Every call gets exactly bytes, equal to the payload, and an object of its own: never the
    source's original, never the one an earlier call got; a payload held in a bytearray (as
    chunks arrive) is still handed over as bytes that later changes do not reach."""
    original = b"the state"
    adapter = Gives()
    room = target()
    await restore_payload(adapter, room, original)
    await restore_payload(adapter, room, original)
    (_, first), (_, second) = adapter.restored
    for given in (first, second):
        assert bytes is type(given)
        assert original == given
        assert given is not original
    assert first is not second
    assembled = bytearray(b"arrived")
    await restore_payload(adapter, room, assembled)  # chunks as they arrive, joined
    assembled[:] = b"changed"
    assert b"arrived" == adapter.restored[2][1]
    assert bytes is type(adapter.restored[2][1])
