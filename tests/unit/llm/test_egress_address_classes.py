"""IPv6 forms judged by the IPv4 address they carry, and what a pin asks the resolver and
sends (survivors of the systematic mutation run, docs/mutation.md). What listing a literal
waives, and never does, is test_egress_listed_literals.py's."""

from __future__ import annotations

import ipaddress

import pytest

from orchestrator.gateway.egress import EgressPolicy, classify
from orchestrator.gateway.failures import EgressRefused, ProviderUnavailable


@pytest.mark.parametrize(("address", "verdict"), [
    ("::169.254.169.254", "metadata"),              # IPv4-compatible
    ("64:ff9b::a9fe:a9fe", "metadata"),             # NAT64
    ("2002:a9fe:a9fe::", "metadata"),               # 6to4
    ("2001:0:4136:e378:8000:63bf:5601:5601", "metadata"),  # Teredo, client 169.254.169.254
    ("::a00:1", "reserved"),      # its own class (::/8) is stricter than the private one it carries
    ("::1:a9fe:a9fe", "reserved"),  # not an IPv4-compatible form: nothing embedded
    ("::0.0.0.1", "loopback"), ("::1", "loopback"), ("::ffff:10.0.0.1", "private"),
    ("100.64.0.1", "private"), ("fc00::1", "private"), ("1.2.3.4", None), ("2606:4700::1111", None),
])
def test_an_address_is_judged_by_the_strictest_class_it_carries(address: str, verdict: str | None) -> None:
    assert classify(ipaddress.ip_address(address)) == verdict


def test_a_pin_asks_the_resolver_for_the_listed_name_and_port_once() -> None:
    asked: list[tuple[str, int]] = []

    def resolve(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["93.184.216.34", "93.184.216.35"]

    policy = EgressPolicy.from_patterns(["http://llm.test", "https://llm.test:8443"])
    plain = policy.pin("http://llm.test/v1", resolve=resolve)
    tls = policy.pin("https://llm.test:8443/v1", resolve=resolve)
    assert asked == [("llm.test", 80), ("llm.test", 8443)]
    assert (plain.url, plain.headers, plain.extensions, str(plain.address)) == (
        "http://93.184.216.34/v1", {"Host": "llm.test"}, {}, "93.184.216.34")
    assert (tls.url, tls.headers, tls.extensions) == (
        "https://93.184.216.34:8443/v1", {"Host": "llm.test:8443"}, {"sni_hostname": "llm.test"})


def test_a_resolver_answer_that_is_no_address_is_refused_and_none_is_unavailable() -> None:
    policy = EgressPolicy.from_patterns(["http://llm.test"])
    with pytest.raises(EgressRefused) as bad:
        policy.pin("http://llm.test/v1", resolve=lambda host, port: ["not-an-address"])
    assert bad.value.message == "llm.test resolved to something that is not an address"
    with pytest.raises(ProviderUnavailable) as none:
        policy.pin("http://llm.test/v1", resolve=lambda host, port: [])
    assert none.value.message == "llm.test resolves to no address"

    def fail(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known\nsecond line")

    with pytest.raises(ProviderUnavailable) as down:
        policy.pin("http://llm.test/v1", resolve=fail)
    assert down.value.message == "cannot resolve llm.test: Name or service not known"

    def silent(host: str, port: int) -> list[str]:
        raise OSError()

    with pytest.raises(ProviderUnavailable) as quiet:
        policy.pin("http://llm.test/v1", resolve=silent)
    assert quiet.value.message == "cannot resolve llm.test: OSError"
