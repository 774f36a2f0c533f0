"""Timer options through the public API (specs/timers.md)."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import zlink_trio as zl

MAX_TICKS = 2**31 - 1


@pytest.mark.spec("TIMER-1")
def test_timer_options_default_to_skip_late_ticks_with_one_catch_up_tick() -> None:
    """Omitted options mean SKIP_LATE_TICKS and max_catch_up_ticks=1."""
    options = zl.TimerOptions()
    assert zl.TimerOverrunPolicy.SKIP_LATE_TICKS is options.overrun_policy
    assert 1 == options.max_catch_up_ticks


@pytest.mark.spec("TIMER-2")
@given(st.integers(min_value=-(2**40), max_value=2**40))
@example(0)
@example(1)
@example(MAX_TICKS)
@example(MAX_TICKS + 1)  # the edges, which a draw from 2**41 values would rarely hit
def test_catch_up_bounded_accepts_exactly_1_to_2_pow_31_minus_1_ticks(ticks: int) -> None:
    """Under CATCH_UP_BOUNDED, max_catch_up_ticks must be in 1..2**31-1."""
    policy = zl.TimerOverrunPolicy.CATCH_UP_BOUNDED
    if 1 <= ticks <= MAX_TICKS:
        assert (
            ticks
            == zl.TimerOptions(overrun_policy=policy, max_catch_up_ticks=ticks).max_catch_up_ticks
        )
    else:
        with pytest.raises(ValueError, match="max_catch_up_ticks"):
            zl.TimerOptions(overrun_policy=policy, max_catch_up_ticks=ticks)


@pytest.mark.spec("TIMER-3")
@pytest.mark.parametrize(
    "policy", [zl.TimerOverrunPolicy.SKIP_LATE_TICKS, zl.TimerOverrunPolicy.DELAY_NEXT_TICK]
)
@pytest.mark.parametrize("ticks", [0, -5, 2**31, 2**40])
def test_other_policies_do_not_range_check_max_catch_up_ticks(
    policy: zl.TimerOverrunPolicy, ticks: int
) -> None:
    """A policy that does not use max_catch_up_ticks does not validate its range."""
    assert (
        ticks == zl.TimerOptions(overrun_policy=policy, max_catch_up_ticks=ticks).max_catch_up_ticks
    )


@pytest.mark.spec("TIMER-1")
def test_timer_options_refuse_values_of_the_wrong_type() -> None:
    """A policy given by name or a tick count given as text is a TypeError."""
    with pytest.raises(TypeError):
        zl.TimerOptions(overrun_policy="SKIP_LATE_TICKS")  # type: ignore[arg-type]  # the point
    with pytest.raises(TypeError):
        zl.TimerOptions(max_catch_up_ticks="3")  # type: ignore[arg-type]  # the point
    with pytest.raises(TypeError):
        zl.TimerOptions(max_catch_up_ticks=True)
    # Both fields are keyword-only: a positional value is refused, not taken as either field.
    with pytest.raises(TypeError):
        zl.TimerOptions(zl.TimerOverrunPolicy.CATCH_UP_BOUNDED)  # type: ignore[call-arg]  # the point
    with pytest.raises(TypeError):
        zl.TimerOptions(3)  # type: ignore[call-arg, arg-type]  # the point


@pytest.mark.spec("TIMER-4")
def test_overrun_policy_has_exactly_three_members() -> None:
    """TimerOverrunPolicy is SKIP_LATE_TICKS, CATCH_UP_BOUNDED and DELAY_NEXT_TICK."""
    names = {policy.name for policy in zl.TimerOverrunPolicy}
    assert {"SKIP_LATE_TICKS", "CATCH_UP_BOUNDED", "DELAY_NEXT_TICK"} == names
