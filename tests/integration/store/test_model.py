"""The store contract against a simple model, driven by hypothesis (specs/store.md, STORE-3,
STORE-5, STORE-6, STORE-7, STORE-8)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pytest
import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Conflict,
    Delete,
    Found,
    IfMissing,
    IfVersion,
    Missing,
    Put,
    ScanPage,
    StoreConfig,
    Stores,
    open_stores,
)

T = TypeVar("T")
NAMES = st.sampled_from(["a", "b", "ab", "B", "\u00e9", "a\u0000"])
VALUES = st.binary(max_size=8)
# A millisecond retention expires between one step and the next most of the time, so the model
# sees live and expired records; which one is judged by the store_now each result reports.
RETENTIONS = st.sampled_from([None, timedelta(milliseconds=1), timedelta(hours=1)])


class _TrioThread:
    """A Trio loop with open stores, running in a helper thread for synchronous callers."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self.stores: Stores | None = None
        self._stop: trio.Event | None = None

    async def _main(self) -> None:
        config = StoreConfig(dsn=self._dsn, notifications=False, poll_interval=60)
        async with open_stores(config, environ={}) as stores:
            self.stores, self.token, self._stop = (
                stores,
                trio.lowlevel.current_trio_token(),
                trio.Event(),
            )
            self._ready.set()
            await self._stop.wait()

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:  # handed to the test thread
            self._failure = error
            self._ready.set()

    def call(self, function: Callable[[Stores], Awaitable[T]]) -> T:
        assert self.stores is not None
        stores = self.stores
        return trio.from_thread.run(lambda: function(stores), trio_token=self.token)

    @contextmanager
    def running(self) -> Iterator[_TrioThread]:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        self._ready.wait(60)
        if self._failure is not None:
            raise self._failure
        try:
            yield self
        finally:
            assert self._stop is not None
            trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
            thread.join(30)


class StoreModel(RuleBasedStateMachine):
    """Records as a dict of key -> (value, version, expires_at); a record is live at t when
    expires_at is None or t < expires_at."""

    runner: _TrioThread

    def __init__(self) -> None:
        super().__init__()
        self.prefix = f"m-{uuid.uuid4().hex[:12]}/"
        self.records: dict[str, tuple[bytes, int, datetime | None]] = {}
        self.issued: dict[str, set[int]] = {}

    def _live(self, name: str, now: datetime) -> tuple[bytes, int, datetime | None] | None:
        record = self.records.get(name)
        if record is None or (record[2] is not None and record[2] <= now):
            return None
        return record

    def _write(self, batch: Batch) -> Applied | Conflict:
        return self.runner.call(lambda stores: stores.location.write(batch))

    def _conflict(
        self, condition: IfMissing | IfVersion, names: list[str], now: datetime
    ) -> Conflict:
        """The Conflict the model expects: the failed condition and, for each condition key,
        the live record or Missing (STORE-41)."""
        current: list[Missing | Found] = []
        for name in names:
            live = self._live(name, now)
            current.append(Missing(now) if live is None else Found(*live, now))
        return Conflict(condition, now, tuple(current))

    def _applied(
        self, result: Applied, puts: list[tuple[str, bytes, timedelta | None]], deletes: list[str]
    ) -> None:
        for (name, value, retention), version in zip(puts, result.versions, strict=True):
            # STORE-5: never a version this key has had before.
            assert version not in self.issued.setdefault(name, set())
            self.issued[name].add(version)
            expires = None if retention is None else result.store_now + retention
            self.records[name] = (value, version, expires)
        for name in deletes:
            self.records.pop(name, None)

    @initialize()
    def start_empty(self) -> None:
        assert self.records == {}

    @rule(name=NAMES, value=VALUES, retention=RETENTIONS)
    def put(self, name: str, value: bytes, retention: timedelta | None) -> None:
        result = self._write(Batch([], [Put(self.prefix + name, value, retention)]))
        assert isinstance(result, Applied)
        self._applied(result, [(name, value, retention)], [])

    @rule(name=NAMES, value=VALUES, retention=RETENTIONS)
    def create(self, name: str, value: bytes, retention: timedelta | None) -> None:
        key = self.prefix + name
        result = self._write(Batch([IfMissing(key)], [Put(key, value, retention)]))
        if self._live(name, result.store_now) is None:
            assert isinstance(result, Applied)
            self._applied(result, [(name, value, retention)], [])
        else:
            assert self._conflict(IfMissing(key), [name], result.store_now) == result

    @rule(name=NAMES, other=NAMES, stale=st.booleans(), value=VALUES, remove=st.booleans())
    def compare_and_set(
        self, name: str, other: str, stale: bool, value: bytes, remove: bool
    ) -> None:
        """A CAS on `name` whose mutation hits `other` (possibly the same key)."""
        known = self.records.get(name)
        expected = (known[1] if known else 1) + (1_000_000 if stale else 0)
        condition = IfVersion(self.prefix + name, expected)
        target = self.prefix + other
        mutation = Delete(target) if remove else Put(target, value)
        result = self._write(Batch([condition], [mutation]))
        live = self._live(name, result.store_now)
        if live is not None and live[1] == expected:
            assert isinstance(result, Applied)
            if remove:
                self._applied(result, [], [other])
            else:
                self._applied(result, [(other, value, None)], [])
        else:
            assert self._conflict(condition, [name], result.store_now) == result

    @rule(names=st.lists(NAMES, min_size=1, max_size=3, unique=True))
    def delete(self, names: list[str]) -> None:
        result = self._write(Batch([], [Delete(self.prefix + name) for name in names]))
        assert isinstance(result, Applied)
        self._applied(result, [], names)

    @rule(name=NAMES)
    def read(self, name: str) -> None:
        result = self.runner.call(lambda stores: stores.location.read(self.prefix + name))
        live = self._live(name, result.store_now)
        if live is None:
            assert Missing(result.store_now) == result
        else:
            assert Found(live[0], live[1], live[2], result.store_now) == result

    @rule(limit=st.integers(min_value=1, max_value=4))
    def scan(self, limit: int) -> None:
        async def every_page(stores: Stores) -> list[ScanPage]:
            pages = [await stores.location.scan(self.prefix, limit)]
            while pages[-1].cursor is not None:  # type: ignore[union-attr]  # checked below
                pages.append(await stores.location.scan(self.prefix, limit, pages[-1].cursor))  # type: ignore[union-attr]  # ScanPage
            return pages  # type: ignore[return-value]  # asserted to be ScanPages below

        pages = self.runner.call(every_page)
        assert all(isinstance(page, ScanPage) for page in pages)
        now = pages[0].store_now
        got = [(r.key, r.value, r.version, r.expires_at) for page in pages for r in page.records]
        expected = sorted(
            (
                (self.prefix + name, *live)
                for name in self.records
                if (live := self._live(name, now)) is not None
            ),
            key=lambda item: item[0].encode(),
        )
        assert expected == got

    @invariant()
    def versions_only_grow_per_key(self) -> None:
        for name, (_, version, _) in self.records.items():
            assert version == max(self.issued[name])


@pytest.mark.spec("STORE-3", "STORE-5", "STORE-6", "STORE-7", "STORE-8", "STORE-41")
def test_store_behaves_like_the_model(store_dsn: str) -> None:
    """Random puts, creates, CAS, deletes, reads and scans agree with a dict-based model."""
    with _TrioThread(store_dsn).running() as runner:
        machine: Any = type("BoundStoreModel", (StoreModel,), {"runner": runner})
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=40,
                stateful_step_count=25,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
