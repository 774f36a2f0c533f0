"""zlink_trio.testing: test and model-check applications on zlink_trio (specs/testing.md).

- ``shared_store()`` / ``open_shared_store()``: the one store of a test run (KIT-1);
- ``open_test_host(app, dsn=...)`` / ``open_test_mesh(app, hosts=N, dsn=...)``: hosts in a mesh
  of their own (KIT-2, KIT-4), each with ``await host.wait_quiet()`` (KIT-5);
- ``VirtualClock``: application time the test moves (VCLK-1..VCLK-3);
- the pytest plugin (``zlink_trio.testing.pytest_plugin``, registered on install): the
  ``zlink_store`` fixture (KIT-3).

No in-memory store exists, on purpose (seed 004 §1): tests run on one real PostgreSQL and real
ZeroMQ on 127.0.0.1, and this kit makes that cheap.
"""

from zlink_trio.testing.clock import VirtualClock
from zlink_trio.testing.hosts import (
    TestHost,
    TestMesh,
    open_test_host,
    open_test_mesh,
    open_test_stores,
)
from zlink_trio.testing.store import open_shared_store, shared_store, shared_store_folder

__all__ = [
    "TestHost",
    "TestMesh",
    "VirtualClock",
    "open_shared_store",
    "open_test_host",
    "open_test_mesh",
    "open_test_stores",
    "shared_store",
    "shared_store_folder",
]
