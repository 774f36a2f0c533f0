"""Public option enums and option values for Spots, timers and host relocation (specs/spots.md,
specs/timers.md, specs/relocation.md)."""

from __future__ import annotations

import enum

import attrs

__all__ = [
    "HostStatus",
    "RelocationCoordinationMode",
    "RelocationMode",
    "RelocationOutcome",
    "RelocationReason",
    "RelocationResult",
    "SpotFactoryMode",
    "TimerOptions",
    "TimerOverrunPolicy",
]

MAX_CATCH_UP_TICKS = 2**31 - 1
"""Largest ``max_catch_up_ticks``: the signed 32-bit maximum shared by every ZLink language."""


class SpotFactoryMode(enum.Enum):
    """How a User Spot runs its turns (seed 000)."""

    SPOT_WIDE = "spot_wide"
    """The default: one gate for the whole Spot; a turn holds it until it ends or ``yield_()``s."""
    PER_ACTOR = "per_actor"
    """Independent lanes per Actor, per timer and for the Spot; recreate-on-relocation only."""


class RelocationCoordinationMode(enum.Enum):
    """Who decides when a Spot may be relocated (seed 000)."""

    FRAMEWORK_MANAGED = "framework_managed"
    """The default: the framework picks the boundary."""
    APPLICATION_SIGNALED = "application_signaled"
    """The Spot signals ``relocation_ready().defer()``; SPOT_WIDE only."""


class RelocationReadyOutcome(enum.Enum):
    """What became of a boundary a Spot signalled with ``relocation_ready().defer()``."""

    CONTINUED = "continued"
    """No relocation took it, or the one that took it ended before its commit: the Spot goes on
    where it was."""
    RELOCATED = "relocated"
    """The Spot moved: the callback runs on the new instance on the target host."""


@attrs.frozen
class RelocationReadyCompletion:
    """What ``Spot.on_relocation_ready_completed`` is given for one signalled boundary."""

    outcome: RelocationReadyOutcome


class TimerOverrunPolicy(enum.Enum):
    """What a timer does with ticks that fell due while its handler was still running."""

    SKIP_LATE_TICKS = "skip_late_ticks"
    """The default: run once, drop the ticks that fell due meanwhile."""
    CATCH_UP_BOUNDED = "catch_up_bounded"
    """Run the late ticks in order, at most ``max_catch_up_ticks`` of them; drop older ones."""
    DELAY_NEXT_TICK = "delay_next_tick"
    """No fixed period: the next tick is due one interval after the previous tick completed."""


def _check_catch_up(options: TimerOptions, _attribute: object, value: object) -> None:
    if type(value) is not int:
        raise TypeError(f"max_catch_up_ticks takes an int, not {type(value).__name__}")
    # The range matters only where the value is used (TIMER-2): other policies ignore it.
    if options.overrun_policy is TimerOverrunPolicy.CATCH_UP_BOUNDED and not (
        1 <= value <= MAX_CATCH_UP_TICKS
    ):
        raise ValueError(f"max_catch_up_ticks must be in 1..{MAX_CATCH_UP_TICKS}, got {value}")


def _check_policy(_options: object, _attribute: object, value: object) -> None:
    if not isinstance(value, TimerOverrunPolicy):
        raise TypeError(f"overrun_policy takes a TimerOverrunPolicy, not {type(value).__name__}")


@attrs.frozen
class TimerOptions:
    """How a Spot timer treats overruns; the defaults are SKIP_LATE_TICKS with one catch-up tick."""

    overrun_policy: TimerOverrunPolicy = attrs.field(
        default=TimerOverrunPolicy.SKIP_LATE_TICKS, validator=_check_policy, kw_only=True
    )
    max_catch_up_ticks: int = attrs.field(default=1, validator=_check_catch_up, kw_only=True)


class RelocationMode(enum.IntEnum):
    """How a host relocation chooses its targets (RELOC-41): the numbers are the wire values."""

    PLANNED_MAINTENANCE = 0
    """Targets run the same application version as this host; the call names no version."""
    ROLLING_UPDATE = 1
    """Targets run exactly ``target_version``, which must be higher than this host's."""


class RelocationOutcome(enum.IntEnum):
    """How a host relocation ended (RELOC-42)."""

    RELOCATED = 0
    """Every Spot and Actor of the host was moved (or there was none); reason ``NONE``."""
    BLOCKED = 1
    """Nothing more moves; the reason says why, and the host serves on (SHUT-3.11)."""


class RelocationReason(enum.IntEnum):
    """Why a host relocation was blocked (RELOC-42); ``NONE`` only with ``RELOCATED``."""

    NONE = 0
    TARGET_UNAVAILABLE = 1
    STORE_UNAVAILABLE = 2
    RELOCATION_DISABLED = 3
    STATE_INCOMPATIBLE = 4
    DEADLINE_EXCEEDED = 5
    RELOCATION_FAILED = 6
    RUNTIME_NOT_READY = 7
    MANUAL_TOPOLOGY_UNSUPPORTED = 8
    SHUTDOWN_REQUESTED = 9
    OPERATION_IN_PROGRESS = 10


class HostStatus(enum.IntEnum):
    """Where a host is in its life (RELOC-43); only ``SERVING`` takes new Spots and Actors."""

    PREPARING = 0
    SERVING = 1
    RELOCATING = 2
    RELOCATED = 3
    DRAINING = 4
    STOPPED = 5
    ERROR = 6


@attrs.frozen
class RelocationResult:
    """What ``host.relocate()`` ended with (RELOC-42): the call's mode, the application version
    the targets had to run, the outcome and its reason."""

    mode: RelocationMode
    target_version: str
    outcome: RelocationOutcome
    reason: RelocationReason

    @property
    def relocated(self) -> bool:
        """Whether the outcome is ``RELOCATED``."""
        return self.outcome is RelocationOutcome.RELOCATED
