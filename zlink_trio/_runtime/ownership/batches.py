"""Changing authority records in conditional batches: group commit of the releases (issue 11,
item 9; specs/shutdown.md SHUT-4.15) and of the Ready marks of new incarnations (issue 15;
specs/spots.md SPOT-94).

Rule 1: one writer, many waiters. A release (delete) or a Ready mark (put) is queued and its
caller waits for its own result; the one flusher task takes everything queued (up to
``BATCH_LIMIT`` records) and writes it in one all-or-nothing conditional batch, each record on
the version its incarnation holds. While a batch is in flight the next one gathers, so ten
thousand Spots closing at shutdown, or created 32 at a time, cost a few dozen store commits
instead of ten thousand, and a single change still costs one.
Rule 2: a conflict is settled one by one. When any record of a batch is no longer at the
version its incarnation holds, the batch changes nothing, and each of its records is written
on its own, so one record that is not ours never keeps the others.
Rule 3: an unknown outcome is reported, never guessed. A batch whose write raised or was cut
short may have committed (DEC-17): every waiter in it gets the error and settles its record by
reading it again, as a single release would.
Rule 4: without a running flusher (before the host starts it, after it stops) a change is
written at once by its caller, so no caller ever waits for a task that is not there.
"""

from __future__ import annotations

import math

import trio

from zlink_trio._integration.store import Applied, Batch, Delete, IfVersion, LocationStore, Put
from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = ["BATCH_LIMIT", "RecordBatcher"]

BATCH_LIMIT = 512
"""Most records one batch changes; well inside the store's 2,048 keys and 4 MiB (a record's
value is a few hundred bytes)."""

_Result = int | None | ZLinkError
"""A change's result: the record's new version (0 for a delete), ``None`` when it was not at
the expected version any more, or the error of an unknown outcome."""


class _Pending:
    """One queued change (``value`` ``None``: delete) and, once written, its result."""

    __slots__ = ("done", "key", "result", "value", "version")

    def __init__(self, key: str, version: int, value: bytes | None) -> None:
        self.key = key
        self.version = version
        self.value = value
        self.result: _Result = None
        self.done = trio.Event()

    def finish(self, result: _Result) -> None:
        self.result = result
        self.done.set()


class RecordBatcher:
    """Deletes and replaces authority records conditionally, in batches, for one host (Rules
    1-4)."""

    def __init__(self, store: LocationStore) -> None:
        self._store = store
        self._send, self._receive = trio.open_memory_channel[_Pending](math.inf)
        self._running = False
        self.batches = 0
        """How many batches the flusher wrote (for tests and diagnostics)."""

    async def release(self, key: str, version: int) -> bool:
        """Delete ``key`` if it is still at ``version``: ``True`` once deleted, ``False`` when it
        was not at that version any more; ``ZLinkError`` when the outcome is unknown."""
        return await self._change(key, version, None) is not None

    async def put(self, key: str, version: int, value: bytes) -> int | None:
        """Replace ``key``'s value if it is still at ``version``: its new version, or ``None``
        when it was not at that version any more; ``ZLinkError`` when the outcome is unknown."""
        return await self._change(key, version, value)

    async def _change(self, key: str, version: int, value: bytes | None) -> int | None:
        if not self._running:
            return await _write_one(self._store, key, version, value)  # Rule 4
        pending = _Pending(key, version, value)
        try:
            self._send.send_nowait(pending)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # The flusher was cut short (its host is being torn down): write this one alone.
            return await _write_one(self._store, key, version, value)
        await pending.done.wait()
        if isinstance(pending.result, ZLinkError):
            raise pending.result
        return pending.result

    def close(self) -> None:
        """Take no more changes through the flusher; it writes what is queued, then ends."""
        self._running = False
        self._send.close()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The flusher: batches of what is queued, one at a time, until ``close()``."""
        self._running = True
        task_status.started()
        batch: list[_Pending] = []
        try:
            async with self._receive:
                async for first in self._receive:
                    batch = [first]
                    while len(batch) < BATCH_LIMIT:
                        try:
                            batch.append(self._receive.receive_nowait())
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                    await self._write(batch)
                    batch = []
        finally:
            self._running = False
            # Cut short (the host nursery was cancelled): nobody may wait for a result that
            # will not come, and what was in flight has an unknown outcome (Rule 3).
            cut = ZLinkError(ErrorKind.UNAVAILABLE, "the record's change was cut short")
            for pending in [*batch, *_drain(self._receive)]:
                if not pending.done.is_set():
                    pending.finish(cut)

    async def _write(self, batch: list[_Pending]) -> None:
        # One record per key in a batch: a second change of a key waits for the next batch.
        unique: dict[str, _Pending] = {}
        later: list[_Pending] = []
        for pending in batch:
            if pending.key in unique:
                later.append(pending)
            else:
                unique[pending.key] = pending
        chosen = list(unique.values())
        self.batches += 1
        try:
            written = await self._store.write(
                Batch(
                    [IfVersion(p.key, p.version) for p in chosen],
                    [Delete(p.key) if p.value is None else Put(p.key, p.value) for p in chosen],
                )
            )
        except ZLinkError as error:
            for pending in chosen:
                pending.finish(error)  # Rule 3
        else:
            if isinstance(written, Applied):
                versions = iter(written.versions)  # one per put, in the batch's order
                for pending in chosen:
                    pending.finish(0 if pending.value is None else next(versions))
            else:
                for pending in chosen:  # Rule 2
                    try:
                        pending.finish(
                            await _write_one(
                                self._store, pending.key, pending.version, pending.value
                            )
                        )
                    except ZLinkError as error:
                        pending.finish(error)
        if later:
            await self._write(later)


async def _write_one(
    store: LocationStore, key: str, version: int, value: bytes | None
) -> int | None:
    change = Delete(key) if value is None else Put(key, value)
    written = await store.write(Batch([IfVersion(key, version)], [change]))
    if not isinstance(written, Applied):
        return None
    return 0 if value is None else written.versions[0]


def _drain(receive: trio.MemoryReceiveChannel[_Pending]) -> list[_Pending]:
    left: list[_Pending] = []
    while True:
        try:
            left.append(receive.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return left
