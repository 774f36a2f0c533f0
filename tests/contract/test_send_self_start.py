"""A Spot's send to itself from a turn whose end it would wait for never waits: to its own next
incarnation or creation it ends at once (specs/completion.md CMP-7.12), into its own full
mailbox it is admitted past the limit (specs/decisions.md DEC-32). Each case runs in a process
of its own (self_start.py), so that a regression, a wait that never ends, fails the test
instead of hanging it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import trio

from zlink_trio._integration.store import DSN_VARIABLE

HERE = Path(__file__).resolve().parent
RUN_TIMEOUT = 60.0


async def _run(store_dsn: str, case: str) -> dict[str, object]:
    """What ``self_start.py`` printed for ``case``; fails if it ran longer than RUN_TIMEOUT."""
    environ = {name: value for name, value in os.environ.items() if name != DSN_VARIABLE}
    with trio.move_on_after(RUN_TIMEOUT) as bound:  # the child is killed if it still runs
        done = await trio.run_process(
            [sys.executable, str(HERE / "self_start.py"), store_dsn, case],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=environ,
        )
    assert not bound.cancelled_caught, f"{case}: the host hung, the send waited for itself"
    assert 0 == done.returncode, done.stderr.decode()
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.spec("CMP-7.12", "SPOT-90")
async def test_a_user_spot_sending_to_itself_from_its_start_up_is_unavailable_at_once(
    store_dsn: str,
) -> None:
    """on_initialize sends to the Spot's own id: the Spot is not Ready and its creation waits
    for that very turn, so the send ends UNAVAILABLE at once, the creation completes and
    nothing of the send is handled (rather than both waiting until the creation's deadline,
    or for good)."""
    assert {"status": "CREATED", "seen": ["UNAVAILABLE"]} == await _run(store_dsn, "start-up")


@pytest.mark.spec("CMP-7.12", "SPOT-47")
async def test_an_instance_spot_sending_to_its_next_incarnation_from_on_closing_is_unavailable(
    store_dsn: str,
) -> None:
    """on_closing sends with instance_spot() to the Spot's own id: the next incarnation starts
    only once this one has closed, which waits for on_closing, so the send ends UNAVAILABLE at
    once (rather than holding the close past its deadline)."""
    assert {"seen": ["UNAVAILABLE"]} == await _run(store_dsn, "closing")


@pytest.mark.spec("DEC-32")
async def test_a_control_turn_sending_to_its_own_full_mailbox_is_admitted_past_the_limit(
    store_dsn: str,
) -> None:
    """A PER_ACTOR Spot's on_actor_join (a control turn holding the Spot's gate) sends to the
    Spot three messages with a mailbox of one: each is admitted at once, past the limit, since
    only the end of that turn lets the Spot serve them; then all three are handled."""
    result = await _run(store_dsn, "control")
    seen = result["seen"]
    assert isinstance(seen, list)
    assert ["sent 0", "sent 1", "sent 2"] == seen[:3]  # none waited for room
    assert ["handled 0", "handled 1", "handled 2"] == [s for s in seen if s.startswith("handled")]
    assert "join ACCEPTED" in seen
