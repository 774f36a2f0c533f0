"""zlink_trio.testing: test and model-check applications on zlink_trio (specs/testing.md).

- ``shared_store()`` / ``open_shared_store()``: the one store of a test run (KIT-1);
- ``open_test_host(app, dsn=...)`` / ``open_test_mesh(app, hosts=N, dsn=...)``: hosts in a mesh
  of their own (KIT-2, KIT-4), each with ``await host.wait_quiet()`` (KIT-5);
- ``VirtualClock``: application time the test moves (VCLK-1..VCLK-3);
- the pytest plugin (``zlink_trio.testing.pytest_plugin``, registered on install): the
  ``zlink_store`` fixture (KIT-3);
- ``HostStateMachine``: a hypothesis stateful harness over fresh hosts per example (KIT-6); it
  needs hypothesis (the ``test`` extra) and is imported only when asked for;
- ``seeded_scheduling(seed)``: Trio's scheduling order fixed by a seed, outside hypothesis (KIT-7).

No in-memory store exists, on purpose (seed 004 §1): tests run on one real PostgreSQL and real
ZeroMQ on 127.0.0.1, and this kit makes that cheap.
"""

from typing import TYPE_CHECKING, Any

from zlink_trio.testing.clock import VirtualClock
from zlink_trio.testing.hosts import (
    TestHost,
    TestMesh,
    open_test_host,
    open_test_mesh,
    open_test_stores,
)
from zlink_trio.testing.scheduling import seeded_scheduling
from zlink_trio.testing.store import open_shared_store, shared_store, shared_store_folder

if TYPE_CHECKING:
    from zlink_trio.testing.stateful import HostStateMachine

__all__ = [
    "HostStateMachine",
    "TestHost",
    "TestMesh",
    "VirtualClock",
    "open_shared_store",
    "open_test_host",
    "open_test_mesh",
    "open_test_stores",
    "seeded_scheduling",
    "shared_store",
    "shared_store_folder",
]


def __getattr__(name: str) -> Any:
    """``HostStateMachine`` imports hypothesis, so its module is loaded on first use."""
    if name == "HostStateMachine":
        from zlink_trio.testing import stateful

        return stateful.HostStateMachine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
