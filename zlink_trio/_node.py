"""``zlink-trio node --config FILE``: one host for a real deployment (specs/demo.md NODE-*).

The configuration is a TOML file::

    app = "my_package.my_module:app"    # a zl.Application, imported at start
    mesh = "prod"                       # every other top-level key is a zl.HostConfig field
    store_dsn = "postgresql://..."      # optional: else ZLINK_STORE_DSN, else embedded
    node_rid = "node-a"                 # optional: else generated at start
    request_timeout = 5.0               # optional, seconds

Every problem of the file is reported at once as one ``zl.ConfigurationError`` (the text the
command prints on stderr before it exits 2). The host runs until SIGINT or SIGTERM, then shuts
down in order (``host.shutdown()``) and the command exits 0. While a host is open SIGINT is the
host's own (specs/shutdown.md SHUT-8): it shuts the host down itself and ``open_host`` raises
``KeyboardInterrupt`` once that is done, which ends the node the same way, without a traceback.

Only the public API is used here: this module is what an operator's own runner would be.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

import zlink_trio as zl
from zlink_trio._exception_groups import sole_error

__all__ = ["NodeConfig", "load_config", "main", "run_node"]

_PATH_FIELDS = frozenset({"store_data_dir"})
"""HostConfig fields that take a path; TOML gives them as strings."""


@attrs.frozen
class NodeConfig:
    """A checked node configuration: the application, its host configuration, where it came
    from, and the extra tables the caller asked for (``sections``)."""

    path: Path
    app_ref: str
    app: zl.Application
    host: zl.HostConfig
    sections: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)


def _host_fields() -> dict[str, attrs.Attribute[Any]]:
    return {field.name: field for field in attrs.fields(zl.HostConfig)}


def import_app(ref: object) -> tuple[zl.Application | None, str | None]:
    """The ``zl.Application`` that ``"module:attribute"`` names, or a problem sentence."""
    if not isinstance(ref, str):
        return None, f'app must be a string "module:attribute", not {type(ref).__name__}'
    module_name, colon, attribute = ref.partition(":")
    if not colon or not module_name or not attribute:
        return None, f'app must be "module:attribute", got {ref!r}'
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        return None, f"app {ref!r}: cannot import module {module_name!r}: {error}"
    except Exception as error:  # the module ran and failed: report it, not a traceback
        return (
            None,
            f"app {ref!r}: importing {module_name!r} failed: {type(error).__name__}: {error}",
        )
    value: object = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            return None, f"app {ref!r}: module {module_name!r} has no attribute {attribute!r}"
        value = getattr(value, part)
    if not isinstance(value, zl.Application):
        return None, f"app {ref!r} is a {type(value).__name__}, not a zl.Application"
    return value, None


def load_config(path: Path, *, sections: Collection[str] = ()) -> NodeConfig:
    """Read and check the node configuration at ``path``; ``zl.ConfigurationError`` lists every
    problem. Tables named in ``sections`` are handed back as they are; any other key that is
    neither ``app`` nor a ``zl.HostConfig`` field is a problem."""
    where = f"node config {path}"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise zl.ConfigurationError(f"{where}: cannot read it: {error.strerror or error}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise zl.ConfigurationError(f"{where}: not valid TOML: {error}") from None
    problems: list[str] = []
    fields = _host_fields()
    host_values: dict[str, Any] = {}
    extra: dict[str, Mapping[str, Any]] = {}
    for key, value in data.items():
        if key == "app":
            continue
        if key in sections:
            if isinstance(value, dict):
                extra[key] = value
            else:
                problems.append(f"[{key}] must be a table")
        elif key in fields:
            host_values[key] = (
                Path(value) if key in _PATH_FIELDS and isinstance(value, str) else value
            )
        else:
            problems.append(f"unknown key {key!r} (known: app, {', '.join(sorted(fields))})")
    if "mesh" not in data:
        problems.append('mesh is missing: name the mesh this node serves, e.g. mesh = "prod"')
    app: zl.Application | None = None
    if "app" not in data:
        problems.append('app is missing: name the zl.Application, e.g. app = "package.module:app"')
    else:
        app, problem = import_app(data["app"])
        if problem is not None:
            problems.append(problem)
    host: zl.HostConfig | None = None
    if "mesh" in data:
        try:
            host = zl.HostConfig(**host_values)
        except zl.ConfigurationError as error:
            problems.extend(error.problems)
        except TypeError as error:  # a value attrs itself refused
            problems.append(f"HostConfig: {error}")
    if problems or app is None or host is None:
        raise zl.ConfigurationError([f"{where}: {problem}" for problem in problems])
    return NodeConfig(path, str(data["app"]), app, host, extra)


def _say(text: str) -> None:
    print(f"zlink-trio node: {text}", flush=True)


async def run_node(config: NodeConfig) -> int:
    """Run one host until SIGINT or SIGTERM, then shut it down; 0 when it closed cleanly.

    A run that ends by itself with ``UNAVAILABLE`` after it was ready (it lost its lease,
    specs/mesh.md MESH-22) is followed by a new run, with a new generation that claims nothing
    of the old one's."""
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def watch() -> None:
            async for signum in signals:
                _say(f"{signal.Signals(signum).name} received, shutting down")
                stop.set()
                return

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                await _runs(config, stop)
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The nursery wraps what ends a run; a lone error leaves as itself, for ``main``
            # to report in one line (NODE-4).
            lone = sole_error(group)
            if lone is None:
                raise
            raise lone from None
    return 0


async def _runs(config: NodeConfig, stop: trio.Event) -> None:
    """The host's runs, one after another, until ``stop`` (``run_node``)."""
    while not stop.is_set():
        ready = False
        rid = "?"
        try:
            async with zl.open_host(config.app, config.host) as host:
                ready, rid = True, host.node_rid.value
                _say(
                    f"ready: node {host.node_rid.value} generation "
                    f"{host.node_generation.value} mesh {host.mesh.value} "
                    f"app {config.app_ref}"
                )
                await stop.wait()
                await host.shutdown()
            _say(f"stopped: node {rid}")
        except KeyboardInterrupt:  # the host took SIGINT and has shut down (SHUT-8.2)
            _say(f"SIGINT received; stopped: node {rid}" if ready else "SIGINT received; stopped")
            return
        except zl.ZLinkError as error:
            if not ready or error.kind is not zl.ErrorKind.UNAVAILABLE:
                raise
            _say(f"the run ended: {error}; starting a new run")


def main(config_path: str) -> int:
    """``zlink-trio node --config FILE``: 2 for a bad configuration, 1 when the host failed."""
    # The application's modules are found in the current directory, as with ``python -m``; a
    # console script's own folder is first on the path instead (NODE-5).
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        config = load_config(Path(config_path))
    except zl.ConfigurationError as error:
        print(f"zlink-trio node: {error}", file=sys.stderr)
        return 2
    try:
        return trio.run(run_node, config)
    except zl.ConfigurationError as error:  # the application's declarations, checked at start
        print(f"zlink-trio node: {error}", file=sys.stderr)
        return 2
    except zl.ZLinkError as error:
        print(f"zlink-trio node: the host failed: {error}", file=sys.stderr)
        return 1
