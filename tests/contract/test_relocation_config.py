"""The host settings relocation reads: the application version a node publishes and the chunk
limit of a payload (specs/relocation.md RELOC-32, RELOC-33)."""

from __future__ import annotations

import pytest

import zlink_trio as zl
from zlink_trio._wire.versions import parse_application_version


def config(**values: object) -> zl.HostConfig:
    return zl.HostConfig(mesh="m", **values)  # type: ignore[arg-type]  # test values


@pytest.mark.spec("RELOC-32")
def test_an_application_version_is_dotted_numbers_and_anything_else_is_refused() -> None:
    """The default is "0"; dotted non-negative integers are kept as written; any other value
    is a ConfigurationError naming application_version, when the config is made."""
    assert "0" == config().application_version
    for good in ("3", "2.10.1", "0.0", "10", "1.0.0.0.7"):
        assert good == config(application_version=good).application_version
    bad_values: list[object] = [
        3,
        None,
        "",
        "1.",
        ".1",
        "1..2",
        "-1",
        "+1",
        "1.x",
        "v1",
        "01",
        "1.02",
        " 1",
        "1\n",
        "\u0663",  # an Arabic-Indic three: a digit to str.isdigit, not to a version
        "1" * 65,
    ]
    for bad in bad_values:
        with pytest.raises(zl.ConfigurationError) as caught:
            config(application_version=bad)
        [problem] = caught.value.problems
        assert "application_version" in problem, bad


@pytest.mark.spec("RELOC-32")
def test_versions_compare_as_numbers_with_missing_components_zero() -> None:
    """ "2" == "2.0" == "2.0.0", "2.10" > "2.9", "10" > "9", "2.0.1" > "2"; sorting by the
    parsed value orders versions as numbers would."""
    key = parse_application_version
    assert key("2") == key("2.0") == key("2.0.0")
    assert key("0") == key("0.0")
    assert key("2.10") > key("2.9")
    assert key("10") > key("9")
    assert key("2.0.1") > key("2")
    assert key("2.1") > key("2.0.5")
    assert key("1.9.9") < key("2")
    assert key("3") != key("3.0.1")
    written = ["10", "2.10", "2.9", "2", "0", "2.0.1", "1.99"]
    assert ["0", "1.99", "2", "2.0.1", "2.9", "2.10", "10"] == sorted(written, key=key)


@pytest.mark.spec("RELOC-33")
def test_the_chunk_limit_lies_between_one_byte_and_the_message_limit() -> None:
    """The default is 256 KiB, or the message limit when that is smaller; 1 and the message
    limit itself are accepted; 0, more than the message limit, or a non-int is a
    ConfigurationError, listed with every other bad value."""
    assert 262144 == config().relocation_payload_chunk_limit_bytes
    assert 4096 == config(max_message_bytes=4096).relocation_payload_chunk_limit_bytes
    assert 1 == config(relocation_payload_chunk_limit_bytes=1).relocation_payload_chunk_limit_bytes
    largest = config().max_message_bytes
    at_limit = config(relocation_payload_chunk_limit_bytes=largest)
    assert largest == at_limit.relocation_payload_chunk_limit_bytes
    for bad in (0, -1, largest + 1, 1.5, True, "1024", None):
        with pytest.raises(zl.ConfigurationError) as caught:
            config(relocation_payload_chunk_limit_bytes=bad)
        [problem] = caught.value.problems
        assert "relocation_payload_chunk_limit_bytes" in problem, bad
    with pytest.raises(zl.ConfigurationError) as caught:
        config(max_message_bytes=4096, relocation_payload_chunk_limit_bytes=4097)
    assert 1 == len(caught.value.problems)
    with pytest.raises(zl.ConfigurationError) as caught:
        config(application_version="x", relocation_payload_chunk_limit_bytes=0)
    assert 2 == len(caught.value.problems)
