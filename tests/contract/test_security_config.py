"""Transport security from the host's side: keys from HostConfig, the public key in the node
record, the opt-out (specs/security.md SEC-1, SEC-5, SEC-6)."""

from __future__ import annotations

import uuid
from pathlib import Path

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import Found, StoreConfig, open_stores
from zlink_trio._integration.transport import curve_public, new_curve_secret
from zlink_trio._runtime.ownership.node_record import NodeRecord

app = zl.Application()


@app.message("sec.Ask")
@attrs.frozen
class Ask:
    n: int


@app.user_spot("sec.Room")
class Room(NoMembers):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Ask:
        return req


async def published_key(store_dsn: str, host: zl.Host) -> str:
    async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
        found = await stores.location.read(f"m/{host.mesh.value}/node/{host.node_rid.value}")
    assert isinstance(found, Found)
    return NodeRecord.decode(found.value).curve_key


async def one_request(first: zl.Host, second: zl.Host) -> None:
    room = f"room-{uuid.uuid4().hex[:8]}"
    await second.spots.get_or_create(room, "sec.Room").submit()
    with trio.fail_after(20):
        reply = first.route.request_to_spot(room, Ask(5), reply_type=Ask).timeout(15)
        assert Ask(5) == await reply.submit()


@pytest.mark.spec("SEC-1", "SEC-5")
async def test_a_configured_key_is_the_published_one_and_hosts_talk(
    store_dsn: str, tmp_path: Path
) -> None:
    """One host with curve_secret_key, one with curve_key_file: each node record publishes the
    public key of its secret, and a request crosses between them."""
    mesh = f"sec-{uuid.uuid4().hex[:8]}"
    secrets = [new_curve_secret(), new_curve_secret()]
    key_file = tmp_path / "node.key"
    key_file.write_text(secrets[1].decode() + "\n", encoding="ascii")
    first_config = zl.HostConfig(
        mesh=mesh, store_dsn=store_dsn, curve_secret_key=secrets[0].decode()
    )
    second_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, curve_key_file=key_file)
    async with zl.open_host(app, first_config) as first, zl.open_host(app, second_config) as second:
        assert curve_public(secrets[0]).decode() == await published_key(store_dsn, first)
        assert curve_public(secrets[1]).decode() == await published_key(store_dsn, second)
        await one_request(first, second)


@pytest.mark.spec("SEC-6", "SEC-1")
async def test_the_opt_out_publishes_no_key_and_plain_hosts_talk(store_dsn: str) -> None:
    """transport_security="none": no key in the record, and two such hosts talk."""
    config = zl.HostConfig(
        mesh=f"sec-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn, transport_security="none"
    )
    async with zl.open_host(app, config) as first, zl.open_host(app, config) as second:
        assert "" == await published_key(store_dsn, first)
        await one_request(first, second)


@pytest.mark.spec("SEC-5")
@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"transport_security": "tls"}, "transport_security must be"),
        ({"curve_secret_key": "short"}, "curve_secret_key must be a CURVE secret key"),
        ({"curve_secret_key": "x" * 40, "curve_key_file": Path("k")}, "not both"),
        ({"transport_security": "none", "curve_secret_key": "x" * 40}, "is 'none'"),
    ],
)
def test_bad_security_settings_are_configuration_errors(
    fields: dict[str, object], problem: str
) -> None:
    with pytest.raises(zl.ConfigurationError, match=problem) as refused:
        zl.HostConfig(mesh="m", **fields)  # type: ignore[arg-type]
    assert "x" * 40 not in str(refused.value)


@pytest.mark.spec("SEC-5")
async def test_an_unreadable_key_file_stops_the_start(store_dsn: str, tmp_path: Path) -> None:
    """A key file that is missing, or holds no key, is a ConfigurationError before anything
    starts; the key is never quoted."""
    (tmp_path / "bad.key").write_text("not a key\n", encoding="ascii")
    for path in (tmp_path / "missing.key", tmp_path / "bad.key"):
        config = zl.HostConfig(mesh="m", store_dsn=store_dsn, curve_key_file=path)
        with pytest.raises(zl.ConfigurationError, match="curve_key_file"):
            async with zl.open_host(app, config):
                pass
