"""The egress URL parser at its edges: the last port, host-name length and URL length that
pass and the first that do not, a bare '?' or '#', the path and host as the pin sees them,
and a refusal's words (survivors of the systematic mutation run, docs/mutation.md; the address
rules are in test_egress.py)."""

from __future__ import annotations

import pytest

from orchestrator.core.settings import Settings
from orchestrator.gateway.egress import _MAX_URL, Target, UrlPattern, parse_url
from orchestrator.gateway.failures import EgressRefused, ProviderUnavailable

NAME_253 = ("a" * 63 + ".") * 3 + "a" * 61


def refusal(url: str, **kw: bool) -> str:
    with pytest.raises(EgressRefused) as info:
        parse_url(url, **kw)
    return info.value.message


def test_the_last_port_and_name_length_and_url_length_pass_and_the_next_do_not() -> None:
    assert parse_url("http://a.example:65535/")[0].port == 65535
    assert parse_url("http://a.example:1/")[0].port == 1
    assert refusal("http://a.example:65536/") == "port 65536 is out of range"
    assert "plain digits" in refusal("http://a.example:0/")
    assert parse_url(f"http://{NAME_253}/")[0].host == NAME_253
    assert "is not a valid host name" in refusal(f"http://{NAME_253}a/")
    base = "http://a.example/"
    assert parse_url(base + "x" * (_MAX_URL - len(base)))[0].host == "a.example"
    assert refusal(base + "x" * (_MAX_URL - len(base) + 1)) == f"the URL is longer than {_MAX_URL} characters"


@pytest.mark.parametrize("url", ["http://a.example/x?", "http://a.example/x#", "http://a.example/x?#",
                                 "http://a.example/x?q=1", "http://a.example/x#top"])
def test_an_empty_query_or_fragment_is_still_refused(url: str) -> None:
    assert refusal(url) == "a query or fragment is refused"


def test_what_the_pin_sees_of_host_and_path() -> None:
    assert parse_url("http://a.example/") == (Target("http", "a.example", 80, "", None), False)
    assert parse_url("https://A.Example./v1/")[0] == Target("https", "a.example", 443, "/v1/", None)
    assert parse_url("https://a.example/v1/", pattern=True)[0].path == "/v1"  # a pattern's prefix
    assert parse_url("https://a.example/v1/BOX/", pattern=True)[0].path == "/v1/BOX"  # only its last "/" goes
    v6 = parse_url("http://[2001:DB8::1]:8080/")[0]
    assert (v6.host, v6.port, str(v6.ip)) == ("2001:db8::1", 8080, "2001:db8::1")
    assert parse_url("https://*.a.example/", pattern=True) == (Target("https", "a.example", 443, "", None), True)
    assert "is not a valid host name" in refusal("https://*.a.example/")  # a wildcard only in a pattern


@pytest.mark.parametrize(("url", "words"), [
    ("", "the URL is empty"),
    ("http://u@a.example/", "the URL contains '@', a backslash, whitespace or a control character"),
    ("ftp://a.example/", "the scheme must be http or https, not 'ftp'"),
    ("a.example/x", "the scheme must be http or https, not 'missing'"),
    ("http://:80/", "the URL has no host"),
    ("http://[fe80::1%25eth0]/", "IPv6 zone ids are refused"),
    ("http://a.example/%2e%2e/x", "percent-encoded dots, slashes, backslashes or NULs in the path are refused"),
    ("http://a.example:+80/", "the port must be written as plain digits (no sign, no leading zero)"),
])
def test_a_refusal_says_what_is_wrong(url: str, words: str) -> None:
    assert refusal(url) == words


def test_a_wildcard_goes_only_before_a_name() -> None:
    assert refusal("https://*.1.2.3.4/", pattern=True) == "'*.' only goes before a DNS name"


def test_a_wildcard_pattern_may_spell_its_scheme_in_capitals() -> None:
    pattern = UrlPattern.parse("HTTPS://*.a.example")
    assert (pattern.scheme, pattern.host, pattern.wildcard) == ("https", "a.example", True)
    assert pattern.matches(parse_url("https://api.a.example/")[0])


def test_a_url_that_does_not_parse_says_why_and_a_scheme_without_slashes_is_refused() -> None:
    assert refusal("http://[::zz]/") == "the URL does not parse (Invalid IPv6 address: '[::zz]')"
    assert refusal("http:a.example")  # a refusal, not an error of the parser's own


def test_another_url_inside_the_path_is_only_a_path() -> None:
    target = parse_url("http://a.example/proxy/http://b.example:80x/")[0]
    assert (target.host, target.port, target.path) == ("a.example", 80, "/proxy/http://b.example:80x/")


def test_the_allowlist_a_refusal_names_is_the_setting_it_came_from() -> None:
    settings = Settings(allowed_base_urls="https://api.a.example", webhook_urls="https://hooks.a.example")
    with pytest.raises(EgressRefused) as caught:
        settings.egress_policy.check("https://other.example/v1")
    assert caught.value.message == ("https://other.example/v1 matches no entry of the operator's allowlist "
                                    "(CONCLAVE_ALLOWED_BASE_URLS)")
    with pytest.raises(EgressRefused) as caught:
        settings.webhook_policy.check("https://api.a.example/")
    assert caught.value.message.endswith("(CONCLAVE_WEBHOOK_URLS)")


def test_a_resolver_failure_is_told_in_at_most_120_characters() -> None:
    def failing(host: str, port: int) -> list[str]:
        raise OSError("no such host " + "x" * 300)

    policy = Settings(allowed_base_urls="https://api.a.example").egress_policy
    with pytest.raises(ProviderUnavailable) as caught:
        policy.pin("https://api.a.example/v1", resolve=failing)
    assert str(caught.value.message) == "cannot resolve api.a.example: no such host " + "x" * 107
