"""Host configuration and the checks of durations (specs/registration.md REG-8.1;
specs/store.md STORE-47, STORE-48;
specs/completion.md CMP-3.10, CMP-9.9; specs/shutdown.md SHUT-4.8; specs/relocation.md
RELOC-32, RELOC-33).

A ``HostConfig`` is checked as a whole when it is made: every bad value is listed in one
``ConfigurationError`` (REG-5.11), so a host never starts from a contradictory configuration.
Strings become identifiers once, when the host starts (ID-6.4).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import attrs

from zlink_trio._integration.transport.capacity import DEFAULT_MAX_PEERS, MAX_PEERS
from zlink_trio._integration.transport.pending import DEFAULT_MAX_IN_FLIGHT
from zlink_trio._runtime.engines.workers import MAX_CPU_SLOTS
from zlink_trio._wire.ids import is_z85_key
from zlink_trio._wire.versions import parse_application_version
from zlink_trio.errors import ConfigurationError
from zlink_trio.ids import MeshName, NodeRid

__all__ = [
    "DEFAULT_CHUNK_LIMIT",
    "FRAME_HEADROOM",
    "MAX_APP_JOB_QUEUE_SIZE",
    "MAX_MESSAGE_BYTES",
    "MAX_TIMEOUT_MS",
    "MIN_MESSAGE_BYTES",
    "HostConfig",
    "check_curve_secret",
    "check_timeout",
]

MAX_TIMEOUT_MS = 2**31 - 1
"""Largest timeout, in whole milliseconds: the signed 32-bit maximum every ZLink language shares."""
MIN_RELEASE_TIMEOUT = 10.0
"""Seconds a store record's release at close gets at least (see ``store_release_timeout``)."""
MAX_APP_JOB_QUEUE_SIZE = 2**31 - 1
"""Largest application job queue size (seed 003 §8)."""
MIN_MESSAGE_BYTES = 1024
"""Smallest message limit: the framework's own messages must fit."""
MAX_IN_FLIGHT = 2**31 - 1
"""Largest ``max_in_flight_per_peer``."""
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Largest message limit: a message is held whole in memory by sender and receiver."""
DEFAULT_CHUNK_LIMIT = 256 * 1024
"""Default largest chunk of a relocation payload, when ``max_message_bytes`` is not smaller."""
FRAME_HEADROOM = 64 * 1024
"""Bytes the transport's frame limit adds to the message limit for a message's header frame
(its ids and metadata); a header over it is refused at the sender too (TRN-27)."""


def check_timeout(value: object, what: str) -> float:
    """``value`` as seconds when it is a finite number > 0 that, rounded up to whole
    milliseconds, is at most ``MAX_TIMEOUT_MS``; ``TypeError`` for a non-number or a ``bool``,
    ``ValueError`` for anything else (CMP-9.9)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} takes a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{what} must be a finite number of seconds greater than 0, got {value}")
    if math.ceil(seconds * 1000) > MAX_TIMEOUT_MS:
        raise ValueError(f"{what} must be at most {MAX_TIMEOUT_MS} ms, got {value} s")
    return seconds


def _problem(check: object, *arguments: object) -> str | None:
    try:
        check(*arguments)  # type: ignore[operator]  # each check is a one-shot validator
    except (TypeError, ValueError) as error:
        return str(error)
    return None


def _check_queue_size(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"app_job_queue_size takes an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_APP_JOB_QUEUE_SIZE:
        raise ValueError(f"app_job_queue_size must be in 1..{MAX_APP_JOB_QUEUE_SIZE}, got {value}")


def _check_max_peers(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_peers takes an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_PEERS:
        raise ValueError(f"max_peers must be in 1..{MAX_PEERS}, got {value}")


def _check_in_flight(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_in_flight_per_peer takes an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_IN_FLIGHT:
        raise ValueError(f"max_in_flight_per_peer must be in 1..{MAX_IN_FLIGHT}, got {value}")


def _check_mailbox_limit(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"mailbox_limit takes an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_APP_JOB_QUEUE_SIZE:
        raise ValueError(f"mailbox_limit must be in 1..{MAX_APP_JOB_QUEUE_SIZE}, got {value}")


def _check_message_bytes(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_message_bytes takes an int, not {type(value).__name__}")
    if not MIN_MESSAGE_BYTES <= value <= MAX_MESSAGE_BYTES:
        raise ValueError(
            f"max_message_bytes must be in {MIN_MESSAGE_BYTES}..{MAX_MESSAGE_BYTES}, got {value}"
        )


def _default_chunk_limit(config: HostConfig) -> int:
    limit = config.max_message_bytes
    valid = not isinstance(limit, bool) and isinstance(limit, int)
    return min(DEFAULT_CHUNK_LIMIT, limit) if valid else DEFAULT_CHUNK_LIMIT


def _check_chunk_limit(value: object, message_limit: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"relocation_payload_chunk_limit_bytes takes an int, not {type(value).__name__}"
        )
    # A bad message limit is reported on its own; the chunk is then held to the widest range.
    valid = type(message_limit) is int and _problem(_check_message_bytes, message_limit) is None
    limit = message_limit if valid and isinstance(message_limit, int) else MAX_MESSAGE_BYTES
    if not 1 <= value <= limit:
        raise ValueError(
            f"relocation_payload_chunk_limit_bytes must be in 1..max_message_bytes ({limit}), "
            f"got {value}"
        )


def _check_application_version(value: object) -> None:
    try:
        parse_application_version(value)
    except (TypeError, ValueError) as error:
        raise type(error)(f"application_version: {error}") from None


def check_curve_secret(value: object, where: str) -> str:
    """``value`` when it is a CURVE secret key in Z85 (40 characters); ``ValueError`` else,
    never quoting the key."""
    if not is_z85_key(value):
        raise ValueError(f"{where} must be a CURVE secret key of 40 Z85 characters")
    assert isinstance(value, str)  # is_z85_key said so
    return value


def _check_security(security: object, secret: object, key_file: object) -> None:
    if security not in ("curve", "none"):
        raise ValueError(f"transport_security must be 'curve' or 'none', got {security!r}")
    if key_file is not None and not isinstance(key_file, Path):
        raise TypeError(f"curve_key_file takes a Path, not {type(key_file).__name__}")
    if secret is not None:
        check_curve_secret(secret, "curve_secret_key")
    if secret is not None and key_file is not None:
        raise ValueError("give curve_secret_key or curve_key_file, not both")
    if security == "none" and (secret is not None or key_file is not None):
        raise ValueError("a CURVE key is given but transport_security is 'none'")


def _check_data_dir(value: object) -> None:
    if value is not None and not isinstance(value, Path):
        raise TypeError(f"store_data_dir takes a pathlib.Path, not {type(value).__name__}")


MAX_STORE_POOL = 1000
"""Largest ``store_pool_size``; PostgreSQL forks a process for every connection."""


def _check_pool_size(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"store_pool_size takes an int, not {type(value).__name__}")
    # Two scans may hold a connection each (StoreConfig.max_open_scans) and one must stay free.
    if not 3 <= value <= MAX_STORE_POOL:
        raise ValueError(f"store_pool_size must be in 3..{MAX_STORE_POOL}, got {value}")


def _check_cpu_slots(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"cpu_worker_slots takes an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_CPU_SLOTS:
        raise ValueError(f"cpu_worker_slots must be in 1..{MAX_CPU_SLOTS}, got {value}")


def _default_cpu_slots() -> int:
    # One CPU-bound thread per core; the cap keeps a huge machine inside the scheduler's range.
    return min(os.cpu_count() or 1, MAX_CPU_SLOTS)


def _check_optional_timeout(value: object, what: str) -> None:
    if value is not None:
        check_timeout(value, what)


@attrs.frozen
class HostConfig:
    """How one host runs: its mesh, its store and its time bounds (all times in seconds).

    Every value is checked when the config is made; all problems are raised together as one
    ``ConfigurationError``.
    """

    mesh: MeshName | str
    """The mesh this host serves, used exactly as written (ID-6.11)."""
    store_dsn: str | None = None
    """The store's PostgreSQL DSN; ``None`` means ``ZLINK_STORE_DSN``, else the embedded server."""
    store_data_dir: Path | None = None
    """The embedded server's data folder when no DSN is given; ``None`` is the default folder."""
    store_pool_size: int = 10
    """Most connections this host holds to the store's PostgreSQL, 3..1000 (specs/store.md
    STORE-47): an idle host holds one; for N hosts the server needs ``max_connections`` of at
    least N times this plus what operators use."""
    store_idle_timeout: float = 30.0
    """Seconds a store connection stays open unused before it is closed, all but one
    (STORE-46)."""
    store_transaction_pooler: bool = False
    """``store_dsn`` is a pooler in transaction mode, such as PgBouncer (STORE-48): the store
    prepares no statements, and the server must run every transaction SERIALIZABLE by itself."""
    store_listen_dsn: str | None = None
    """With ``store_transaction_pooler``: a direct DSN of the same server for the change feed's
    LISTEN; ``None`` there turns notifications off (the feed polls every second)."""
    node_rid: NodeRid | str | None = None
    """This node's routing identity; ``None`` generates one at start (ID-9)."""
    request_timeout: float = 5.0
    """Timeout of a request or create call that sets none (CMP-9.9)."""
    closing_timeout: float = 5.0
    """Time ``on_closing`` gets: its deadline is close start plus this (SHUT-4.8)."""
    instance_idle_timeout: float | None = None
    """Idle time after which an Instance Spot is evicted; ``None`` never evicts (SPOT-50)."""
    app_job_queue_size: int = 65536
    """Permits of the host's shared application job queue, 1..2**31-1 (REG-8.1): every
    admitted message holds one until its turn ends; with none free, senders wait (ERR-8.1)."""
    mailbox_limit: int = 1024
    """Most messages one Spot's or Actor's own queue holds, 1..2**31-1; a request finding it
    full ends with ``CAPACITY_EXCEEDED``, a send waits for room (ERR-5.10, CMP-5.1). The default
    is 1/64 of ``app_job_queue_size``'s, so one busy Spot cannot take every job permit of its
    host (specs/overload.md OVL-4)."""
    bind_host: str = "127.0.0.1"
    """The address the transport binds its two endpoints on (ports chosen by the OS); peers
    reach this host at the endpoints it publishes in its node record."""
    max_peers: int = DEFAULT_MAX_PEERS
    """Most other hosts of the mesh this host connects to at once, 1..16000 (default 128): its
    transport's socket limit is set from it, and a host beyond it is logged and connected when
    another leaves (specs/transport.md TRN-30). Each peer takes 6 of the process's open files
    (TRN-31); a host warns at start when the open-file limit cannot hold them."""
    max_in_flight_per_peer: int = DEFAULT_MAX_IN_FLIGHT
    """Requests of this host that may wait for replies from one other host at once,
    1..2**31-1 (default 65,536); one more ends at once with ``UNAVAILABLE``, as a full queue
    of another node does (specs/completion.md CMP-11.6)."""
    node_lease: float = 10.0
    """Lease of this host's node record in the store: peers stop routing to it this long after
    its last renewal (MESH-3); it is renewed every third of it."""
    cpu_worker_slots: int = attrs.field(factory=_default_cpu_slots)
    """CPU worker threads of the host, 1..1024; the default is the number of CPUs (CMP-3.10)."""
    transport_security: str = "curve"
    """``"curve"`` (the default): every connection between hosts is encrypted and accepted only
    from a live member of the mesh, by the CURVE key its node record publishes (specs/security.md).
    ``"none"``: no encryption and no authentication, for a trusted network only; every host of
    a mesh must choose the same."""
    curve_secret_key: str | None = None
    """This host's CURVE secret key (40 Z85 characters); with neither this nor
    ``curve_key_file`` every run makes a fresh key pair (its public key is in its node record)."""
    curve_key_file: Path | None = None
    """A file whose first line is this host's CURVE secret key (40 Z85 characters)."""
    max_message_bytes: int = 4 * 1024 * 1024
    """Largest encoded message (payload) this host sends, receives or delivers, 1 KiB..256 MiB;
    a larger one is refused at its sender with ``PROTOCOL_ERROR``, whether its target is on this
    host or another (specs/messages.md MSG-1). Give every host of a mesh the same value: a
    receiver drops, and counts, a frame over its own limit."""
    application_version: str = "0"
    """The version of the application this host runs, published in its node record: dotted
    non-negative integers without leading zeros (``"3"``, ``"2.10.1"``), compared component by
    component as numbers, a missing component counting as 0 (``"2" == "2.0"``). A rolling
    update relocates to hosts of a higher version, a planned maintenance to the same one
    (specs/relocation.md RELOC-32)."""
    relocation_payload_chunk_limit_bytes: int = attrs.field(
        default=attrs.Factory(_default_chunk_limit, takes_self=True)
    )
    """Largest chunk a relocation payload is sent in, 1..``max_message_bytes``; the default is
    256 KiB, or ``max_message_bytes`` when that is smaller (specs/relocation.md RELOC-33)."""
    relocation_follow_window: float = 30.0
    """Seconds after a Spot moved away during which what still reaches this host for it is
    relayed to its new owner (specs/relocation.md RELOC-49)."""
    relocation_cutover_target: float = 1.0
    """Seconds a unit's move may take from the start of its seal to its commit (or its abort)
    before it is reported with a warning; an operational target, never a limit: the move is
    neither cancelled nor rolled back (specs/relocation.md RELOC-31)."""

    def __attrs_post_init__(self) -> None:
        found = [
            _problem(lambda v: v if isinstance(v, MeshName) else MeshName(v), self.mesh),
            _problem(lambda v: v is None or isinstance(v, NodeRid) or NodeRid(v), self.node_rid),
            _problem(_check_dsn_type, self.store_dsn),
            _problem(_check_data_dir, self.store_data_dir),
            _problem(_check_pool_size, self.store_pool_size),
            _problem(check_timeout, self.store_idle_timeout, "store_idle_timeout"),
            _problem(_check_dsn_type, self.store_listen_dsn),
            _problem(check_timeout, self.request_timeout, "request_timeout"),
            _problem(check_timeout, self.closing_timeout, "closing_timeout"),
            _problem(check_timeout, self.node_lease, "node_lease"),
            _problem(check_timeout, self.relocation_follow_window, "relocation_follow_window"),
            _problem(check_timeout, self.relocation_cutover_target, "relocation_cutover_target"),
            _problem(_check_bind_host, self.bind_host),
            _problem(_check_optional_timeout, self.instance_idle_timeout, "instance_idle_timeout"),
            _problem(_check_queue_size, self.app_job_queue_size),
            _problem(_check_mailbox_limit, self.mailbox_limit),
            _problem(_check_max_peers, self.max_peers),
            _problem(_check_in_flight, self.max_in_flight_per_peer),
            _problem(_check_cpu_slots, self.cpu_worker_slots),
            _problem(_check_message_bytes, self.max_message_bytes),
            _problem(_check_application_version, self.application_version),
            _problem(
                _check_chunk_limit,
                self.relocation_payload_chunk_limit_bytes,
                self.max_message_bytes,
            ),
            _problem(
                _check_security,
                self.transport_security,
                self.curve_secret_key,
                self.curve_key_file,
            ),
        ]
        problems = [f"HostConfig: {problem}" for problem in found if problem is not None]
        if problems:
            raise ConfigurationError(problems)

    @property
    def store_release_timeout(self) -> float:
        """How long releasing a store record at close may take: the closing time, but never less
        than ``MIN_RELEASE_TIMEOUT``, because a record left behind keeps its id taken until a
        peer finds its owner gone."""
        return max(self.closing_timeout, MIN_RELEASE_TIMEOUT)

    @property
    def mesh_name(self) -> MeshName:
        """The mesh as a :class:`MeshName`."""
        return self.mesh if isinstance(self.mesh, MeshName) else MeshName(self.mesh)


def _check_bind_host(value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"bind_host takes a str, not {type(value).__name__}")
    if not value or any(c in value for c in "/: \t"):
        raise ValueError(f"bind_host must be a host name or IPv4 address, got {value!r}")


def _check_dsn_type(value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"store_dsn takes a str or None, not {type(value).__name__}")
