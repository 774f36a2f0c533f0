"""Application payloads: attrs classes by stable type name (specs/wire.md, WIRE-19..22).

Rule 1: one name per class and one class per name. Registering either twice raises ValueError;
encoding an instance of an unregistered class raises TypeError (seed 004 §5, §6).
Rule 2: a payload is one CBOR map from field name to value, shaped by the field's annotation.
The annotations that can travel, and what each decodes to:

    str, bytes, bool, None       the same CBOR type, exactly (a bool is not an int)
    int                          a CBOR integer in -2**64 .. 2**64-1
    float                        a CBOR float; an int is accepted too, and kept as it came
    list[T], tuple[T, ...]       a CBOR array, decoded to a list / a tuple
    tuple[A, B, ...]             a CBOR array of exactly that length
    dict[str, T]                 a CBOR map with text keys
    a registered attrs class     a CBOR map of its fields (the stable name is not repeated)
    A | B | ...                  a union whose members never share a CBOR type

Anything else (Any, object, sets, enums, unregistered classes) is refused with ValueError when
the plan for the class is made: on the first encode or decode, or at once by ``check()``, which
the runtime calls when a host starts. Fields with ``init=False`` do not travel.
Rule 3: a payload that is not CBOR, not a map, misses or adds a field, holds a value of the wrong
type, or is refused by the class's own validators gives ``ZLinkError(PROTOCOL_ERROR)`` whose
message names the stable type and the field (seed 003 §2).
Rule 4: decoding is bounded by the payload's own size (``shapes.py`` Rule 2).
Rule 5: a message is the same wherever its target lives. ``encode_within`` refuses a payload
over the message limit with ``ZLinkError(PROTOCOL_ERROR)`` before it is sent; ``screen`` and
``copy`` give a target on this host what a receiver on another host would get (the same type
checks, the same limit, a value of its own): the decoded copy of its encoding, or the instance
itself when it is immutable and would decode equal (``shapes.py`` Rule 4).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable

import attrs
import cbor2

from zlink_trio._wire.shapes import (
    SCALAR_SHAPES,
    ArrayShape,
    ClassPlan,
    ClassShape,
    MapShape,
    Misfit,
    RecordShape,
    Shape,
    UnionShape,
    Walk,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import StableTypeName

__all__ = ["MessageTypes"]


class _Entry:
    """One registered class; its plan is made on first use, so classes may refer to each other
    (or to themselves) in any registration order."""

    def __init__(
        self, name: StableTypeName, cls: type, make_plan: Callable[[_Entry], ClassPlan]
    ) -> None:
        self.name = name
        self.cls = cls
        self.shape = ClassShape(cls, self.plan)
        self._make_plan = make_plan
        self._plan: ClassPlan | None = None

    def plan(self) -> ClassPlan:
        if self._plan is None:
            self._plan = self._make_plan(self)
        return self._plan


class MessageTypes:
    """The application message types of one application, each under its stable type name.

    Register every type before the host starts and call :meth:`check` once then; afterwards the
    registry is read-only in practice (the runtime never registers while serving).
    """

    def __init__(self) -> None:
        self._by_name: dict[str, _Entry] = {}
        self._by_class: dict[type, _Entry] = {}

    def register(self, name: StableTypeName | str, cls: type) -> StableTypeName:
        """Register the attrs class ``cls`` under ``name``; returns the name as a StableTypeName.

        ValueError if the name or the class is already registered, or the name is not 1..255
        bytes of UTF-8; TypeError if ``cls`` is not an attrs class.
        """
        type_name = name if isinstance(name, StableTypeName) else StableTypeName(name)
        if not (isinstance(cls, type) and attrs.has(cls)):
            raise TypeError(f"a message type must be an attrs class, not {cls!r}")
        taken = self._by_name.get(type_name.value)
        if taken is not None:
            raise ValueError(f"{type_name} is already registered for {taken.cls.__qualname__}")
        previous = self._by_class.get(cls)
        if previous is not None:
            raise ValueError(f"{cls.__qualname__} is already registered as {previous.name}")
        entry = _Entry(type_name, cls, self._make_plan)
        self._by_name[type_name.value] = entry
        self._by_class[cls] = entry
        return type_name

    def name_of(self, cls: type) -> StableTypeName:
        """The stable name ``cls`` is registered under; TypeError if it is not registered."""
        entry = self._by_class.get(cls)
        if entry is None:
            raise TypeError(f"{cls.__qualname__} is not a registered message type")
        return entry.name

    def class_of(self, name: StableTypeName) -> type | None:
        """The class registered under ``name``, or None."""
        entry = self._by_name.get(name.value)
        return None if entry is None else entry.cls

    def check(self) -> None:
        """Make the plan of every registered class now; ValueError lists every class that
        cannot travel and why (the runtime turns it into ConfigurationError at start)."""
        problems = []
        for entry in self._by_name.values():
            try:
                entry.plan()
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("; ".join(problems))

    def encode(self, message: object) -> tuple[StableTypeName, bytes]:
        """The stable name and the payload bytes of ``message``.

        TypeError if its class is not registered or a field holds a value of the wrong type;
        ValueError if a value is out of range (an int beyond 64 bits, a lone surrogate).
        """
        entry = self._by_class.get(type(message))
        if entry is None:
            raise TypeError(f"{type(message).__qualname__} is not a registered message type")
        try:
            return entry.name, cbor2.dumps(entry.plan().to_map(message))
        except Misfit as bad:
            problem = f"cannot encode {entry.name} at {bad.path()}: {bad.detail}"
            raise (ValueError if bad.out_of_range else TypeError)(problem) from None
        except UnicodeEncodeError as exc:
            raise ValueError(f"cannot encode {entry.name}: {exc}") from None

    def encode_within(self, message: object, limit: int) -> tuple[StableTypeName, bytes]:
        """:meth:`encode`, and ``ZLinkError(PROTOCOL_ERROR)`` when the payload is over ``limit``
        bytes (Rule 5)."""
        name, payload = self.encode(message)
        if len(payload) > limit:
            raise _protocol_error(
                f"a {name} message of {len(payload)} bytes is over the message limit of "
                f"{limit} bytes"
            )
        return name, payload

    def screen(self, message: object, limit: int) -> tuple[StableTypeName, bytes] | None:
        """Check ``message`` as :meth:`encode_within` does (Rule 5). ``None`` when it may be
        delivered on this host as it is (immutable, within the limit); else its encoding, whose
        decoded copy a target on this host gets, and which the wire carries as it is."""
        entry = self._by_class.get(type(message))
        if entry is not None and entry.plan().passes_as_is(message, limit):
            return None
        return self.encode_within(message, limit)

    def copy(self, message: object, limit: int) -> object:
        """``message`` as a receiver on another host would get it (Rule 5): the errors of
        :meth:`encode_within`, else a copy of its own, or ``message`` itself when immutable."""
        encoded = self.screen(message, limit)
        return message if encoded is None else self.decode(*encoded)

    def decode(self, name: StableTypeName, payload: bytes) -> object:
        """An instance of the class registered under ``name``, built from ``payload``.

        Any bytes give an instance or ``ZLinkError(PROTOCOL_ERROR)`` naming the type (Rule 3).
        """
        entry = self._by_name.get(name.value)
        if entry is None:
            raise _protocol_error(f"unknown message type {name}")
        plan = entry.plan()
        try:
            data = cbor2.loads(payload)
        except Exception as exc:  # any failure of the foreign parser is the input's fault
            raise _protocol_error(
                f"payload of {name} is not one CBOR item ({type(exc).__name__})"
            ) from None
        try:
            return plan.from_map(data, None if plan.flat else Walk(len(payload)), 0)
        except Misfit as bad:
            raise _protocol_error(f"payload of {name} at {bad.path()}: {bad.detail}") from None

    def _make_plan(self, entry: _Entry) -> ClassPlan:
        cls = entry.cls
        try:
            hints = typing.get_type_hints(cls)
        except Exception as exc:  # unresolvable annotations: a registration problem, said once
            raise ValueError(f"{entry.name} ({cls.__qualname__}): {exc}") from None
        fields = []
        positional = True
        for field in attrs.fields(cls):
            if not field.init:
                continue
            positional = positional and not field.kw_only
            try:
                if field.name not in hints:
                    raise ValueError("has no annotation")
                shape = self._shape(hints[field.name])
            except ValueError as exc:
                raise ValueError(
                    f"{entry.name} ({cls.__qualname__}): field {field.name}: {exc}"
                ) from None
            fields.append((field.name, field.alias, shape))
        return ClassPlan(cls, fields, positional)

    def _shape(self, annotation: object) -> Shape:
        scalar = SCALAR_SHAPES.get(annotation) if _hashable(annotation) else None
        if scalar is not None:
            return scalar
        origin = typing.get_origin(annotation)
        arguments = typing.get_args(annotation)
        if origin is typing.Union or origin is types.UnionType:
            return UnionShape([self._shape(member) for member in arguments])
        if origin is list and len(arguments) == 1:
            return ArrayShape(list, self._shape(arguments[0]))
        if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
            return ArrayShape(tuple, self._shape(arguments[0]))
        if origin is tuple and Ellipsis not in arguments:
            return RecordShape(tuple(self._shape(item) for item in arguments))
        if origin is dict and len(arguments) == 2:
            if arguments[0] is not str:
                raise ValueError(f"{annotation!r}: map keys must be str")
            return MapShape(self._shape(arguments[1]))
        if isinstance(annotation, type) and attrs.has(annotation):
            entry = self._by_class.get(annotation)
            if entry is None:
                raise ValueError(f"{annotation.__qualname__} is not a registered message type")
            return entry.shape
        raise ValueError(f"{annotation!r} cannot travel in a payload")


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _protocol_error(message: str) -> ZLinkError:
    return ZLinkError(ErrorKind.PROTOCOL_ERROR, message)
