"""Wire-internal call identities (specs/identifiers.md; seed 002 §10, seed 004 §6).

These never appear in a public DTO: applications that saw them would start to depend on them.

- ``OperationId``: the terminal de-duplication identity of one operation, 128 bits as two u64
  words; never both zero; equal only when both words are equal. It survives relocation.
- ``ReplyRouteId``: a non-zero u64 that links a terminal reply to the waiting entry within one
  source node lifecycle. It is not an operation identity.
- ``CallId``: the one in-flight call identifier format of the runtime, (node RID, node
  generation, reply route). A counter alone repeats after a restart; the generation makes a call
  of one run unequal to every call of another run.
"""

from __future__ import annotations

import secrets

import attrs

from zlink_trio.ids import NodeGeneration, NodeRid

__all__ = ["CallId", "OperationId", "ReplyRouteId", "is_z85_key"]

U64_MAX = 2**64 - 1

_Z85 = frozenset(
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)


def is_z85_key(value: object) -> bool:
    """Whether ``value`` is a CURVE key as text: 40 characters of the Z85 alphabet (the form
    node records publish and ``HostConfig`` takes; specs/security.md)."""
    return isinstance(value, str) and len(value) == 40 and set(value) <= _Z85


def _check_u64(name: str, value: object, *, low: int) -> None:
    if type(value) is not int:
        raise TypeError(f"{name} takes an int, not {type(value).__name__}")
    if not low <= value <= U64_MAX:
        raise ValueError(f"{name} must be in {low}..{U64_MAX}, got {value}")


@attrs.frozen(repr=False)
class OperationId:
    """Two u64 words, never both zero; compared on both words."""

    high: int
    low: int

    def __attrs_post_init__(self) -> None:
        _check_u64("OperationId.high", self.high, low=0)
        _check_u64("OperationId.low", self.low, low=0)
        if self.high == 0 and self.low == 0:
            raise ValueError("OperationId cannot have both words zero")

    @classmethod
    def new(cls) -> OperationId:
        """A random 128-bit identity (never the all-zero value)."""
        while True:
            bits = secrets.randbits(128)
            if bits:
                return cls(bits >> 64, bits & U64_MAX)

    def __repr__(self) -> str:
        return f"OperationId(0x{self.high:016x}, 0x{self.low:016x})"


@attrs.frozen(repr=False)
class ReplyRouteId:
    """A non-zero u64 naming one waiting request entry within a source node lifecycle."""

    value: int

    def __attrs_post_init__(self) -> None:
        _check_u64("ReplyRouteId", self.value, low=1)

    def __repr__(self) -> str:
        return f"ReplyRouteId({self.value})"


@attrs.frozen
class CallId:
    """The single in-flight call identifier: which node run issued the call, and its reply route."""

    node_rid: NodeRid = attrs.field(validator=attrs.validators.instance_of(NodeRid))
    node_generation: NodeGeneration = attrs.field(
        validator=attrs.validators.instance_of(NodeGeneration)
    )
    reply_route: ReplyRouteId = attrs.field(validator=attrs.validators.instance_of(ReplyRouteId))
