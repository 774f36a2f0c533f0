"""A User Spot's send to itself from its own start-up ends at once (specs/completion.md
CMP-7.12), in a process of its own (self_start.py) so that a regression, a wait that never
ends, fails the test instead of hanging it."""

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


@pytest.mark.spec("CMP-7.12", "SPOT-90")
async def test_a_user_spot_sending_to_itself_from_its_start_up_is_unavailable_at_once(
    store_dsn: str,
) -> None:
    """on_initialize sends to the Spot's own id: the Spot is not Ready and its creation waits
    for that very turn, so the send ends UNAVAILABLE at once, the creation completes and
    nothing of the send is handled (rather than both waiting until the creation's deadline,
    or for good)."""
    environ = {name: value for name, value in os.environ.items() if name != DSN_VARIABLE}
    with trio.move_on_after(RUN_TIMEOUT) as bound:  # the child is killed if it still runs
        done = await trio.run_process(
            [sys.executable, str(HERE / "self_start.py"), store_dsn],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=environ,
        )
    assert not bound.cancelled_caught, "the host hung: the send waited for its own creation"
    assert 0 == done.returncode, done.stderr.decode()
    assert {"status": "CREATED", "seen": ["UNAVAILABLE"]} == json.loads(done.stdout)
