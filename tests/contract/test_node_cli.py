"""``zlink-trio node --config FILE``: one host of an application, run until a signal
(specs/demo.md NODE-*)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import trio

from zlink_trio._integration.store import DSN_VARIABLE

HERE = Path(__file__).resolve().parent
COMMAND_TIMEOUT = 60.0


async def _close(process: trio.Process) -> None:
    """Kill ``process`` if it still runs, reap it and close its pipes."""
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            process.kill()
        await process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()


def _environ() -> dict[str, str]:
    """This environment without a store DSN, with ``node_app`` importable."""
    environ = {name: value for name, value in os.environ.items() if name != DSN_VARIABLE}
    path = environ.get("PYTHONPATH")
    environ["PYTHONPATH"] = str(HERE) if not path else f"{HERE}{os.pathsep}{path}"
    return environ


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text, encoding="utf-8")
    return path


async def _run(*args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(COMMAND_TIMEOUT):
        return await trio.run_process(
            [sys.executable, "-m", "zlink_trio", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=_environ(),
        )


async def _nodes(store_dsn: str, mesh: str) -> list[str]:
    done = await _run("store", "inspect", "--dsn", store_dsn, "--mesh", mesh, "--json")
    assert 0 == done.returncode, done.stderr.decode()
    document = json.loads(done.stdout)
    return [node["rid"] for node in document["meshes"][mesh]["nodes"]]


async def _start_node(config: Path) -> trio.Process:
    return await trio.lowlevel.open_process(
        [sys.executable, "-m", "zlink_trio", "node", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environ(),
    )


async def _read_until(stream: trio.abc.ReceiveStream, marker: bytes) -> bytes:
    seen = b""
    while marker not in seen:
        chunk = await stream.receive_some(4096)
        assert chunk, f"output ended before {marker!r}: {seen.decode()}"
        seen += chunk
    return seen


async def _read_all(stream: trio.abc.ReceiveStream) -> bytes:
    seen = b""
    while chunk := await stream.receive_some(4096):
        seen += chunk
    return seen


@pytest.mark.spec("NODE-1", "NODE-2")
@pytest.mark.parametrize(
    ("signum", "said"),
    [
        (signal.SIGTERM, "SIGTERM received, shutting down"),
        (signal.SIGINT, "SIGINT received; stopped: node"),
    ],
    ids=["SIGTERM", "SIGINT"],
)
async def test_node_runs_until_a_signal_and_withdraws_its_record(
    tmp_path: Path, store_dsn: str, signum: signal.Signals, said: str
) -> None:
    """The node prints a ready line naming its RID, is listed in the store while it runs, and on
    SIGTERM or SIGINT (Ctrl-C, which the open host takes itself: SHUT-8) shuts down, exits 0
    with no traceback and its node record is gone."""
    mesh = f"node-{uuid.uuid4().hex[:8]}"
    rid = f"node-cli-{uuid.uuid4().hex[:8]}"
    config = _config(
        tmp_path,
        f'app = "node_app:app"\nmesh = "{mesh}"\nstore_dsn = {json.dumps(store_dsn)}\n'
        f'node_rid = "{rid}"\nrequest_timeout = 2.5\n',
    )
    process = await _start_node(config)
    try:
        assert process.stdout is not None
        with trio.fail_after(COMMAND_TIMEOUT):
            seen = await _read_until(process.stdout, b"\n")
        assert f"zlink-trio node: ready: node {rid} " in seen.decode()
        assert f"mesh {mesh}" in seen.decode()
        assert [rid] == await _nodes(store_dsn, mesh)
        process.send_signal(signum)
        with trio.fail_after(COMMAND_TIMEOUT):
            returncode = await process.wait()
            rest = seen + await _read_until(process.stdout, b"stopped")
            assert process.stderr is not None
            errors = await _read_all(process.stderr)
        assert 0 == returncode, errors.decode()
        assert said in rest.decode()
        assert "Traceback" not in errors.decode()
        assert [] == await _nodes(store_dsn, mesh)
    finally:
        await _close(process)


@pytest.mark.spec("NODE-3")
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('app = "node_app:app"\n', "mesh is missing"),
        ('app = "no_such_module_here:app"\nmesh = "m"\n', "cannot import module"),
        ('app = "node_app:missing"\nmesh = "m"\n', "has no attribute 'missing'"),
        ('app = "node_app:not_an_app"\nmesh = "m"\n', "not a zl.Application"),
        ('mesh = "m"\n', "app is missing"),
        ('app = "node_app:app"\nmesh = "m"\nrequest_timeout = -1\n', "request_timeout"),
        ('app = "node_app:app"\nmesh = "m"\nflavour = 3\n', "unknown key 'flavour'"),
        ("app = \n", "not valid TOML"),
    ],
)
async def test_bad_config_exits_2_with_the_problem(
    tmp_path: Path, text: str, expected: str
) -> None:
    """A bad configuration is one message on stderr (no traceback) and exit status 2."""
    done = await _run("node", "--config", str(_config(tmp_path, text)))
    stderr = done.stderr.decode()
    assert 2 == done.returncode, stderr
    assert expected in stderr
    assert stderr.startswith("zlink-trio node: ")
    assert "Traceback" not in stderr


@pytest.mark.spec("NODE-3")
async def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    """Several problems of one file come out together, so one run fixes them all."""
    text = 'app = "no_such_module_here:app"\nrequest_timeout = 0\n'
    done = await _run("node", "--config", str(_config(tmp_path, text)))
    stderr = done.stderr.decode()
    assert 2 == done.returncode
    assert "mesh is missing" in stderr
    assert "cannot import module" in stderr


@pytest.mark.spec("NODE-5")
async def test_the_console_script_finds_the_application_in_the_current_directory(
    tmp_path: Path,
) -> None:
    """The installed ``zlink-trio`` script, run in a folder holding the app's module (not on
    PYTHONPATH), imports it: the only problem left is the bad value the file holds on purpose,
    so nothing starts."""
    script = Path(sys.executable).parent / "zlink-trio"
    if not script.exists():
        pytest.skip("the zlink-trio console script is not installed beside this interpreter")
    (tmp_path / "cwd_app.py").write_text("import zlink_trio as zl\napp = zl.Application()\n")
    config = _config(tmp_path, 'app = "cwd_app:app"\nmesh = "m"\nrequest_timeout = -1\n')
    with trio.fail_after(COMMAND_TIMEOUT):
        done = await trio.run_process(
            [str(script), "node", "--config", str(config)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={name: value for name, value in os.environ.items() if name != DSN_VARIABLE},
            cwd=tmp_path,
        )
    stderr = done.stderr.decode()
    assert 2 == done.returncode, stderr
    assert "request_timeout" in stderr
    assert "cannot import" not in stderr


@pytest.mark.spec("NODE-3")
async def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    done = await _run("node", "--config", str(tmp_path / "absent.toml"))
    assert 2 == done.returncode
    assert "cannot read it" in done.stderr.decode()


@pytest.mark.spec("NODE-4")
@pytest.mark.parametrize(
    ("text", "status", "expected"),
    [
        (
            'app = "node_app:bad_app"\nmesh = "m"\n',
            2,
            "is not declared",
        ),
        (
            'app = "node_app:app"\nmesh = "m"\nstore_dsn = "postgresql://nobody@127.0.0.1:9/none"\n',
            1,
            "the host failed: UNAVAILABLE: cannot reach PostgreSQL at 127.0.0.1:9/none",
        ),
    ],
    ids=["declaration error", "store unreachable"],
)
async def test_a_host_that_fails_to_start_is_one_line_and_an_exit_status(
    tmp_path: Path, text: str, status: int, expected: str
) -> None:
    """A configuration that passes its own checks, but whose application's declarations are
    refused at the host's start (2) or whose store cannot be reached (1), ends the command with
    one line on stderr naming the problem, no traceback."""
    done = await _run("node", "--config", str(_config(tmp_path, text)))
    stderr = done.stderr.decode()
    assert status == done.returncode, stderr
    assert expected in stderr
    assert stderr.startswith("zlink-trio node: ")
    assert 1 == len(stderr.strip().splitlines()), stderr
    assert "Traceback" not in stderr


@pytest.mark.spec("MESH-22")
async def test_a_node_whose_run_lost_its_lease_comes_back_as_a_new_run(
    tmp_path: Path, store_dsn: str
) -> None:
    """Its node record removed behind its back (what peers do to a run they saw silent), the
    node's run ends with UNAVAILABLE and the command starts a new run with a new generation,
    which then shuts down on SIGTERM as usual."""
    from zlink_trio._integration.store import (
        Applied,
        Batch,
        Delete,
        Found,
        IfVersion,
        StoreConfig,
        open_stores,
    )

    mesh = f"node-{uuid.uuid4().hex[:8]}"
    rid = f"node-cli-{uuid.uuid4().hex[:8]}"
    config = _config(
        tmp_path,
        f'app = "node_app:app"\nmesh = "{mesh}"\nstore_dsn = {json.dumps(store_dsn)}\n'
        f'node_rid = "{rid}"\nnode_lease = 2.0\n',
    )
    process = await _start_node(config)
    try:
        assert process.stdout is not None
        with trio.fail_after(COMMAND_TIMEOUT):
            first = (await _read_until(process.stdout, b"\n")).decode()
        assert f"ready: node {rid} generation " in first
        key = f"m/{mesh}/node/{rid}"
        async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
            while True:  # a renewal between the read and the delete changes the version
                found = await stores.location.read(key)
                assert isinstance(found, Found)
                deleted = await stores.location.write(
                    Batch([IfVersion(key, found.version)], [Delete(key)])
                )
                if isinstance(deleted, Applied):
                    break
        seen = first
        with trio.fail_after(COMMAND_TIMEOUT):
            while not (seen.count("ready: node") == 2 and seen.endswith("\n")):
                chunk = await process.stdout.receive_some(4096)
                assert chunk, f"output ended: {seen}"
                seen += chunk.decode()
        assert "the run ended: " in seen
        readies = [line for line in seen.splitlines() if "ready: node" in line]
        assert 2 == len(readies)
        assert readies[0].split("generation ")[1] != readies[1].split("generation ")[1]
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(COMMAND_TIMEOUT):
            assert 0 == await process.wait()
    finally:
        await _close(process)
