"""The hypothesis stateful harness of the testing kit (specs/testing.md KIT-6, KIT-7): a model of a
sample counter Spot runs green, a planted bug is found and shrunk with the hosts' recent events,
every example's hosts are shut down, and Trio's scheduling order follows a seed; an example's
background tasks and host restarts (KIT-11)."""

from __future__ import annotations

import re
import uuid
from typing import Any, ClassVar

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio.testing import HostStateMachine, seeded_scheduling, stateful
from zlink_trio.testing import hosts as kit_hosts
from zlink_trio.testing.scheduling import trio_random

SPOT_IDS = ("a",)
vault: dict[str, int] = {}
"""Where a counter keeps its count while it is closed (a stand-in for the application's DB)."""


@attrs.frozen
class Add:
    amount: int


@attrs.frozen
class Read:
    pass


@attrs.frozen
class Count:
    value: int


class Counter(NoMembers):
    """Counts what it is sent; keeps the count in ``vault`` across close and re-create."""

    def __init__(self) -> None:
        self.value = 0

    async def on_create(self, request: object | None) -> zl.SpotCreateResponse:
        self.value = vault.get(self.context.spot_id.value, 0)
        return zl.SpotCreateResponse.accept()

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        vault[self.context.spot_id.value] = self.value

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        await trio.lowlevel.checkpoint()
        self.value += msg.amount

    @zl.request_handler(Read)
    async def read(self, req: Read) -> Count:
        return Count(self.value)


class Tally(zl.Actor):
    """An Actor that counts what it is sent."""

    def __init__(self) -> None:
        self.value = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount


class ForgetfulCounter(Counter):
    """The planted bug: closing forgets to keep the count, so a re-created counter starts at 0."""

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        pass


def _app(counter: type[Counter]) -> zl.Application:
    app = zl.Application()
    for name, cls in (("kit.Add", Add), ("kit.Read", Read), ("kit.Count", Count)):
        app.message(name)(cls)
    app.user_spot("kit.Counter")(counter)
    app.actor("kit.Tally")(Tally)
    return app


app = _app(Counter)
buggy_app = _app(ForgetfulCounter)


class Counters(HostStateMachine):
    """Counters on one host: get_or_create, send, close and get_or_create again; every live
    counter holds what the model counted."""

    app = app
    examples: ClassVar[list[list[str]]] = []
    """The events of every example run (a test's view of what the hosts reported)."""

    def __init__(self) -> None:
        super().__init__()
        vault.clear()
        self.counts: dict[str, int] = {}
        """What every counter ever made should hold, live or closed."""
        self.live: dict[str, zl.SpotRef] = {}
        self.made: list[str] = []
        """Ids of counters made by ``create``, in the order they were made."""

    def _live_ids(self) -> list[str]:
        return [spot_id for spot_id in [*SPOT_IDS, *self.made] if spot_id in self.live]

    @rule(spot_id=st.sampled_from(SPOT_IDS))
    def get_or_create(self, spot_id: str) -> None:
        result = self.run(self.host.spots.get_or_create(spot_id, "kit.Counter").submit)
        expected = zl.SpotCreateStatus.EXISTING if spot_id in self.live else None
        assert (expected or zl.SpotCreateStatus.CREATED) == result.status
        self.live[spot_id] = result.spot_ref
        self.counts.setdefault(spot_id, 0)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), amount=st.integers(1, 3))
    def add(self, data: st.DataObject, amount: int) -> None:
        spot_id = data.draw(st.sampled_from(self._live_ids()))
        assert self.run(self.host.route.send_to_spot(spot_id, Add(amount)).submit) is None
        self.counts[spot_id] += amount

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        spot_id = data.draw(st.sampled_from(self._live_ids()))
        assert self.run(self.host.spots.close, self.live.pop(spot_id)) is True

    @invariant()
    def every_live_counter_holds_its_count(self) -> None:
        async def read_all() -> dict[str, int]:
            counts = {}
            for spot_id in self._live_ids():
                call = self.host.route.request_to_spot(spot_id, Read(), reply_type=Count)
                counts[spot_id] = (await call.submit()).value
            return counts

        assert {spot_id: self.counts[spot_id] for spot_id in self.live} == self.run(read_all)

    def teardown(self) -> None:
        Counters.examples.append(list(self.events))
        super().teardown()


class CounterModel(Counters):
    """The counters under more rules: create with a fresh id, request, wait for quiet."""

    @rule()
    def create(self) -> None:
        result = self.run(self.host.spots.create("kit.Counter").submit)
        spot_id = result.spot_ref.spot_id.value
        self.made.append(spot_id)
        self.live[spot_id] = result.spot_ref
        self.counts[spot_id] = 0

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        spot_id = data.draw(st.sampled_from(self._live_ids()))
        call = self.host.route.request_to_spot(spot_id, Read(), reply_type=Count)
        assert Count(self.counts[spot_id]) == self.run(call.submit)

    @rule()
    def quiet(self) -> None:
        self.wait_quiet()
        assert [] == self.host.busy()


def _settings(examples: int, steps: int = 8) -> settings:
    """Bounded and stable: a fixed seed, no example database, no explain phase (it would rerun
    the shrunk example many times only to annotate it), one bug reported."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )


def _no_host_left() -> None:
    """Every example's hosts were shut down: none is open in the kit's registry, and the
    harness's loop holds no task but the store it joined."""
    assert {} == kit_hosts._open
    loop = stateful.harness_loop()

    async def held() -> list[str]:
        await trio.testing.wait_all_tasks_blocked()
        this = trio.lowlevel.current_task()
        return [task.name for task in loop.nursery.child_tasks if task is not this]

    tasks = loop.call(held, timeout=10.0)
    assert not [name for name in tasks if "HostStateMachine" in name], tasks


@pytest.mark.spec("KIT-6")
def test_a_correct_counter_keeps_the_model_over_many_examples(store_dsn: str) -> None:
    """Every example opens its own host, runs the rules through ``self.run`` and shuts down."""
    CounterModel.dsn = store_dsn
    Counters.examples = []
    run_state_machine_as_test(CounterModel, settings=_settings(15))
    assert 15 <= len(Counters.examples)
    events = [line for example in Counters.examples for line in example]
    # The hosts reported admissions, turns and completions, and the harness its runs.
    for pattern in (
        r"admitted send Add to Spot [\w-]+#\d+",
        r"admitted request Read \(call \d+\) to Spot",
        r"turn add of Spot [\w-]+#\d+ starts",
        r"turn read of Spot [\w-]+#\d+ ends",
        r"call \d+ completed: reply Count",
        r"run \w+",
    ):
        assert any(re.fullmatch(pattern + ".*", line) for line in events), pattern
    _no_host_left()


@pytest.mark.spec("KIT-6")
def test_an_example_opens_its_hosts_on_first_use_only(store_dsn: str) -> None:
    """A machine whose example never reaches a step opens no host (hypothesis runs many such
    examples); the first use of ``self.host`` opens the example's mesh, teardown closes it."""
    CounterModel.dsn = store_dsn
    idle = CounterModel()
    assert {} == kit_hosts._open
    idle.teardown()
    used = CounterModel()
    assert {} == kit_hosts._open
    mesh = used.mesh[0].mesh.value
    assert [mesh] == list(kit_hosts._open)
    assert used.mesh[0] is used.host
    assert used.mesh is used.mesh  # opened once
    used.teardown()
    _no_host_left()


class ForgetfulModel(Counters):
    app = buggy_app


@pytest.mark.spec("KIT-6", "KIT-7")
def test_a_planted_bug_is_found_shrunk_and_reported_with_the_hosts_events(store_dsn: str) -> None:
    """A counter that loses its count when closed and re-created: hypothesis finds it, shrinks
    it to get_or_create, add, close, get_or_create (and the scheduling seed), and the report
    carries the hosts' recent events of that shrunk example."""
    ForgetfulModel.dsn = store_dsn
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(ForgetfulModel, settings=_settings(50, steps=10))
    report = "\n".join(getattr(caught.value, "__notes__", []))
    lines = re.findall(r"^state\.(\w+)\(", report, re.MULTILINE)
    assert "teardown" == lines[-1], report
    steps = [name for name in lines[:-1] if name != "every_live_counter_holds_its_count"]
    # Alone it shrinks to the minimum (seed, get_or_create, add, close, get_or_create); late in a
    # full CI run it was seen to stop two steps short (a close and a get_or_create more), on two
    # Pythons alike. Either is short; an unshrunk failure of this machine runs up to 10 rules.
    assert 4 <= len(steps) <= 8, report
    assert "seed_scheduling" == steps[0], report
    assert {"get_or_create", "add", "close"} == set(steps[1:]), report
    events = report[report.index("recent events of the hosts") :]
    # The re-created counter is a new incarnation: its generation differs from the first one's.
    generations = set(re.findall(r"of Spot (\w+#\d+) starts", events))
    assert 2 <= len(generations), events
    assert re.search(r"turn add of Spot \w+#\d+ starts", events), events
    assert re.search(r"call \d+ completed: reply Count", events), events
    _no_host_left()


class TwoHosts(HostStateMachine):
    """A counter on the second host, called from the first; an Actor on the first."""

    app = app
    hosts = 2
    reports: ClassVar[list[list[str]]] = []

    @initialize()
    def place(self) -> None:
        vault.clear()  # a counter closed by an earlier example's shutdown kept its count there
        self.tally = f"tally-{uuid.uuid4().hex[:12]}"  # Actor ids are global in the store
        self.run(self.mesh[1].spots.get_or_create("a", "kit.Counter").submit)
        self.run(self.host.actors.get_or_create(self.tally, "kit.Tally").submit)
        self.total = 0
        self.read_remotely()  # every example has a remote request and an Actor turn
        self.tell_the_actor()

    @rule()
    def add_remotely(self) -> None:
        self.run(self.host.route.send_to_spot("a", Add(1)).submit)
        self.total += 1

    @rule()
    def read_remotely(self) -> None:
        call = self.host.route.request_to_spot("a", Read(), reply_type=Count)
        assert Count(self.total) == self.run(call.submit)

    @rule()
    def tell_the_actor(self) -> None:
        self.run(self.host.route.send_to_actor(self.tally, Add(1)).submit)

    def teardown(self) -> None:
        self.wait_quiet()
        TwoHosts.reports.append(list(self.events))
        super().teardown()


@pytest.mark.spec("KIT-6")
def test_a_mesh_reports_remote_calls_and_actor_turns_per_host(store_dsn: str) -> None:
    """With two hosts, each host's lines carry its index; a remote send and request show on
    both sides, an Actor's admissions and turns on its host."""
    TwoHosts.dsn = store_dsn
    TwoHosts.reports = []
    run_state_machine_as_test(TwoHosts, settings=_settings(4, steps=6))
    events = [line for report in TwoHosts.reports for line in report]
    for pattern in (
        r"host 0: admitted send kit.Add to a at node-\w+ \(remote\)",
        r"host 1: admitted send Add to Spot a#\d+",
        r"host 1: turn add of Spot a#\d+ ends",
        r"host 0: request kit.Read to a at node-\w+ \(remote\)",
        r"host 1: call \d+ completed: reply Count",
        r"host 0: reply kit.Count from a \(remote\)",
        r"host 0: admitted send Add to Actor tally-\w+",
        r"host 0: turn add of Actor tally-\w+ starts",
        r"host 0: turn add of Actor tally-\w+ ends",
    ):
        assert any(re.fullmatch(pattern, line) for line in events), pattern
    _no_host_left()


async def _interleave(tasks: int = 4, steps: int = 6) -> list[str]:
    """A pure-Trio workload: tasks that append to one list across checkpoints."""
    order: list[str] = []

    async def worker(name: str) -> None:
        for step in range(steps):
            order.append(f"{name}{step}")
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for index in range(tasks):
            nursery.start_soon(worker, chr(ord("a") + index))
    return order


@pytest.mark.spec("KIT-7")
def test_the_seed_fixes_the_scheduling_order_in_the_harness_loop() -> None:
    """The same seed gives the same order twice; some other seed gives another order."""
    # A loop of its own, holding no pool: a store notification arriving in the middle (from
    # an earlier test's writes) would wake a task that draws from the same random.
    stateful.stop_harness_loop()
    loop = stateful.harness_loop()

    def order(seed: int) -> list[str]:
        with seeded_scheduling(seed):
            result: list[str] = loop.call(_interleave, timeout=10.0)
            return result

    first = order(1)
    assert first == order(1)
    assert sorted(first) == sorted(order(2))
    assert any(order(seed) != first for seed in range(2, 12))


async def _first_draw() -> float:
    """The first number Trio's scheduling random gives within a step, before anything else in
    the loop can draw from it (no checkpoint in between)."""
    return trio_random().random()


class SchedulingModel(HostStateMachine):
    """Reads, in one step per example, where Trio's scheduling random stands as the step starts."""

    app = app
    seen: ClassVar[list[tuple[int, float]]] = []

    @rule()
    def draw(self) -> None:
        seed = int(next(line for line in self.events if "scheduling seed" in line).split()[-1])
        SchedulingModel.seen.append((seed, self.run(_first_draw)))


@pytest.mark.spec("KIT-7")
def test_each_example_seeds_the_scheduling_random_in_the_harness_loop(store_dsn: str) -> None:
    """Under hypothesis the seed comes from the example: a step's scheduling random is the same
    for the same seed, differs between examples, and a second run replays the first. (That this
    random decides Trio's order is the test above; with hosts open, tasks woken by their I/O
    also draw from it, which is why the check is made where nothing else can draw.)"""
    SchedulingModel.dsn = store_dsn
    runs: list[list[tuple[int, float]]] = []
    for _ in range(2):
        SchedulingModel.seen = []
        run_state_machine_as_test(SchedulingModel, settings=_settings(8, steps=2))
        runs.append(SchedulingModel.seen)
    assert runs[0] == runs[1]
    by_seed: dict[int, float] = {}
    for seed, drawn in runs[0]:
        assert by_seed.setdefault(seed, drawn) == drawn, seed
    assert 3 <= len(set(by_seed.values())), by_seed


class Stuck(HostStateMachine):
    app = app
    step_timeout = 0.2

    @initialize()
    def hang(self) -> None:
        self.run(trio.sleep_forever)

    @rule()
    def idle(self) -> None:
        pass


@pytest.mark.spec("KIT-6")
def test_a_step_that_never_ends_fails_in_time_and_the_harness_goes_on(store_dsn: str) -> None:
    """A step past ``step_timeout`` raises ``trio.TooSlowError``; the example is torn down, and
    the next machine runs on the same loop."""
    Stuck.dsn = store_dsn
    with pytest.raises(trio.TooSlowError):
        run_state_machine_as_test(Stuck, settings=_settings(1, steps=1))
    _no_host_left()
    failing = RuntimeError("raised inside the loop")

    async def fail() -> Any:
        raise failing

    with pytest.raises(RuntimeError) as caught:
        stateful.harness_loop().call(fail, timeout=1.0)
    assert failing is caught.value
    assert 3 == stateful.harness_loop().call(_three, timeout=1.0)


async def _three() -> int:
    await trio.lowlevel.checkpoint()
    return 3


@pytest.mark.spec("KIT-6")
def test_the_harness_loop_stops_and_a_later_use_starts_another() -> None:
    """The end of a session (or interpreter exit) stops the loop's thread; the next use starts
    a new loop."""
    first = stateful.harness_loop()
    stateful.stop_harness_loop()
    assert not first.alive
    second = stateful.harness_loop()
    assert second is not first
    assert 3 == second.call(_three, timeout=1.0)


class Background(HostStateMachine):
    """Driven step by step by the tests below (hypothesis asks for one rule)."""

    app = app

    @rule()
    def idle(self) -> None:
        pass


@pytest.mark.spec("KIT-11")
def test_a_background_task_outlives_its_step_and_teardown_cancels_what_still_runs(
    store_dsn: str,
) -> None:
    """``start_soon`` returns while its task still waits; the task goes on across steps, and
    the one still waiting at teardown is cancelled there, before the host shuts down."""
    Background.dsn = store_dsn
    machine = Background()
    released, never = trio.Event(), trio.Event()
    seen: list[str] = []

    async def waiter(name: str, event: trio.Event) -> None:
        try:
            await event.wait()
            seen.append(f"{name} released")
        except trio.Cancelled:
            down = machine.host.host._tree.finished.is_set()
            seen.append(f"{name} cancelled, host shut down: {down}")
            raise

    async def release() -> None:
        released.set()
        await trio.testing.wait_all_tasks_blocked()

    try:
        machine.start_soon(waiter, "first", released)
        machine.start_soon(waiter, "second", never)
        assert [] == seen
        machine.run(release)
        assert ["first released"] == seen
    finally:
        machine.teardown()
    assert ["first released", "second cancelled, host shut down: False"] == seen
    _no_host_left()


@pytest.mark.spec("KIT-11")
def test_a_background_task_error_fails_the_example_at_teardown(store_dsn: str) -> None:
    Background.dsn = store_dsn
    machine = Background()
    planted = LookupError("planted in a background task")

    async def broken() -> None:
        await trio.lowlevel.checkpoint()
        raise planted

    machine.start_soon(broken)
    machine.run(trio.testing.wait_all_tasks_blocked)
    with pytest.raises(LookupError) as caught:
        machine.teardown()
    assert planted is caught.value
    _no_host_left()


class Restarts(Background):
    hosts = 2


@pytest.mark.spec("KIT-11")
def test_a_restarted_host_is_a_new_run_in_its_place_while_the_other_serves_on(
    store_dsn: str,
) -> None:
    """``restart_host(0)`` replaces host 0 by a new run of the same mesh that both hosts list
    as a peer; a Spot on host 1 keeps its count across it, and the barrier counts only the new
    run (the old one's traffic would keep it busy)."""
    Restarts.dsn = store_dsn
    machine = Restarts()
    try:
        first, second = machine.mesh.hosts
        made = machine.run(second.spots.get_or_create("kept", "kit.Counter").submit)
        assert second.node_rid == made.spot_ref.node_rid
        machine.run(first.route.send_to_spot("kept", Add(2)).submit)
        machine.wait_quiet()
        new = machine.restart_host(0)
        assert new is machine.mesh[0]
        assert new is machine.host
        assert second is machine.mesh[1]
        assert first.host._tree.finished.is_set()
        assert new.mesh == first.mesh
        assert new.node_rid != first.node_rid
        assert second.peers.get(new.node_rid) == new.node_generation
        assert new.peers.get(second.node_rid) == second.node_generation
        assert {second.node_rid, new.node_rid} == {
            host.node_rid for host in kit_hosts._open[new.mesh.value]
        }
        machine.run(new.route.send_to_spot("kept", Add(3)).submit)
        call = new.route.request_to_spot("kept", Read(), reply_type=Count)
        assert Count(5) == machine.run(call.submit)
        machine.wait_quiet()
        assert [] == new.busy()
        machine.restart_host(1)
        assert second.host._tree.finished.is_set()
        assert {new.node_rid, machine.mesh[1].node_rid} == {
            host.node_rid for host in kit_hosts._open[new.mesh.value]
        }
    finally:
        machine.teardown()
    _no_host_left()
