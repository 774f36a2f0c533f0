"""How each field annotation travels in a payload (specs/wire.md, WIRE-20..22).

A ``Shape`` turns application values of one annotation into CBOR-ready values and back, checking
exact types on the way: ``ExactShape`` (str, bytes, bool, None), ``IntShape``, ``FloatShape``,
``ArrayShape`` (``list[T]``, ``tuple[T, ...]``), ``RecordShape`` (``tuple[A, B]``), ``MapShape``
(``dict[str, T]``), ``UnionShape`` and ``ClassShape`` (a registered attrs class, whose fields a
``ClassPlan`` lists). ``payload.py`` picks the shape of each annotation; this module only walks.

Longer than 400 lines: one family of shapes that nest in each other (an array of records of
classes of unions) and share the walk allowance and the ``Misfit`` path; the scalar shapes alone
are a quarter of it, and apart they would be a module that only this one reads.

Rule 1: a value that does not fit raises ``Misfit``, which collects the path to the value while
it unwinds (``.items[2].name``) and becomes TypeError/ValueError when encoding and
PROTOCOL_ERROR when decoding; nothing else escapes a decode (payload.py Rule 3).
Rule 2: a decode walk has an allowance (``Walk``): at most ``MAX_PAYLOAD_DEPTH`` nested containers
and no more container elements than the payload has bytes (a tree of n bytes holds fewer than n
items; only CBOR shared references can exceed that, so they are refused rather than walked,
however they multiply).
Rule 3: a value of exactly a field's scalar type passes without a call (an int still has its range
checked), so flat messages stay off the generic path.
Rule 4: an instance of a frozen attrs class whose fields are all scalars (str, bytes, bool,
None, int, float) is immutable as a whole: when every field holds exactly its type (ASCII text,
ints in range) its decoded copy would equal it, so a local delivery may pass it as it is
(``ClassPlan.passes_as_is``; payload.py Rule 5). Its encoded size is bounded from its lengths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, cast

import attrs

__all__ = [
    "MAX_PAYLOAD_DEPTH",
    "SCALAR_SHAPES",
    "ArrayShape",
    "ClassPlan",
    "ClassShape",
    "ExactShape",
    "FloatShape",
    "IntShape",
    "MapShape",
    "Misfit",
    "RecordShape",
    "Shape",
    "UnionShape",
    "Walk",
    "got",
]

MAX_PAYLOAD_DEPTH: Final = 32
"""Deepest nesting of containers (lists, tuples, maps, nested classes) in one payload."""

_INT_MIN: Final = -(2**64)
_INT_MAX: Final = 2**64 - 1
_NONE: Final = type(None)


class Misfit(Exception):
    """A value that does not fit its annotation; ``where`` collects the path while unwinding."""

    def __init__(self, detail: str, *, out_of_range: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.out_of_range = out_of_range
        """True for a value of the right type but out of range (ValueError when encoding)."""
        self.where: list[str] = []

    def at(self, segment: str) -> Misfit:
        self.where.append(segment)
        return self

    def path(self) -> str:
        return "".join(reversed(self.where)) or "(the payload)"


def got(value: object) -> str:
    return f"got {type(value).__name__}"


class Walk:
    """The allowance of one decode (Rule 2): container elements it may still visit."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left

    def enter(self, size: int, depth: int) -> None:
        self.left -= size
        if self.left < 0:
            raise Misfit("holds more elements than the payload has bytes (shared references)")
        if depth > MAX_PAYLOAD_DEPTH:
            raise Misfit(f"nests containers deeper than {MAX_PAYLOAD_DEPTH}")


class Shape:
    """How one annotation travels: ``encode`` gives a CBOR-ready value, ``decode`` takes one."""

    label: str = "?"
    encodes: tuple[type, ...] = ()
    """Python types of the application values this shape takes (for union dispatch)."""
    decodes: tuple[type, ...] = ()
    """Python types of decoded CBOR values this shape takes (for union dispatch)."""
    also_decodes: tuple[type, ...] = ()
    """Decoded types taken too, unless another union member claims them (int for float)."""
    flat = True
    """True when values hold no container, so decoding needs no allowance (Rule 2)."""
    exact: type | None = None
    """A type whose values pass through this shape unchanged (an int still needs its range)."""

    def encode(self, value: object) -> object:
        raise NotImplementedError

    def decode(self, value: object, walk: Walk | None, depth: int) -> object:
        raise NotImplementedError


class ExactShape(Shape):
    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.label = "None" if kind is _NONE else kind.__name__
        self.encodes = self.decodes = (kind,)
        self.exact = kind

    def encode(self, value: object) -> object:
        if type(value) is not self.kind:
            raise Misfit(f"expects {self.label}, {got(value)}")
        return value

    def decode(self, value: object, walk: Walk | None, depth: int) -> object:
        if type(value) is not self.kind:
            raise Misfit(f"expects {self.label}, {got(value)}")
        return value


class IntShape(Shape):
    label = "int"
    encodes = decodes = (int,)
    exact = int

    def encode(self, value: object) -> object:
        return self.decode(value, None, 0)

    def decode(self, value: object, walk: Walk | None, depth: int) -> object:
        if type(value) is not int:
            raise Misfit(f"expects int, {got(value)}")
        if not _INT_MIN <= value <= _INT_MAX:
            raise Misfit("expects an int in -2**64..2**64-1", out_of_range=True)
        return value


class FloatShape(Shape):
    label = "float"
    exact = float
    encodes = (float, int)
    decodes = (float,)
    also_decodes = (int,)

    def encode(self, value: object) -> object:
        return self.decode(value, None, 0)

    def decode(self, value: object, walk: Walk | None, depth: int) -> object:
        if type(value) is float:
            return value
        if type(value) is int and _INT_MIN <= value <= _INT_MAX:
            return value
        raise Misfit(f"expects float, {got(value)}")


class ArrayShape(Shape):
    """list[T] and tuple[T, ...]: every element has the annotation ``item``."""

    decodes = (list,)
    flat = False

    def __init__(self, kind: type, item: Shape) -> None:
        self.kind = kind
        self.item = item
        self.encodes = (kind,)
        self.label = f"{kind.__name__}[{item.label}{', ...' if kind is tuple else ''}]"

    def encode(self, value: object) -> object:
        if type(value) is not self.kind:
            raise Misfit(f"expects {self.label}, {got(value)}")
        encoded = []
        for index, element in enumerate(cast("list[Any] | tuple[Any, ...]", value)):
            try:
                encoded.append(self.item.encode(element))
            except Misfit as bad:
                raise bad.at(f"[{index}]") from None
        return encoded

    def decode(self, value: object, walk: Walk | None, depth: int) -> object:
        if type(value) is not list:
            raise Misfit(f"expects {self.label}, {got(value)}")
        assert walk is not None
        walk.enter(len(value), depth)
        item = self.item
        decoded = []
        for index, element in enumerate(value):
            try:
                decoded.append(item.decode(element, walk, depth + 1))
            except Misfit as bad:
                raise bad.at(f"[{index}]") from None
        return decoded if self.kind is list else tuple(decoded)


class RecordShape(Shape):
    """tuple[A, B, ...]: a fixed number of elements, each with its own annotation."""

    encodes = (tuple,)
    decodes = (list,)
    flat = False

    def __init__(self, items: tuple[Shape, ...]) -> None:
        self.items = items
        self.label = f"tuple[{', '.join(item.label for item in items) or '()'}]"

    def _check_length(self, value: object, kind: type) -> list[Any] | tuple[Any, ...]:
        if type(value) is not kind:
            raise Misfit(f"expects {self.label}, {got(value)}")
        elements = cast("list[Any] | tuple[Any, ...]", value)
        if len(elements) != len(self.items):
            raise Misfit(f"expects {self.label}, got {len(elements)} elements")
        return elements

    def encode(self, value: object) -> object:
        encoded = []
        for index, (shape, element) in enumerate(
            zip(self.items, self._check_length(value, tuple), strict=True)
        ):
            try:
                encoded.append(shape.encode(element))
            except Misfit as bad:
                raise bad.at(f"[{index}]") from None
        return encoded

    def decode(self, value: object, walk: Walk | None, depth: int) -> object:
        elements = self._check_length(value, list)
        assert walk is not None
        walk.enter(len(elements), depth)
        decoded = []
        for index, (shape, element) in enumerate(zip(self.items, elements, strict=True)):
            try:
                decoded.append(shape.decode(element, walk, depth + 1))
            except Misfit as bad:
                raise bad.at(f"[{index}]") from None
        return tuple(decoded)


def _key_segment(key: str) -> str:
    shown = key if len(key) <= 40 else key[:40] + "..."
    return f"[{shown!r}]"


class MapShape(Shape):
    """dict[str, T]."""

    encodes = decodes = (dict,)
    flat = False

    def __init__(self, value: Shape) -> None:
        self.value = value
        self.label = f"dict[str, {value.label}]"

    def encode(self, value: object) -> object:
        if type(value) is not dict:
            raise Misfit(f"expects {self.label}, {got(value)}")
        encoded = {}
        for key, element in value.items():
            if type(key) is not str:
                raise Misfit(f"expects {self.label}, got a {type(key).__name__} key")
            try:
                encoded[key] = self.value.encode(element)
            except Misfit as bad:
                raise bad.at(_key_segment(key)) from None
        return encoded

    def decode(self, value: object, walk: Walk | None, depth: int) -> object:
        if type(value) is not dict:
            raise Misfit(f"expects {self.label}, {got(value)}")
        assert walk is not None
        walk.enter(len(value), depth)
        shape = self.value
        decoded = {}
        for key, element in value.items():
            if type(key) is not str:
                raise Misfit(f"expects {self.label}, got a {type(key).__name__} key")
            try:
                decoded[key] = shape.decode(element, walk, depth + 1)
            except Misfit as bad:
                raise bad.at(_key_segment(key)) from None
        return decoded


class UnionShape(Shape):
    """A | B | ...: the member is chosen by the value's type, so members must not share one."""

    def __init__(self, members: list[Shape]) -> None:
        self.label = " | ".join(member.label for member in members)
        self.flat = all(member.flat for member in members)
        self.by_encoded: dict[type, Shape] = {}
        self.by_decoded: dict[type, Shape] = {}
        for member in members:
            for kind in member.encodes:
                if self.by_encoded.setdefault(kind, member) is not member:
                    raise ValueError(f"{self.label}: two members take {kind.__name__} values")
            for kind in member.decodes:
                if self.by_decoded.setdefault(kind, member) is not member:
                    raise ValueError(f"{self.label}: two members travel as {kind.__name__}")
        for member in members:
            for kind in member.also_decodes:
                self.by_decoded.setdefault(kind, member)
        self.encodes = tuple(self.by_encoded)
        self.decodes = tuple(self.by_decoded)

    def encode(self, value: object) -> object:
        member = self.by_encoded.get(type(value))
        if member is None:
            raise Misfit(f"expects {self.label}, {got(value)}")
        return member.encode(value)

    def decode(self, value: object, walk: Walk | None, depth: int) -> object:
        member = self.by_decoded.get(type(value))
        if member is None:
            raise Misfit(f"expects {self.label}, {got(value)}")
        return member.decode(value, walk, depth)


class ClassShape(Shape):
    """A registered attrs class inside a payload: a map of its fields, planned on first use."""

    decodes = (dict,)
    flat = False

    def __init__(self, cls: type, plan: Callable[[], ClassPlan]) -> None:
        self.cls = cls
        self.plan = plan
        self.label = cls.__qualname__
        self.encodes = (cls,)

    def encode(self, value: object) -> object:
        if type(value) is not self.cls:
            raise Misfit(f"expects {self.label}, {got(value)}")
        return self.plan().to_map(value)

    def decode(self, value: object, walk: Walk | None, depth: int) -> object:
        return self.plan().from_map(value, walk, depth)


SCALAR_SHAPES: Final[dict[object, Shape]] = {
    str: ExactShape(str),
    bytes: ExactShape(bytes),
    bool: ExactShape(bool),
    _NONE: ExactShape(_NONE),
    None: ExactShape(_NONE),
    int: IntShape(),
    float: FloatShape(),
}


@attrs.frozen
class _FrozenProbe:
    pass


_FROZEN_SETATTR: Final = _FrozenProbe.__setattr__
"""What attrs installs as ``__setattr__`` of a frozen class (read off one, not imported)."""

_SCALARS: Final = frozenset((str, bytes, bool, _NONE, int, float))
_HEAD: Final = 9
"""The longest CBOR head of one item (major type and a 64-bit length or value)."""


class ClassPlan:
    """The fields of one class as they travel: (wire name, constructor keyword, shape)."""

    def __init__(self, cls: type, fields: list[tuple[str, str, Shape]], positional: bool) -> None:
        self.cls = cls
        self.names = tuple(name for name, _, _ in fields)
        self.keywords = tuple(keyword for _, keyword, _ in fields)
        # (wire name, exact type, shape): Rule 3.
        self.fields = tuple((name, shape.exact, shape) for name, _, shape in fields)
        self.flat = all(shape.flat for _, _, shape in fields)
        self.positional = positional
        # Rule 4: frozen, scalar fields only, and every attribute is a field that travels.
        self.immutable = (
            getattr(cls, "__setattr__", None) is _FROZEN_SETATTR
            and all(shape.exact in _SCALARS for _, _, shape in fields)
            and len(fields) == len(attrs.fields(cls))
        )
        self.fixed_size = _HEAD + sum(2 * _HEAD + len(name.encode()) for name in self.names)
        """An upper bound of the encoded size without the text and bytes values' own bytes."""

    def passes_as_is(self, instance: object, limit: int) -> bool:
        """True when ``instance`` would decode to an equal, immutable copy of at most ``limit``
        bytes encoded, so it may be delivered as it is (Rule 4). False means: copy it."""
        if not self.immutable:
            return False
        size = self.fixed_size
        for name, exact, _ in self.fields:
            value = getattr(instance, name)
            kind = type(value)
            if kind is not exact:
                return False
            if kind is str:
                if not value.isascii():  # a lone surrogate would not encode; UTF-8 may be longer
                    return False
                size += len(value)
            elif kind is bytes:
                size += len(value)
            elif kind is int and not _INT_MIN <= value <= _INT_MAX:
                return False
        return size <= limit

    def to_map(self, instance: object) -> dict[str, object]:
        encoded = {}
        for name, exact, shape in self.fields:
            value = getattr(instance, name)
            kind = type(value)
            if kind is not exact or (kind is int and not _INT_MIN <= value <= _INT_MAX):
                try:
                    value = shape.encode(value)
                except Misfit as bad:
                    raise bad.at(f".{name}") from None
            encoded[name] = value
        return encoded

    def from_map(self, data: object, walk: Walk | None, depth: int) -> object:
        if type(data) is not dict:
            raise Misfit(f"expects a map of the fields of {self.cls.__qualname__}, {got(data)}")
        if len(data) != len(self.fields):
            raise Misfit(self._field_mismatch(data))
        if walk is not None:
            walk.enter(len(data), depth)
        arguments = []
        for name, exact, shape in self.fields:
            try:
                value = data[name]
            except KeyError:  # as many keys as fields, so a missing one means a stray one too
                raise Misfit(self._field_mismatch(data)) from None
            kind = type(value)
            if kind is not exact or (kind is int and not _INT_MIN <= value <= _INT_MAX):
                try:
                    value = shape.decode(value, walk, depth + 1)
                except Misfit as bad:
                    raise bad.at(f".{name}") from None
            arguments.append(value)
        try:
            if self.positional:
                return self.cls(*arguments)
            return self.cls(**dict(zip(self.keywords, arguments, strict=True)))
        except Exception as exc:  # the class's own validators judged the peer's data (Rule 3)
            detail = f"{type(exc).__name__}: {exc}"
            if len(detail) > 200:  # a validator may quote the peer's value; keep logs bounded
                detail = detail[:200] + "..."
            raise Misfit(f"refused by {self.cls.__qualname__}: {detail}") from None

    def _field_mismatch(self, data: dict[Any, Any]) -> str:
        expected = self.names
        missing = [name for name in expected if name not in data]
        extra = [key for key in data if key not in expected]
        shown = ", ".join(repr(key)[:40] for key in extra[:5])
        parts = [f"missing field(s) {', '.join(missing)}"] if missing else []
        parts += [f"unexpected key(s) {shown}"] if extra else []
        return "; ".join(parts)
