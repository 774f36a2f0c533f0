"""A TCP proxy in front of PostgreSQL that a test can cut and restore, for store partitions
(tests/e2e/test_fencing.py).

``cut()`` closes every connection through the proxy and refuses new ones until ``restore()``:
to the hosts behind it the store is gone (their calls fail ``UNAVAILABLE``), while hosts with a
direct DSN keep using it.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import trio


class StoreProxy:
    """Forwards each accepted connection to the real server; see the module docstring."""

    def __init__(self, connect: Callable[[], Awaitable[trio.SocketStream]]) -> None:
        self._connect = connect
        self._open = True
        self._streams: set[trio.SocketStream] = set()
        self.dsn = ""
        """The DSN that reaches the server through the proxy."""

    def cut(self) -> None:
        """Close every connection and refuse new ones."""
        self._open = False
        for stream in list(self._streams):
            stream.socket.close()
        self._streams.clear()

    def restore(self) -> None:
        """Accept and forward connections again."""
        self._open = True

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            for stream in (source, sink):
                stream.socket.close()

    async def _serve(self, client: trio.SocketStream) -> None:
        if not self._open:
            client.socket.close()
            return
        try:
            server = await self._connect()
        except OSError:
            client.socket.close()
            return
        self._streams |= {client, server}
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, client, server)
                nursery.start_soon(self._pump, server, client)
        finally:
            self._streams -= {client, server}


@asynccontextmanager
async def store_proxy(dsn: str) -> AsyncIterator[StoreProxy]:
    """A running proxy in front of the server ``dsn`` names: over a Unix socket (the embedded
    server, ``?host=/folder``) or TCP (``host:port``), listening the same way; a Unix socket's
    folder is removed when the proxy ends."""
    parts = urlsplit(dsn)
    query = dict(parse_qsl(parts.query))
    folder: str | None = None
    try:
        async with trio.open_nursery() as nursery:
            if query.get("host", "").startswith("/"):
                port = parts.port or 5432
                target = f"{query['host']}/.s.PGSQL.{port}"
                proxy = StoreProxy(partial(trio.open_unix_socket, target))
                folder = tempfile.mkdtemp(prefix="zlink-proxy-")
                listening = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                await listening.bind(str(Path(folder) / f".s.PGSQL.{port}"))
                listening.listen()
                listeners = [trio.SocketListener(listening)]
                nursery.start_soon(trio.serve_listeners, proxy._serve, listeners)
                proxy.dsn = urlunsplit(parts._replace(query=urlencode({**query, "host": folder})))
            else:
                assert parts.hostname is not None, dsn
                assert parts.port is not None, dsn
                proxy = StoreProxy(partial(trio.open_tcp_stream, parts.hostname, parts.port))
                listeners = await nursery.start(trio.serve_tcp, proxy._serve, 0, "127.0.0.1")
                local = listeners[0].socket.getsockname()[1]
                auth = parts.netloc.rpartition("@")[0]
                netloc = f"{auth}@127.0.0.1:{local}" if auth else f"127.0.0.1:{local}"
                proxy.dsn = urlunsplit(parts._replace(netloc=netloc))
            yield proxy
            nursery.cancel_scope.cancel()
    finally:
        if folder is not None:  # the listening socket's own folder
            shutil.rmtree(folder, ignore_errors=True)
