"""Declarations are validated once, at start-up, before the store is touched
(specs/registration.md, SPOT-66, SPOT-79, SPOT-80)."""

from __future__ import annotations

import uuid

import attrs
import pytest

import zlink_trio as zl
from tests.members import NoMembers

UNREACHABLE_DSN = "postgresql://nobody@127.0.0.1:9/none"
"""Port 9 (discard) has no PostgreSQL: a host that touched the store would fail differently."""


def config(dsn: str = UNREACHABLE_DSN, **values: object) -> zl.HostConfig:
    return zl.HostConfig(mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=dsn, **values)  # type: ignore[arg-type]  # test values


@attrs.frozen
class Ping:
    pass


@attrs.frozen
class Pong:
    pass


@attrs.frozen
class Stray:
    pass


@attrs.frozen
class Extra:
    pass


async def start(app: zl.Application, dsn: str = UNREACHABLE_DSN) -> zl.ConfigurationError:
    with pytest.raises(zl.ConfigurationError) as caught:
        async with zl.open_host(app, config(dsn)):
            pytest.fail("a host started from an invalid declaration")
    return caught.value


@pytest.mark.spec("REG-5.1", "REG-5.4", "REG-5.5", "REG-5.6", "REG-5.11", "REG-5.12", "REG-7.2")
async def test_every_contradiction_is_listed_in_one_error_before_the_store() -> None:
    """Duplicate names, duplicate handlers, handlers of undeclared messages, request handlers
    without or with an undeclared reply type: all listed in one ConfigurationError, raised
    before the (unreachable) store is touched, and nothing starts."""
    app = zl.Application()
    app.message("reg.Ping")(Ping)
    app.message("reg.Pong")(Pong)
    app.message("reg.Extra")(Extra)

    @app.user_spot("reg.Ping")
    class Clash(NoMembers):
        pass

    @app.user_spot("reg.Room")
    class Room(NoMembers):
        @zl.packet_handler(Ping)
        async def one(self, msg: Ping) -> None: ...

        @zl.packet_handler(Ping)
        async def two(self, msg: Ping) -> None: ...

        @zl.packet_handler(Stray)
        async def stray(self, msg: Stray) -> None: ...

        @zl.request_handler(Pong)
        async def no_reply(self, req: Pong):  # type: ignore[no-untyped-def]  # missing on purpose
            return None

        @zl.request_handler(Extra, reply=Stray)
        async def undeclared_reply(self, req: Extra) -> Stray:
            return Stray()

    error = await start(app)
    assert 5 == len(error.problems), error.problems
    joined = " ".join(error.problems)
    for named in ("reg.Ping", "stray", "no_reply", "one", "two", "undeclared_reply"):
        assert named in joined


@pytest.mark.parametrize("form", ["messages", "spots", "actors", "message and actor"])
@pytest.mark.spec("REG-5.4")
def test_a_stable_name_declared_twice_fails_validation(form: str) -> None:
    """One stable type name given to two message classes, two Spot types, two Actor types or a
    message and an Actor type: validation names it as declared twice."""
    app = zl.Application()
    first, second = (
        attrs.frozen(type("First", (), {"__annotations__": {}})),
        attrs.frozen(type("Second", (), {"__annotations__": {}})),
    )
    if form == "messages":
        app.message("reg.Same")(first)
        app.message("reg.Same")(second)
    elif form == "spots":
        app.user_spot("reg.Same")(type("One", (NoMembers,), {}))
        app.instance_spot("reg.Same")(type("Two", (zl.InstanceSpot,), {}))
    elif form == "actors":
        app.actor("reg.Same")(type("One", (zl.Actor,), {}))
        app.actor("reg.Same")(type("Two", (zl.Actor,), {}))
    else:
        app.message("reg.Same")(first)
        app.actor("reg.Same")(type("One", (zl.Actor,), {}))
    with pytest.raises(zl.ConfigurationError) as caught:
        app.freeze()
    assert ["reg.Same is declared twice"] == [
        problem.split(" (")[0] for problem in caught.value.problems
    ]


@pytest.mark.spec("REG-5.5")
def test_two_timer_handlers_with_one_name_fail_validation() -> None:
    """Two methods of one Spot type declared as handlers of the same timer name are a
    contradiction listed by validation."""
    app = zl.Application()

    @app.user_spot("reg.Ticking")
    class Ticking(NoMembers):
        @zl.timer_handler("beat")
        async def one(self, tick: zl.TimerTick) -> None: ...

        @zl.timer_handler("beat")
        async def two(self, tick: zl.TimerTick) -> None: ...

    with pytest.raises(zl.ConfigurationError) as caught:
        app.freeze()
    assert 1 == len(caught.value.problems)
    assert "two handlers for timer 'beat'" in caught.value.problems[0]


@pytest.mark.spec("SPOT-80")
async def test_application_signaled_with_per_actor_fails_validation() -> None:
    """APPLICATION_SIGNALED declared with PER_ACTOR is a start-up contradiction."""
    app = zl.Application()

    @app.user_spot(
        "reg.Lanes",
        mode=zl.SpotFactoryMode.PER_ACTOR,
        coordination=zl.RelocationCoordinationMode.APPLICATION_SIGNALED,
    )
    class Lanes(NoMembers):
        pass

    error = await start(app)
    assert any("APPLICATION_SIGNALED" in problem for problem in error.problems)


@pytest.mark.spec("REG-5.10")
def test_decorators_refuse_bad_arguments_at_once() -> None:
    """A bad stable name, a non-attrs message, a class of the wrong base, a sync handler or a
    handler with the wrong arity is refused by the decorator itself."""
    app = zl.Application()
    with pytest.raises(ValueError):
        app.message("")
    with pytest.raises(ValueError):
        app.user_spot("x" * 256)
    with pytest.raises(TypeError):
        app.message("reg.Plain")(type("Plain", (), {}))
    with pytest.raises(TypeError):
        app.user_spot("reg.Wrong")(type("Wrong", (zl.InstanceSpot,), {}))
    with pytest.raises(TypeError):
        app.instance_spot("reg.Wrong2")(type("Wrong2", (zl.Spot,), {}))
    with pytest.raises(TypeError):
        app.user_spot("reg.Mode", mode="spot_wide")  # type: ignore[arg-type]  # misuse under test
    with pytest.raises(TypeError):

        @zl.packet_handler(Ping)
        def sync(self: object, msg: Ping) -> None: ...

    with pytest.raises(TypeError):

        @zl.packet_handler(Ping)
        async def arity(self: object) -> None: ...

    with pytest.raises(TypeError):
        zl.packet_handler("reg.Ping")  # type: ignore[arg-type]  # misuse under test


@pytest.mark.spec("REG-5.2", "REG-5.3", "REG-7.1")
async def test_a_started_application_is_frozen(store_dsn: str) -> None:
    """After a host started, declaring on the application raises ConfigurationError, and a
    second host serves the same declarations."""
    app = zl.Application()
    app.message("reg.Ping")(Ping)
    app.message("reg.Pong")(Pong)

    @app.user_spot("reg.Room")
    class Room(NoMembers):
        @zl.request_handler(Ping)
        async def ping(self, req: Ping) -> Pong:
            return Pong()

    async with zl.open_host(app, config(store_dsn)) as host:
        with pytest.raises(zl.ConfigurationError):
            app.message("reg.Late")(Stray)
        with pytest.raises(zl.ConfigurationError):
            app.instance_spot("reg.Late")
        await host.spots.get_or_create("r", "reg.Room").submit()
        assert Pong() == await host.route.request_to_spot("r", Ping(), reply_type=Pong).submit()
    async with zl.open_host(app, config(store_dsn)) as again:
        await again.spots.get_or_create("r", "reg.Room").submit()
        assert Pong() == await again.route.request_to_spot("r", Ping(), reply_type=Pong).submit()


@pytest.mark.spec("REG-8.1")
def test_app_job_queue_size_outside_its_range_is_a_configuration_error() -> None:
    """app_job_queue_size outside 1..2,147,483,647 or not an int raises ConfigurationError."""
    for bad in (0, -1, 2**31, 1.5, True):
        with pytest.raises(zl.ConfigurationError):
            config(app_job_queue_size=bad)
    assert 2**31 - 1 == config(app_job_queue_size=2**31 - 1).app_job_queue_size
    assert 1 == config(app_job_queue_size=1).app_job_queue_size


@pytest.mark.spec("REG-5.11")
def test_every_bad_host_setting_is_listed_together() -> None:
    """Several bad HostConfig values are all listed in one ConfigurationError."""
    with pytest.raises(zl.ConfigurationError) as caught:
        zl.HostConfig(
            mesh="",
            request_timeout=0,
            closing_timeout=float("inf"),
            instance_idle_timeout=-1,
            app_job_queue_size=0,
        )
    assert 5 == len(caught.value.problems)


@pytest.mark.spec("SPOT-66", "SPOT-79")
def test_a_user_spot_defaults_to_spot_wide_and_framework_managed() -> None:
    """A User Spot declared without options is SPOT_WIDE and FRAMEWORK_MANAGED."""
    app = zl.Application()

    @app.user_spot("reg.Plain")
    class Plain(NoMembers):
        pass

    registry = app.freeze()
    declared = registry.spot_types[zl.StableTypeName("reg.Plain")]
    assert zl.SpotFactoryMode.SPOT_WIDE == declared.mode
    assert zl.RelocationCoordinationMode.FRAMEWORK_MANAGED == declared.coordination


@pytest.mark.spec("REG-5.9", "REG-5.11")
async def test_a_spot_class_without_its_membership_callbacks_fails_validation() -> None:
    """A User Spot class must define on_actor_join, on_joined_actor and on_leave_actor, an Entry
    Spot class on_joined_actor and on_leave_actor (the bases leave them abstract): each class
    that lacks one is listed with exactly the callbacks it lacks, in one error, before the
    store; one that has them from a base of its own passes."""
    app = zl.Application()

    @app.user_spot("reg.Bare")
    class Bare(zl.Spot):
        pass

    @app.user_spot("reg.Deciding")
    class Deciding(zl.Spot):
        async def on_actor_join(
            self, actor_id: zl.ActorId, request: object
        ) -> zl.SpotActorJoinResult:
            return zl.SpotActorJoinResult.accept()

    @app.user_spot("reg.Inherited")
    class Inherited(NoMembers):
        pass

    @app.entry_spot
    class Lobby(zl.EntrySpot):
        async def on_joined_actor(self, actor: object) -> None: ...

    error = await start(app)
    assert 3 == len(error.problems), error.problems
    bare, deciding, lobby = (
        next(p for p in error.problems if name in p) for name in ("Bare", "Deciding", "Lobby")
    )
    assert "on_actor_join, on_joined_actor, on_leave_actor" in bare
    assert "on_joined_actor, on_leave_actor" in deciding
    assert "on_actor_join" not in deciding
    assert "on_leave_actor" in lobby
    assert "on_joined_actor" not in lobby
    assert not any("Inherited" in problem for problem in error.problems)


@pytest.mark.spec("REG-5.9")
def test_an_application_without_an_entry_spot_runs_the_frameworks_own() -> None:
    """Without a declared Entry Spot the registry holds the framework's own, which defines
    every membership callback (so it passes the check a declared one must pass)."""
    app = zl.Application()
    registry = app.freeze()
    entry = registry.entry_type.cls
    assert issubclass(entry, zl.EntrySpot)
    for name in ("on_joined_actor", "on_leave_actor"):
        assert not getattr(getattr(entry, name), "__isabstractmethod__", False)
