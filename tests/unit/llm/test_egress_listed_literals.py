"""The classes an operator can never open, even by listing them literally in
``CONCLAVE_ALLOWED_BASE_URLS``: cloud metadata (addresses and names), the unspecified
address, multicast and reserved ranges — refused by the check before the call, by the
pin at call time, and when a listed name resolves to them. Loopback, private and
link-local addresses listed literally are the operator's to open, and stay open."""

from __future__ import annotations

import pytest

from orchestrator.gateway.egress import METADATA_ADDRESSES, EgressPolicy
from orchestrator.gateway.failures import EgressRefused

NEVER = {
    "169.254.169.254": "metadata", "fd00:ec2::254": "metadata", "169.254.170.2": "metadata",
    "100.100.100.200": "metadata", "168.63.129.16": "metadata",
    "::ffff:169.254.169.254": "metadata", "64:ff9b::a9fe:a9fe": "metadata",  # metadata inside IPv6 forms
    "0.0.0.0": "unspecified", "::": "unspecified",
    "224.0.0.1": "multicast", "239.255.255.250": "multicast", "ff02::1": "multicast", "ff05::fb": "multicast",
    "240.0.0.1": "reserved", "255.255.255.255": "reserved",
}
WAIVED = ["127.0.0.1", "::1", "10.0.0.5", "192.168.1.20", "fd12:3456::1", "169.254.1.1", "fe80::1"]


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _listed(address: str) -> tuple[EgressPolicy, list[str]]:
    """A policy listing ``address`` literally (with and without a port and a path, on both
    schemes), and URLs every one of those patterns matches."""
    host = _host(address)
    patterns = [f"http://{host}:8000", f"http://{host}:8000/v1", f"http://{host}", f"https://{host}"]
    urls = [f"http://{host}:8000/v1/chat/completions", f"http://{host}/", f"https://{host}/v1"]
    return EgressPolicy.from_patterns(patterns), urls


@pytest.mark.parametrize(("address", "why"), NEVER.items())
def test_a_forbidden_class_stays_refused_when_its_literal_is_listed(address: str, why: str) -> None:
    policy, urls = _listed(address)
    for url in urls:
        with pytest.raises(EgressRefused) as checked:
            policy.check(url)
        assert why in checked.value.message and "allowlist" not in checked.value.message, checked.value.message
        with pytest.raises(EgressRefused):
            policy.pin(url, resolve=lambda host, port: [address])


@pytest.mark.parametrize("address", sorted(NEVER, key=str))
def test_a_listed_name_that_resolves_to_a_forbidden_class_is_refused(address: str) -> None:
    """Listing the literal too does not let a listed name reach it."""
    policy = EgressPolicy.from_patterns(["http://llm.corp.test:8000", f"http://{_host(address)}:8000"])
    with pytest.raises(EgressRefused, match="resolves to"):
        policy.pin("http://llm.corp.test:8000/v1", resolve=lambda host, port: [address])


def test_every_metadata_address_is_covered() -> None:
    for a in METADATA_ADDRESSES:
        policy, urls = _listed(str(a))
        with pytest.raises(EgressRefused, match="metadata"):
            policy.check(urls[0])


@pytest.mark.parametrize("name", ["metadata.google.internal", "metadata", "instance-data.ec2.internal"])
def test_a_listed_metadata_name_is_refused(name: str) -> None:
    policy = EgressPolicy.from_patterns([f"http://{name}", f"http://{name}:8000"])
    for url in (f"http://{name}/computeMetadata/v1", f"http://{name}:8000/v1"):
        with pytest.raises(EgressRefused):
            policy.check(url)
        with pytest.raises(EgressRefused):
            policy.pin(url, resolve=lambda host, port: ["93.184.216.34"])


@pytest.mark.parametrize("address", WAIVED)
def test_loopback_private_and_link_local_listed_literally_are_open(address: str) -> None:
    policy, urls = _listed(address)
    for url in urls:
        policy.check(url)
        assert str(policy.pin(url).address) == address
    with pytest.raises(EgressRefused):  # only the address listed: its neighbour is not
        policy.check(f"http://{_host(address[:-1] + ('2' if address[-1] != '2' else '3'))}:8000/v1")
