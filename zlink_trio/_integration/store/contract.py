"""The value types of the store contract (specs/store.md, STORE-1..STORE-9, STORE-20..STORE-24).

Pure values: no binding type appears here, so the runtime can hold, compare and pattern-match
results without knowing that PostgreSQL sits underneath. Every type is frozen and validated when
made, so a key that is too long or a batch that names a key twice never reaches the database.

Rule 1: keys are text the framework issues, 1..1024 bytes of UTF-8, compared byte for byte.
Rule 2: a version is an opaque token issued by the store; compare it for equality only.
Rule 3: every result carries ``store_now``, the database clock of the statement that made it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import attrs

MAX_KEY_BYTES = 1024
"""Largest Location Store key, in UTF-8 bytes."""
MAX_VALUE_BYTES = 1024 * 1024
"""Largest Location Store value, in bytes."""
MAX_BATCH_KEYS = 2048
"""Most distinct keys one conditional batch may name across conditions and mutations."""
MAX_BATCH_BYTES = 4 * 1024 * 1024
"""Largest conditional batch: the sum of its key and value bytes."""
MAX_PAGE_LIMIT = 1000
"""Most records one scan page may ask for."""
MAX_PAGE_BYTES = 4 * 1024 * 1024
"""A scan page stops before its keys and values exceed this many bytes (one record at least)."""
MAX_REFERENCE_BYTES = 4096
"""Largest Relocation Store reference, in UTF-8 bytes."""
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024 + 23
"""Largest Relocation Store payload: a 64 MiB chunk plus the framework's 23-byte envelope."""


def encode_text(value: object, what: str, limit: int, *, allow_empty: bool = False) -> bytes:
    """The UTF-8 bytes of ``value``; ``TypeError``/``ValueError`` when it breaks the key rules."""
    if type(value) is not str:
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be valid UTF-8; {value!r} holds a lone surrogate") from None
    low = 0 if allow_empty else 1
    if not low <= len(raw) <= limit:
        raise ValueError(f"{what} must be {low}..{limit} bytes of UTF-8, got {len(raw)} bytes")
    return raw


def _check_key(_instance: object, _attribute: object, value: Any) -> None:
    encode_text(value, "a store key", MAX_KEY_BYTES)


def _check_value(_instance: object, _attribute: object, value: Any) -> None:
    if type(value) is not bytes:
        raise TypeError(f"a store value must be bytes, not {type(value).__name__}")
    if len(value) > MAX_VALUE_BYTES:
        raise ValueError(f"a store value is at most {MAX_VALUE_BYTES} bytes, got {len(value)}")


def _check_version(_instance: object, _attribute: object, value: Any) -> None:
    if type(value) is not int:
        raise TypeError(f"a version must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"a version is a positive token issued by the store, got {value}")


def check_retention(value: object, *, optional: bool) -> None:
    """Refuse a retention that is not a positive ``timedelta`` (``None`` only if optional)."""
    if value is None and optional:
        return
    if not isinstance(value, timedelta):
        raise TypeError(f"a retention must be a timedelta, not {type(value).__name__}")
    if value <= timedelta(0):
        raise ValueError(f"a retention must be positive, got {value}")


def _check_optional_retention(_instance: object, _attribute: object, value: Any) -> None:
    check_retention(value, optional=True)


# --- reads -------------------------------------------------------------------------------------


@attrs.frozen
class Missing:
    """No live record: the key (or reference) is absent or expired at ``store_now``."""

    store_now: datetime


@attrs.frozen
class Found:
    """A live record as one observation: its bytes, version and expiry at ``store_now``."""

    value: bytes
    version: int
    expires_at: datetime | None
    """``None`` for a durable record, kept until it is deleted."""
    store_now: datetime


# --- conditional batches -----------------------------------------------------------------------


@attrs.frozen
class IfMissing:
    """Holds when ``key`` has no live record (absent or expired) when the batch runs."""

    key: str = attrs.field(validator=_check_key)


@attrs.frozen
class IfVersion:
    """Holds when ``key`` has a live record whose version is exactly ``expected``."""

    key: str = attrs.field(validator=_check_key)
    expected: int = attrs.field(validator=_check_version)


@attrs.frozen
class Put:
    """Store ``value`` at ``key`` under a new version; it expires ``retention`` after commit on
    the database clock, or never when ``retention`` is ``None``."""

    key: str = attrs.field(validator=_check_key)
    value: bytes = attrs.field(validator=_check_value)
    retention: timedelta | None = attrs.field(default=None, validator=_check_optional_retention)


@attrs.frozen
class Delete:
    """Remove ``key``; deleting an absent key is not an error."""

    key: str = attrs.field(validator=_check_key)


Condition = IfMissing | IfVersion
Mutation = Put | Delete


def _condition_tuple(items: Iterable[Condition]) -> tuple[Condition, ...]:
    return tuple(items)


def _mutation_tuple(items: Iterable[Mutation]) -> tuple[Mutation, ...]:
    return tuple(items)


def _check_conditions(_instance: object, _attribute: object, value: tuple[Any, ...]) -> None:
    if not all(isinstance(item, IfMissing | IfVersion) for item in value):
        raise TypeError("conditions must be IfMissing or IfVersion values")
    keys = [item.key for item in value]
    if len(set(keys)) != len(keys):
        raise ValueError("a batch names the same key in two conditions")


def _check_mutations(_instance: object, _attribute: object, value: tuple[Any, ...]) -> None:
    if not all(isinstance(item, Put | Delete) for item in value):
        raise TypeError("mutations must be Put or Delete values")
    keys = [item.key for item in value]
    if len(set(keys)) != len(keys):
        raise ValueError("a batch names the same key in two mutations")


@attrs.frozen
class Batch:
    """Conditions and mutations that commit together or not at all (STORE-3)."""

    conditions: tuple[Condition, ...] = attrs.field(
        converter=_condition_tuple, validator=_check_conditions
    )
    mutations: tuple[Mutation, ...] = attrs.field(
        converter=_mutation_tuple, validator=_check_mutations
    )
    notify: bool = attrs.field(
        default=True, kw_only=True, validator=attrs.validators.instance_of(bool)
    )
    """Whether the commit notifies its keys (STORE-25); ``False`` for a write nobody needs to
    hear of at once, which readers find by polling (a node record's renewal, MESH-25)."""

    def __attrs_post_init__(self) -> None:
        keys = {item.key for item in self.conditions} | {item.key for item in self.mutations}
        if len(keys) > MAX_BATCH_KEYS:
            raise ValueError(f"a batch names at most {MAX_BATCH_KEYS} keys, got {len(keys)}")
        size = sum(len(item.key.encode()) for item in (*self.conditions, *self.mutations))
        size += sum(len(item.value) for item in self.mutations if isinstance(item, Put))
        if size > MAX_BATCH_BYTES:
            raise ValueError(f"a batch is at most {MAX_BATCH_BYTES} bytes, got {size}")


@attrs.frozen
class Applied:
    """Every condition held and every mutation committed as one transaction."""

    versions: tuple[int, ...]
    """The new version of each ``Put``, in the order the batch lists its puts."""
    store_now: datetime
    """The database clock of the commit; a put's expiry is ``store_now + retention``."""


@attrs.frozen
class Conflict:
    """``condition`` (the first that failed) did not hold; nothing was written."""

    condition: Condition
    store_now: datetime
    current: tuple[Missing | Found, ...] = ()
    """What the batch found at each of its condition keys, in the batch's condition order, on
    the same clock (STORE-41): a caller that lost learns the records without reading them."""


# --- scans -------------------------------------------------------------------------------------


@attrs.frozen
class Record:
    """One live record of a scan page."""

    key: str
    value: bytes
    version: int
    expires_at: datetime | None


@attrs.frozen
class ScanPage:
    """Records in key byte order, all from the snapshot the first page fixed.

    ``cursor`` continues the scan on that snapshot; ``None`` means this was the last page.
    ``store_now`` is the snapshot's clock: expiry on every page is judged at that instant.
    """

    records: tuple[Record, ...]
    cursor: str | None
    store_now: datetime


@attrs.frozen
class Expired:
    """The scan's snapshot is no longer served (or the cursor is not one of ours): start again
    from the first page."""


# --- the Relocation Store ----------------------------------------------------------------------


@attrs.frozen
class Stored:
    """The reference was free (absent or expired) and now holds the payload."""

    expires_at: datetime
    store_now: datetime


@attrs.frozen
class AlreadyStored:
    """The reference already holds exactly these bytes; its expiry is left as it was."""

    expires_at: datetime
    store_now: datetime


@attrs.frozen
class PayloadConflict:
    """The reference holds different bytes; nothing was written."""

    store_now: datetime


@attrs.frozen
class Payload:
    """The live payload stored at a reference."""

    payload: bytes
    expires_at: datetime
    store_now: datetime


@attrs.frozen
class Renewed:
    """The payload now expires ``retention`` after ``store_now``; its bytes are unchanged."""

    expires_at: datetime
    store_now: datetime


# --- change notifications ----------------------------------------------------------------------


@attrs.frozen
class Changed:
    """These keys were written or deleted since the previous event: re-read them."""

    keys: frozenset[str]


@attrs.frozen
class Resync:
    """Changes may have been missed (polling tick, reconnect, overflow): re-read everything."""
