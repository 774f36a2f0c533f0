"""Changing authority records in shared conditional batches: group commit of the claims, the
Ready marks, the releases and the relocation commits of one host (issue 11, item 9:
specs/shutdown.md SHUT-4.15; issue 15: specs/spots.md SPOT-94).

Rule 1: one writer, many waiters. A change is a conditional batch of its own (a claim's two
records, a Ready mark, a release, a moving unit's hand-over), queued; its caller waits for its
own result. The one flusher task takes everything queued (up to ``BATCH_LIMIT`` changes,
``KEY_LIMIT`` keys and ``BYTE_LIMIT`` bytes, never two changes that name one key) and writes it
as one all-or-nothing conditional batch, quiet (STORE-25) only when every change in it is. While
a batch is in flight the next one gathers, so
ten thousand Spots closing at shutdown, or created 32 at a time, cost a few dozen store commits
instead of ten thousand, and a single change still costs one.
Rule 2: a conflict is settled one by one. When any condition of a shared batch fails, the batch
changes nothing, and each change is then written on its own and gets its own result (its
``Conflict`` carries the records at its own keys, STORE-41), so one record that is not ours
never keeps the others.
Rule 3: an unknown outcome is reported, never guessed. A batch whose write raised or was cut
short may have committed (DEC-17): every waiter in it gets the error and settles its records by
reading them again, as a change written alone would.
Rule 4: without a running flusher (before the host starts it, after it stops) a change is
written at once by its caller, so no caller ever waits for a task that is not there.
Rule 5: a caller cancelled while its change waits in the queue takes it out: it is never
written. Cancelled once its batch is on its way, the caller first waits for that batch to land
(shielded; the store's timeout bounds it) and then raises: it settles the outcome by reading
(DEC-17), and a read can no longer come before the write it settles.
Rule 6: announcements are shared too. The keys of a move published once its unit serves
(RELOC-76, STORE-50) that come while another announcement is on its way are left to that
caller, which sends them all next in one statement; their own caller returns at once (a hint:
STORE-26). A host relocation of thousands of units so costs a few dozen announcements, not one
per unit. Keys whose caller failed or went away wait for the next announcement.
Rule 7: a change that waits for nothing else is written by its caller (``write_now``): the
hand-over of a move alone on its host (RELOC-76), sealed while it is written, so the two task
switches through the flusher are off its path; beside a batch on its way, whose conditions
decide which of two changes to one key is written. Cancelled, it waits for its write to land
first, as Rule 5.
"""

from __future__ import annotations

import math

import trio

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Conflict,
    Delete,
    IfVersion,
    LocationStore,
    Put,
)
from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = ["BATCH_LIMIT", "RecordBatcher"]

BATCH_LIMIT = 512
"""Most changes one shared batch writes."""
KEY_LIMIT = 1024
"""Most keys one shared batch names: half the store's 2,048."""
BYTE_LIMIT = 1024 * 1024
"""Most bytes of keys and values one shared batch carries: a quarter of the store's 4 MiB."""

_Result = Applied | Conflict | ZLinkError | None


class _Pending:
    """One queued change and, once written, its result."""

    __slots__ = ("batch", "done", "dropped", "keys", "result", "size", "taken")

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        items = (*batch.conditions, *batch.mutations)
        self.keys = {item.key for item in items}
        self.size = sum(len(item.key.encode()) for item in items)
        self.size += sum(len(item.value) for item in batch.mutations if isinstance(item, Put))
        self.result: _Result = None
        self.done = trio.Event()
        self.taken = False  # in a batch on its way to the store
        self.dropped = False  # its caller went away before that (Rule 5)

    def finish(self, result: _Result) -> None:
        self.result = result
        self.done.set()


class RecordBatcher:
    """Writes conditional batches of authority records together, for one host (Rules 1-4)."""

    def __init__(self, store: LocationStore) -> None:
        self._store = store
        self._send, self._receive = trio.open_memory_channel[_Pending](math.inf)
        self._running = False
        self.batches = 0
        """How many batches the flusher wrote (for tests and diagnostics)."""
        self._notices: dict[str, None] = {}
        self._announcing = False

    async def announce(self, keys: list[str]) -> None:
        """Tell every host that ``keys`` changed (Rule 6): now, or with the announcement on its
        way; ``ZLinkError`` when the store could not be told."""
        self._notices.update(dict.fromkeys(keys))
        if self._announcing:
            return
        self._announcing = True
        try:
            while self._notices:
                taken, self._notices = list(self._notices), {}
                await self._store.announce(taken)
        finally:
            self._announcing = False

    async def write(self, batch: Batch) -> Applied | Conflict:
        """``batch`` committed, possibly together with others (Rule 1): its own ``Applied``
        (the versions of its puts) or ``Conflict``; ``ZLinkError`` when the outcome is
        unknown."""
        if not self._running:
            return await self._store.write(batch)  # Rule 4
        pending = _Pending(batch)
        try:
            self._send.send_nowait(pending)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # The flusher was cut short (its host is being torn down): write this one alone.
            return await self._store.write(batch)
        try:
            await pending.done.wait()
        except BaseException:  # Rule 5
            if not pending.taken:
                pending.dropped = True
            else:
                with trio.CancelScope(shield=True):
                    await pending.done.wait()
            raise
        result = pending.result
        if isinstance(result, ZLinkError):
            raise result
        assert result is not None  # done is set once a result is in
        return result

    async def write_now(self, batch: Batch) -> Applied | Conflict:
        """``write``, by the caller's task itself, at once (Rule 7)."""
        with trio.CancelScope(shield=True):
            result = await self._store.write(batch)
        await trio.lowlevel.checkpoint_if_cancelled()
        return result

    async def release(self, key: str, version: int) -> bool:
        """Delete ``key`` if it is still at ``version``: ``True`` once deleted, ``False`` when it
        was not at that version any more; ``ZLinkError`` when the outcome is unknown."""
        written = await self.write(Batch([IfVersion(key, version)], [Delete(key)]))
        return isinstance(written, Applied)

    async def put(self, key: str, version: int, value: bytes) -> int | None:
        """Replace ``key``'s value if it is still at ``version``: its new version, or ``None``
        when it was not at that version any more; ``ZLinkError`` when the outcome is unknown."""
        written = await self.write(Batch([IfVersion(key, version)], [Put(key, value)]))
        return written.versions[0] if isinstance(written, Applied) else None

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
        # Changes that share no key, within the limits; the rest waits for the next batch.
        chosen: list[_Pending] = []
        later: list[_Pending] = []
        keys: set[str] = set()
        size = 0
        for pending in batch:
            if pending.dropped:
                continue
            fits = len(keys) + len(pending.keys) <= KEY_LIMIT and size + pending.size <= BYTE_LIMIT
            if chosen and (keys & pending.keys or not fits):
                later.append(pending)
                continue
            chosen.append(pending)
            keys |= pending.keys
            size += pending.size
        if not chosen:
            return
        for pending in chosen:
            pending.taken = True
        self.batches += 1
        if len(chosen) == 1:
            await _write_alone(self._store, chosen[0])
        else:
            try:
                written = await self._store.write(
                    Batch(
                        [item for p in chosen for item in p.batch.conditions],
                        [item for p in chosen for item in p.batch.mutations],
                        notify=any(p.batch.notify for p in chosen),  # quiet if all are
                    )
                )
            except ZLinkError as error:
                for pending in chosen:
                    pending.finish(error)  # Rule 3
            else:
                if isinstance(written, Applied):
                    versions = iter(written.versions)  # one per put, in the batch's order
                    for pending in chosen:
                        puts = sum(isinstance(item, Put) for item in pending.batch.mutations)
                        mine = tuple(next(versions) for _ in range(puts))
                        pending.finish(Applied(mine, written.store_now))
                else:
                    for pending in chosen:  # Rule 2
                        await _write_alone(self._store, pending)
        if later:
            await self._write(later)


async def _write_alone(store: LocationStore, pending: _Pending) -> None:
    try:
        pending.finish(await store.write(pending.batch))
    except ZLinkError as error:
        pending.finish(error)


def _drain(receive: trio.MemoryReceiveChannel[_Pending]) -> list[_Pending]:
    left: list[_Pending] = []
    while True:
        try:
            left.append(receive.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return left
