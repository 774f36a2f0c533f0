"""Relocation as an application declares it: the policy of each Spot and Actor type, its
default, and the adapter checks of start-up (specs/relocation.md RELOC-1..RELOC-3, RELOC-24;
specs/spots.md SPOT-79, SPOT-80; specs/decisions.md DEC-24)."""

from __future__ import annotations

import uuid

import pytest

import zlink_trio as zl
from tests.members import NoMembers

UNREACHABLE_DSN = "postgresql://nobody@127.0.0.1:9/none"
"""Port 9 (discard) has no PostgreSQL: a host that touched the store would fail differently."""


class Room(NoMembers):
    pass


class Hall(NoMembers):
    pass


class Counter(zl.InstanceSpot):
    pass


class Member(zl.Actor):
    pass


class RoomState(zl.SpotRelocationAdapter[Room]):
    async def capture(self, target: Room) -> bytes:
        return b""

    async def restore(self, target: Room, payload: bytes) -> None:
        pass


class AnySpotState(zl.SpotRelocationAdapter[zl.Spot]):
    async def capture(self, target: zl.Spot) -> bytes:
        return b""

    async def restore(self, target: zl.Spot, payload: bytes) -> None:
        pass


class AnyInstanceState(zl.SpotRelocationAdapter[zl.InstanceSpot]):
    async def capture(self, target: zl.InstanceSpot) -> bytes:
        return b""

    async def restore(self, target: zl.InstanceSpot, payload: bytes) -> None:
        pass


class MemberState(zl.ActorRelocationAdapter[Member]):
    async def capture(self, target: Member) -> bytes:
        return b""

    async def restore(self, target: Member, payload: bytes) -> None:
        pass


def spot_type(app: zl.Application, name: str) -> object:
    return app.freeze().spot_types[zl.StableTypeName(name)]


async def start_fails(app: zl.Application) -> zl.ConfigurationError:
    """Start a host from ``app`` on a store nobody runs: a ConfigurationError can only come from
    the checks that run before the store is opened and before anything binds."""
    config = zl.HostConfig(mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=UNREACHABLE_DSN)
    with pytest.raises(zl.ConfigurationError) as caught:
        async with zl.open_host(app, config):
            pytest.fail("a host started from an invalid relocation declaration")
    return caught.value


@pytest.mark.spec("RELOC-1")
def test_each_decorator_takes_each_policy_and_the_registry_keeps_it() -> None:
    """user_spot, instance_spot and actor take relocation=; the frozen registry exposes the
    policy of every type as declared."""
    app = zl.Application()
    app.user_spot("r.Kept", relocation=zl.preserve_state_with(RoomState))(Room)
    app.user_spot("r.Fresh", relocation=zl.recreate_on_relocation())(Hall)
    app.instance_spot("r.Still", relocation=zl.disable_relocation())(Counter)
    app.instance_spot("r.Moving", relocation=zl.preserve_state_with(AnyInstanceState))(
        type("Moving", (zl.InstanceSpot,), {})
    )
    app.actor("r.Member", relocation=zl.preserve_state_with(MemberState))(Member)
    app.actor("r.Guest", relocation=zl.recreate_on_relocation())(type("Guest", (zl.Actor,), {}))
    registry = app.freeze()
    spots = {name.value: t.relocation for name, t in registry.spot_types.items()}
    actors = {name.value: t.relocation for name, t in registry.actor_types.items()}
    assert {
        "r.Kept": zl.preserve_state_with(RoomState),
        "r.Fresh": zl.recreate_on_relocation(),
        "r.Still": zl.disable_relocation(),
        "r.Moving": zl.preserve_state_with(AnyInstanceState),
    } == spots
    assert {
        "r.Member": zl.preserve_state_with(MemberState),
        "r.Guest": zl.recreate_on_relocation(),
    } == actors
    assert RoomState is spots["r.Kept"].adapter
    assert "preserve_state" == spots["r.Kept"].kind


@pytest.mark.spec("RELOC-1", "REG-5.10", "DEC-24")
def test_a_policy_or_mode_of_the_wrong_type_is_refused_by_the_decorator() -> None:
    """relocation= takes only a policy (a coordination mode included: it moved to
    coordination=), coordination= only a RelocationCoordinationMode, and preserve_state_with
    only a class: TypeError at the call."""
    app = zl.Application()
    for bad in ("disable", zl.RelocationCoordinationMode.FRAMEWORK_MANAGED, RoomState):
        with pytest.raises(TypeError):
            app.user_spot("r.Bad", relocation=bad)  # type: ignore[arg-type]  # misuse under test
        with pytest.raises(TypeError):
            app.instance_spot("r.Bad", relocation=bad)  # type: ignore[arg-type]  # misuse under test
        with pytest.raises(TypeError):
            app.actor("r.Bad", relocation=bad)  # type: ignore[arg-type]  # misuse under test
    with pytest.raises(TypeError, match="coordination="):
        app.user_spot(
            "r.Old",
            relocation=zl.RelocationCoordinationMode.APPLICATION_SIGNALED,  # type: ignore[arg-type]  # the old form
        )
    with pytest.raises(TypeError):
        app.user_spot("r.Bad", coordination=zl.recreate_on_relocation())  # type: ignore[arg-type]  # misuse under test
    with pytest.raises(TypeError):
        zl.preserve_state_with(RoomState())  # type: ignore[arg-type]  # an instance, not a class
    app.freeze()  # nothing refused was recorded


@pytest.mark.spec("RELOC-2", "SPOT-79")
def test_without_relocation_a_type_does_not_move_and_a_per_actor_spot_is_recreated() -> None:
    """No relocation= is disable_relocation() for a SPOT_WIDE User Spot, an Instance Spot and
    an Actor, and recreate_on_relocation() for a PER_ACTOR User Spot; no coordination= is
    FRAMEWORK_MANAGED."""
    app = zl.Application()
    app.user_spot("r.Wide")(Room)
    app.user_spot("r.Lanes", mode=zl.SpotFactoryMode.PER_ACTOR)(Hall)
    app.instance_spot("r.Counter")(Counter)
    app.actor("r.Member")(Member)
    registry = app.freeze()
    types = registry.spot_types
    assert zl.disable_relocation() == types[zl.StableTypeName("r.Wide")].relocation
    assert zl.recreate_on_relocation() == types[zl.StableTypeName("r.Lanes")].relocation
    assert zl.disable_relocation() == types[zl.StableTypeName("r.Counter")].relocation
    assert zl.disable_relocation() == registry.actor_types[zl.StableTypeName("r.Member")].relocation
    assert zl.disable_relocation() == registry.entry_type.relocation
    for name in ("r.Wide", "r.Lanes"):
        coordination = types[zl.StableTypeName(name)].coordination
        assert zl.RelocationCoordinationMode.FRAMEWORK_MANAGED == coordination


@pytest.mark.spec("RELOC-3")
async def test_an_adapter_that_does_not_fit_its_type_fails_start_up_before_the_store() -> None:
    """A Spot adapter on an Actor, an Actor adapter on a Spot, a class that is no adapter, an
    adapter of another Spot class (declared so by it or by the adapter it extends), one with a
    method left undefined or not async, and one that needs constructor arguments: each is one
    problem of the one ConfigurationError, raised before the (unreachable) store is touched."""

    class Sync(zl.SpotRelocationAdapter[Room]):
        def capture(self, target: Room) -> bytes:  # type: ignore[override]  # misuse under test
            return b""

        async def restore(self, target: Room, payload: bytes) -> None:
            pass

    class Half(zl.ActorRelocationAdapter[Member]):
        async def capture(self, target: Member) -> bytes:
            return b""

    class Needs(RoomState):
        def __init__(self, size: int) -> None:
            self.size = size

    class Later(RoomState):
        pass

    app = zl.Application()
    app.actor("r.A1", relocation=zl.preserve_state_with(RoomState))(Member)
    app.user_spot("r.S1", relocation=zl.preserve_state_with(MemberState))(Room)
    app.instance_spot("r.S2", relocation=zl.preserve_state_with(dict))(Counter)
    app.user_spot("r.S3", relocation=zl.preserve_state_with(RoomState))(Hall)
    app.user_spot("r.S4", relocation=zl.preserve_state_with(Sync))(Room)
    app.actor("r.A2", relocation=zl.preserve_state_with(Half))(type("Other", (Member,), {}))
    app.user_spot("r.S5", relocation=zl.preserve_state_with(Needs))(type("Sub", (Room,), {}))
    app.user_spot("r.S6", relocation=zl.preserve_state_with(Later))(type("Aisle", (Hall,), {}))
    error = await start_fails(app)
    problems = sorted(error.problems)
    assert 8 == len(problems), problems
    expected = [
        ("r.A1", "not a subclass of zl.ActorRelocationAdapter"),
        ("r.A2", "does not define restore"),
        ("r.S1", "not a subclass of zl.SpotRelocationAdapter"),
        ("r.S2", "not a subclass of zl.SpotRelocationAdapter"),
        ("r.S3", "adapts Room, which Hall does not extend"),
        ("r.S4", "capture must be an async def"),
        ("r.S5", "cannot be made without arguments"),
        ("r.S6", "adapts Room, which Aisle does not extend"),
    ]
    assert [name for name, _ in expected] == [problem.split(": ")[0] for problem in problems]
    for (_, text), problem in zip(expected, problems, strict=True):
        assert text in problem, problem


@pytest.mark.spec("RELOC-3")
def test_an_adapter_that_fits_passes_start_up_validation() -> None:
    """An adapter of the declared class, of one of its bases, or of a subclass's generic base
    is accepted."""

    class Again(RoomState):
        pass

    app = zl.Application()
    app.user_spot("r.Exact", relocation=zl.preserve_state_with(RoomState))(Room)
    app.user_spot("r.Base", relocation=zl.preserve_state_with(AnySpotState))(Hall)
    app.user_spot("r.Sub", relocation=zl.preserve_state_with(Again))(type("Sub", (Room,), {}))
    app.actor("r.Member", relocation=zl.preserve_state_with(MemberState))(Member)
    app.freeze()


@pytest.mark.spec("RELOC-24", "SPOT-80", "REG-5.8")
async def test_a_per_actor_spot_allows_only_recreate_on_relocation() -> None:
    """PER_ACTOR with disable_relocation() or preserve_state_with(...) fails start-up; with
    recreate_on_relocation() it starts; APPLICATION_SIGNALED with PER_ACTOR fails too (now given
    as coordination=), each a problem of the same error."""
    app = zl.Application()
    per_actor = zl.SpotFactoryMode.PER_ACTOR
    app.user_spot("r.Off", mode=per_actor, relocation=zl.disable_relocation())(Room)
    app.user_spot("r.Kept", mode=per_actor, relocation=zl.preserve_state_with(RoomState))(
        type("Kept", (Room,), {})
    )
    app.user_spot(
        "r.Signal",
        mode=per_actor,
        coordination=zl.RelocationCoordinationMode.APPLICATION_SIGNALED,
        relocation=zl.recreate_on_relocation(),
    )(Hall)
    error = await start_fails(app)
    problems = sorted(error.problems)
    assert 3 == len(problems), problems
    assert ["r.Kept", "r.Off", "r.Signal"] == [problem.split(": ")[0] for problem in problems]
    assert "only recreate_on_relocation()" in problems[0]
    assert "only recreate_on_relocation()" in problems[1]
    assert "APPLICATION_SIGNALED" in problems[2]
    fine = zl.Application()
    fine.user_spot("r.Lanes", mode=per_actor, relocation=zl.recreate_on_relocation())(Room)
    assert zl.recreate_on_relocation() == spot_type(fine, "r.Lanes").relocation  # type: ignore[attr-defined]  # a SpotType
