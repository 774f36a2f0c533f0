"""The change feed: LISTEN/NOTIFY hints fanned out to Trio subscribers (specs/store.md,
STORE-25, STORE-26).

Every committed batch notifies every written or deleted key, as the hex of its bytes (the
WRITE statement does it, so the notification commits with the batch). Keys are packed, comma
separated, into as few notifications as fit under PostgreSQL's payload limit (``pack``,
STORE-40): a batch of 512 releases is a handful of notifications, not 512, and each one costs
every listening host a wake-up of its store loop and of every subscriber. A dedicated
connection listens and each subscriber gets ``Changed(keys)`` soon after. The feed only
shortens discovery: a subscriber is told ``Resync`` whenever hints may have been lost (the
listener connected or reconnected, the subscriber fell far behind) and, with notifications
off, once per poll interval, so a cache that re-reads on ``Resync`` is correct with polling
alone.
"""

from __future__ import annotations

from types import TracebackType

import trio

from zlink_trio._integration.store.bridge import Database
from zlink_trio._integration.store.contract import Changed, Resync
from zlink_trio._integration.store.schema import NOTIFY_CHANNEL
from zlink_trio.errors import ZLinkError

NOTICE_CHARS = 6_000
"""Longest packed notification we send; PostgreSQL refuses a payload of 8,000 bytes or more, and
one key is at most 2,048 hex characters (1,024 bytes)."""

MAX_PENDING_KEYS = 10_000
"""A subscriber further behind than this many distinct keys is told ``Resync`` instead."""


def pack(keys: list[bytes]) -> list[str]:
    """The notification payloads that announce ``keys``: their hex (a key may hold U+0000, which
    a payload cannot carry), comma separated, each payload at most ``NOTICE_CHARS`` long."""
    payloads: list[str] = []
    parts: list[str] = []
    length = 0
    for key in keys:
        part = key.hex()
        if parts and length + 1 + len(part) > NOTICE_CHARS:
            payloads.append(",".join(parts))
            parts, length = [], 0
        length += len(part) + (1 if parts else 0)
        parts.append(part)
    if parts:
        payloads.append(",".join(parts))
    return payloads


class ChangeSubscription:
    """An async iterator of ``Changed`` / ``Resync`` events; use it as a context manager.

    Events coalesce while nobody reads: the subscriber gets every changed key at least once,
    possibly merged with others, never a stale ``Changed`` after a ``Resync`` that covers it.
    """

    def __init__(self, feed: ChangeFeed) -> None:
        self._feed = feed
        self._keys: set[str] = set()
        self._resync = False
        self._wake = trio.Event()

    def _add_key(self, key: str) -> None:
        if not self._resync:
            self._keys.add(key)
            if len(self._keys) > MAX_PENDING_KEYS:
                self._add_resync()
        self._wake.set()

    def _add_resync(self) -> None:
        self._resync = True
        self._keys.clear()
        self._wake.set()

    def __aiter__(self) -> ChangeSubscription:
        return self

    async def __anext__(self) -> Changed | Resync:
        while True:
            if self._resync:
                self._resync = False
                return Resync()
            if self._keys:
                keys, self._keys = frozenset(self._keys), set()
                return Changed(keys)
            self._wake = trio.Event()
            await self._wake.wait()

    def __enter__(self) -> ChangeSubscription:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop receiving events; idempotent."""
        self._feed._subscribers.discard(self)


class ChangeFeed:
    """Fans change hints out to every open :class:`ChangeSubscription`."""

    def __init__(self) -> None:
        self._subscribers: set[ChangeSubscription] = set()

    def subscribe(self) -> ChangeSubscription:
        """A new subscription that sees events from now on."""
        subscription = ChangeSubscription(self)
        self._subscribers.add(subscription)
        return subscription

    def publish_key(self, key: str) -> None:
        """Tell every subscriber that ``key`` changed."""
        for subscription in self._subscribers:
            subscription._add_key(key)

    def _publish_payload(self, payload: str) -> None:
        # The WRITE statement sends keys as the hex of their UTF-8 bytes, packed by ``pack``.
        try:
            keys = [bytes.fromhex(part).decode("utf-8") for part in payload.split(",")]
        except ValueError:
            self.publish_resync()  # not one of ours; re-reading everything is always safe
            return
        for key in keys:
            self.publish_key(key)

    def publish_resync(self) -> None:
        """Tell every subscriber that changes may have been missed."""
        for subscription in self._subscribers:
            subscription._add_resync()

    async def run(
        self,
        database: Database,
        *,
        listen: bool,
        poll_interval: float,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Feed the subscribers until cancelled; reports started once listening (or polling)."""
        if not listen:
            task_status.started()
            while True:
                await trio.sleep(poll_interval)
                self.publish_resync()
        started = False
        while True:
            try:
                listener = await database.listen(NOTIFY_CHANNEL, self._publish_payload)
            except ZLinkError:
                if not started:
                    started = True
                    task_status.started()
                # The server is away; try again later, and tell subscribers once it is back.
                await trio.sleep(poll_interval)
                continue
            try:
                self.publish_resync()
                if not started:
                    started = True
                    task_status.started()
                await listener.lost.wait()
            finally:
                with trio.CancelScope(shield=True):
                    await listener.close()
