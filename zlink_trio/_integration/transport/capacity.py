"""What one RouteMesh holds: its ZeroMQ sockets and file descriptors as a function of its peers,
the context's socket limit set from ``max_peers``, and the check of the process's open-file
limit at start (specs/transport.md TRN-30..32).

Rule 1: a mesh makes ``FIXED_SOCKETS`` sockets of its own (two bound ROUTERs, and the ZAP
handler's ROUTER with security) and ``LINKS_PER_PEER`` DEALERs per connected peer (one per
connection role, TRN-5); it connects at most ``max_peers`` peers at once.
Rule 2: its context may hold :func:`socket_limit` sockets: every peer's links twice over (a
closed link's socket counts until libzmq has reaped it, up to the linger after a removal or
right after a renewal) plus its own sockets and ``SPARE_SOCKETS``, so libzmq's own limit is
never the one a configured mesh meets.
Rule 3: its file descriptors are :func:`descriptors`: libzmq's context threads, one per socket
(its mailbox), one per listening endpoint, and one per TCP connection: this node's two links to
each peer and the peer's two links to this node (counted in tests/integration/transport
test_capacity.py). A mesh that starts in a process whose open-file limit cannot hold that many
more logs a warning naming the limit and the setting; it changes no limit itself.
"""

from __future__ import annotations

import logging
import os
from typing import Final

__all__ = [
    "DEFAULT_MAX_PEERS",
    "LINKS_PER_PEER",
    "MAX_PEERS",
    "check_open_files",
    "descriptors",
    "open_files_limit",
    "socket_limit",
]

logger = logging.getLogger("zlink_trio.transport")

DEFAULT_MAX_PEERS: Final = 128
"""Peers a mesh connects at once unless configured otherwise: its descriptors (Rule 3, 6 per
peer) then fit the common soft open-file limit of 1024 with room for the rest of the process
(specs/decisions.md DEC-29)."""
MAX_PEERS: Final = 16_000
"""Largest ``max_peers``: its :func:`socket_limit` stays under libzmq's ceiling of 65535."""
LINKS_PER_PEER: Final = 2
"""DEALERs towards one peer: an application link and a completion link (TRN-5)."""
SPARE_SOCKETS: Final = 16
"""Sockets a context may hold beyond the count of Rule 2: room for what is being closed."""
CONTEXT_DESCRIPTORS: Final = 5
"""libzmq's own per context: the I/O thread's and the reaper's poller and mailbox, and the
context's mailbox."""
LISTENERS: Final = 2
"""Listening TCP endpoints: the application and the completion ROUTER."""
CONNECTIONS_PER_PEER: Final = 2 * LINKS_PER_PEER
"""TCP connections per peer: this node's links to it and its links to this node."""


def own_sockets(secure: bool) -> int:
    """Sockets of a mesh besides its links: two ROUTERs, and the ZAP handler with security."""
    return 3 if secure else 2


def socket_limit(max_peers: int, secure: bool) -> int:
    """The context's ``MAX_SOCKETS`` for a mesh of at most ``max_peers`` peers (Rule 2)."""
    return 2 * LINKS_PER_PEER * max_peers + own_sockets(secure) + SPARE_SOCKETS


def descriptors(peers: int, secure: bool) -> int:
    """File descriptors a mesh holds with ``peers`` connected peers (Rule 3)."""
    sockets = own_sockets(secure) + LINKS_PER_PEER * peers
    return CONTEXT_DESCRIPTORS + LISTENERS + sockets + CONNECTIONS_PER_PEER * peers


def open_files_limit() -> int | None:
    """The process's soft open-file limit (``RLIMIT_NOFILE``), or None when it has none."""
    try:
        import resource  # POSIX only: without it there is nothing to check
    except ImportError:
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def _open_now() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc: count nothing already open
        return 0


def check_open_files(max_peers: int, secure: bool) -> None:
    """Log a warning when the process cannot open what a mesh of ``max_peers`` peers needs on
    top of what it has open now (Rule 3)."""
    limit = open_files_limit()
    if limit is None:
        return
    needed = descriptors(max_peers, secure)
    already = _open_now()
    if already + needed > limit:
        logger.warning(
            "the process may open %d files (RLIMIT_NOFILE) and has %d open, but this node's "
            "RouteMesh needs up to %d more for max_peers=%d peers: raise the open-file limit "
            "(ulimit -n, systemd LimitNOFILE=) or lower max_peers",
            limit,
            already,
            needed,
            max_peers,
        )
