"""The egress policy without a network: URL parsing tricks, address classes, the
allowlist syntax, and what a pinned request looks like."""

from __future__ import annotations

import ipaddress

import pytest

from orchestrator.gateway.egress import EgressPolicy, UrlPattern, classify
from orchestrator.gateway.failures import EgressRefused, ProviderUnavailable

POLICY = EgressPolicy.from_patterns([
    "https://api.openai.com/v1",
    "https://*.example.com",
    "http://10.0.0.5:8000",
    "http://[::1]:9000/v1",
    "https://llm.corp.test",
])

ALLOWED = [
    "https://api.openai.com/v1",
    "https://api.openai.com/v1/",
    "https://api.openai.com/v1/chat/completions",
    "https://API.OpenAI.COM./v1",                 # case and one trailing dot
    "https://api.openai.com:443/v1",              # the default port written out
    "https://a.example.com/anything",
    "https://a.b.example.com",
    "https://bücher.example.com/v1",              # IDNA, compared as xn--bcher-kva
    "http://10.0.0.5:8000/v1",                    # a private address the operator listed literally
    "http://10.0.0.5.:8000/v1",                   # the same address with a trailing dot
    "http://[::1]:9000/v1/chat/completions",      # loopback, listed literally
    "https://llm.corp.test/v1",
]

REFUSED = {
    # not on the list
    "https://api.openai.com/v10": "allowlist",
    "https://api.openai.com": "allowlist",
    "http://api.openai.com/v1": "allowlist",             # scheme
    "https://api.openai.com:8443/v1": "allowlist",       # port
    "https://example.com/": "allowlist",                  # *. is subdomains only
    "https://evil-example.com/": "allowlist",
    "https://example.com.evil.net/": "allowlist",
    "https://a.example.com:8443/": "allowlist",
    "http://10.0.0.6:8000/v1": "private",                # a literal not listed: its class is named
    "http://10.0.0.5:8001/v1": "private",
    "https://api.openai.com/v1/../admin": "allowlist",   # dot segments are resolved before matching
    # credentials and parser confusion
    "https://user@api.openai.com/v1": "'@'",
    "https://api.openai.com@evil.net/v1": "'@'",
    "https://evil.net\\@api.openai.com/v1": "'@'",
    "https://evil.net\\.api.openai.com/v1": "backslash",
    "https://api.openai.com/v1#@evil.net": "'@'",
    "https://api.openai.com/v1#frag": "query or fragment",
    "https://api.openai.com/v1?x=1": "query or fragment",
    "https://api.openai.com /v1": "whitespace",
    "https://api.openai.com/v1\n": "control",
    "https://api.openai.com/v1/%2e%2e/admin": "percent-encoded",
    "https://api.openai.com/v1%2fchat": "percent-encoded",
    # schemes and ports
    "ftp://api.openai.com/v1": "scheme",
    "file:///etc/passwd": "scheme",
    "//api.openai.com/v1": "scheme",
    "https://api.openai.com:99999/v1": "out of range",
    "https://api.openai.com:0/v1": "plain digits",
    "https://api.openai.com:+443/v1": "plain digits",
    "https://api.openai.com:0443/v1": "plain digits",
    "http://%31%32%37.0.0.1/": "numeric host",
    "http://api.openai%2ecom/v1": "not a valid host",
    # numeric hosts resolvers read as 169.254.169.254 or 127.0.0.1
    "http://2852039166/": "numeric host",
    "http://0xa9fea9fe/": "numeric host",
    "http://0251.0376.0251.0376/": "does not parse",
    "http://169.254.169.254.": "metadata",
    "http://127.1/": "numeric host",
    "http://0177.0.0.1/": "does not parse",
    # metadata, by address and by name, listed or not
    "http://169.254.169.254/latest": "metadata",
    "http://[fd00:ec2::254]/latest": "metadata",
    "http://100.100.100.200/latest": "metadata",
    "http://[::ffff:169.254.169.254]/": "metadata",
    "http://[::ffff:a9fe:a9fe]/": "metadata",
    "http://[64:ff9b::a9fe:a9fe]/": "metadata",
    "http://[2002:a9fe:a9fe::1]/": "metadata",
    "http://metadata.google.internal/computeMetadata/v1": "metadata",
    "http://METADATA.google.internal./": "metadata",
    # other address classes, not listed
    "http://127.0.0.1:9000/v1": "loopback",
    "http://[::1]:9001/v1": "loopback",
    "http://192.168.1.1/": "private",
    "http://172.16.0.1/": "private",
    "http://100.64.0.1/": "private",
    "http://[fc00::1]/": "private",
    "http://169.254.10.10/": "link-local",
    "http://[fe80::1]/": "link-local",
    "http://[fe80::1%25eth0]/": "zone id",
    "http://0.0.0.0:8000/": "unspecified",
    "http://[::]:8000/": "unspecified",
    "http://224.0.0.1/": "multicast",
    "http://[ff02::1]/": "multicast",
    "http://240.0.0.1/": "reserved",
    "http://255.255.255.255/": "reserved",
    "http://192.0.2.10/": "reserved",
    # IDNA that does not normalise, and malformed names
    "https://\uff45xample.com/": "does not parse",  # a fullwidth e
    "https://a..example.com/": "not a valid host",
    "https://-a.example.com/": "not a valid host",
    "https://a_b.example.com/": "not a valid host",
    "": "empty",
}


@pytest.mark.parametrize("url", ALLOWED)
def test_allowed(url: str) -> None:
    POLICY.check(url)


@pytest.mark.parametrize(("url", "reason"), REFUSED.items())
def test_refused_with_a_reason(url: str, reason: str) -> None:
    with pytest.raises(EgressRefused) as info:
        POLICY.check(url)
    assert reason in info.value.message, info.value.message
    assert info.value.code == "llm.egress_refused"


def test_the_empty_policy_refuses_everything() -> None:
    with pytest.raises(EgressRefused, match="allowlist"):
        EgressPolicy().check("https://api.openai.com/v1")


@pytest.mark.parametrize(("address", "verdict"), [
    ("8.8.8.8", None), ("2606:4700:4700::1111", None), ("1.1.1.1", None),
    ("169.254.169.254", "metadata"), ("fd00:ec2::254", "metadata"), ("100.100.100.200", "metadata"),
    ("168.63.129.16", "metadata"), ("::ffff:169.254.169.254", "metadata"), ("64:ff9b::a9fe:a9fe", "metadata"),
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"),
    ("10.1.2.3", "private"), ("172.31.255.255", "private"), ("192.168.0.1", "private"), ("100.64.0.1", "private"),
    ("fd12:3456::1", "private"),
    ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("224.0.0.251", "multicast"), ("ff02::fb", "multicast"),
    ("240.0.0.1", "reserved"), ("192.0.2.1", "reserved"), ("198.18.0.1", "reserved"), ("2001:db8::1", "reserved"),
    ("fe80::1%eth0", "scoped"),
])
def test_address_classes(address: str, verdict: str | None) -> None:
    assert classify(ipaddress.ip_address(address)) == verdict


@pytest.mark.parametrize(("pattern", "problem"), [
    ("api.openai.com", "scheme"),
    ("ftp://api.openai.com", "scheme"),
    ("https://user@api.openai.com", "'@'"),
    ("https://*.*.example.com", "not a valid host"),
    ("https://a.*.example.com", "not a valid host"),
    ("https://*example.com", "not a valid host"),
    ("https://*.10.0.0.5", "only goes before a DNS name"),
    ("https://api.openai.com/v1?x=1", "query"),
    ("https://api.openai.com:70000", "out of range"),
    ("http://2852039166", "numeric host"),
])
def test_malformed_patterns_say_what_is_wrong(pattern: str, problem: str) -> None:
    with pytest.raises(ValueError) as info:
        UrlPattern.parse(pattern)
    assert problem in str(info.value) and repr(pattern) in str(info.value)


def test_pattern_path_is_a_prefix_on_segment_boundaries() -> None:
    policy = EgressPolicy.from_patterns(["https://gw.test/openai/v1/"])
    policy.check("https://gw.test/openai/v1")
    policy.check("https://gw.test/openai/v1/chat/completions")
    for url in ("https://gw.test/openai/v10", "https://gw.test/openai", "https://gw.test/"):
        with pytest.raises(EgressRefused):
            policy.check(url)


def test_a_name_pattern_never_waives_the_address_rules() -> None:
    """The operator listed the NAME: it must still resolve to public addresses only.
    Every address is checked, not just the first."""
    policy = EgressPolicy.from_patterns(["http://llm.corp.test:8000"])
    pinned = policy.pin("http://llm.corp.test:8000/v1", resolve=lambda host, port: ["93.184.216.34"])
    assert pinned.url == "http://93.184.216.34:8000/v1" and pinned.headers == {"Host": "llm.corp.test:8000"}
    for answer in (["127.0.0.1"], ["10.0.0.7"], ["169.254.169.254"], ["93.184.216.34", "10.0.0.7"],
                   ["::ffff:127.0.0.1"]):
        with pytest.raises(EgressRefused, match="resolves to"):
            policy.pin("http://llm.corp.test:8000/v1", resolve=lambda host, port, a=answer: a)


def test_pinning_keeps_the_name_for_tls() -> None:
    policy = EgressPolicy.from_patterns(["https://*.example.com"])
    pinned = policy.pin("https://api.example.com/v1/chat", resolve=lambda host, port: ["2606:4700::1111"])
    assert pinned.url == "https://[2606:4700::1111]/v1/chat"
    assert pinned.headers == {"Host": "api.example.com"}
    assert pinned.extensions == {"sni_hostname": "api.example.com"}


def test_a_name_that_does_not_resolve_is_unavailable_not_refused() -> None:
    def fail(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(ProviderUnavailable, match="cannot resolve"):
        EgressPolicy.from_patterns(["https://api.example.com"]).pin("https://api.example.com", resolve=fail)
