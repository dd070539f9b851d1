"""Properties of the egress check over generated URL spellings and address forms (I18).

A URL is allowed only if the address it would actually reach is in an allowed class and
matches the allowlist: checked against an independent oracle written with ``ipaddress``
for spellings that name one address unambiguously (a canonical dotted quad, one trailing
dot, a bracketed IPv6 literal in any case, IPv4-mapped and -compatible forms), and a
refusal is asserted for every spelling the module documents as refused (decimal, octal,
hex and short IPv4 forms, zone ids, unbracketed IPv6, userinfo, percent-encoded hosts,
ports with a sign or a leading zero or out of range). Metadata, unspecified, multicast and
reserved addresses are never reached, even when the operator lists them literally; a listed
DNS name never waives the address rules."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.gateway.egress import METADATA_ADDRESSES, METADATA_HOSTS, EgressPolicy
from orchestrator.gateway.failures import EgressRefused
from tests.unit.bounded import bounded

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

V4 = ["169.254.169.254", "169.254.170.2", "100.100.100.200", "168.63.129.16", "127.0.0.1", "127.1.2.3",
      "10.0.0.5", "172.16.3.4", "192.168.1.1", "169.254.1.1", "0.0.0.0", "0.1.2.3", "224.0.0.1",
      "239.255.255.250", "255.255.255.255", "240.0.0.1", "100.64.0.1", "192.0.2.1", "198.18.0.1",
      "8.8.8.8", "1.1.1.1", "93.184.216.34"]
V6 = ["::1", "::", "fe80::1", "ff02::1", "fd00:ec2::254", "fd00::5", "fc00::1", "2606:4700:4700::1111",
      "2001:4860:4860::8888", "::ffff:169.254.169.254", "::ffff:127.0.0.1", "::ffff:8.8.8.8", "::ffff:10.0.0.5",
      "::169.254.169.254", "::8.8.8.8", "64:ff9b::a9fe:a9fe", "64:ff9b::808:808", "2002:a9fe:a9fe::1",
      "2002:808:808::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:db8::1", "100::1"]
WAIVABLE_NETS = [ipaddress.ip_network(n)
                 for n in ("10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "fc00::/7", "fe80::/10")]
MOSTLY_PUBLIC_V4 = st.tuples(st.integers(1, 223), *[st.integers(0, 255)] * 3).map(
    lambda t: ipaddress.IPv4Address(bytes(t)))
MOSTLY_PUBLIC = st.one_of(MOSTLY_PUBLIC_V4, st.integers(0, 2**125 - 1).map(
    lambda n: ipaddress.IPv6Address(1 << 125 | n)))  # 2000::/3, the global unicast space
WAIVABLE = st.tuples(st.sampled_from(WAIVABLE_NETS), st.integers(0, 2**64)).map(
    lambda t: t[0][t[1] % t[0].num_addresses])
IPV4 = st.one_of(st.sampled_from([ipaddress.IPv4Address(a) for a in V4]), MOSTLY_PUBLIC_V4,
                 st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address))
# IPv4 addresses carried in IPv6: mapped (::ffff:a.b.c.d), compatible (::a.b.c.d), NAT64, 6to4
CARRIED = st.tuples(st.sampled_from([0xFFFF << 32, 0, 0x64FF9B << 96, 0x2002 << 112]), IPV4).map(
    lambda t: ipaddress.IPv6Address(t[0] | (int(t[1]) << 80 if t[0] == 0x2002 << 112 else int(t[1]))))
ADDRESSES = st.one_of(
    st.sampled_from([ipaddress.ip_address(a) for a in V4 + V6]), IPV4, MOSTLY_PUBLIC, WAIVABLE, CARRIED,
    st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address))

# ------------------------------------------------------------------ the oracle


def reached(ip: IP) -> IP:
    """The address a connection to ``ip`` reaches: ::ffff:a.b.c.d is a.b.c.d on the wire."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def embedded(ip: IP) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries (6to4, Teredo, NAT64, IPv4-compatible)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found = [v for v in (ip.sixtofour, *(ip.teredo or ())) if v is not None]
    nat64 = ip in ipaddress.ip_network("64:ff9b::/96") or ip in ipaddress.ip_network("64:ff9b:1::/48")
    if nat64 or (int(ip) >> 32 == 0 and int(ip) > 1):  # :: and ::1 are themselves, not 0.0.0.0/1
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


PRIVATE = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                                             "fc00::/7")]
RANK = {"public": 0, "waivable": 1, "never": 2}


def one_class(ip: IP) -> str:
    if ip in METADATA_ADDRESSES or ip.is_unspecified or ip.is_multicast:
        return "never"
    if ip.is_loopback or ip.is_link_local or any(ip in n for n in PRIVATE if n.version == ip.version):
        return "waivable"
    return "public" if ip.is_global and not ip.is_reserved else "never"


def address_class(ip: IP) -> str:
    """``public``; ``waivable`` (loopback, private, link-local: only when listed literally);
    or ``never`` (metadata, unspecified, multicast, reserved)."""
    ip = reached(ip)
    return max((one_class(v) for v in (ip, *embedded(ip))), key=RANK.__getitem__)


@dataclass(frozen=True)
class Entry:
    """An allowlist pattern as the oracle sees it."""

    scheme: str
    host: str  # an address literal (IPv6 in brackets) or a name, as written
    port: int | None
    path: str

    @property
    def text(self) -> str:
        return f"{self.scheme}://{self.host}{'' if self.port is None else f':{self.port}'}{self.path}"

    @property
    def address(self) -> IP | None:
        try:
            return ipaddress.ip_address(self.host.strip("[]"))
        except ValueError:
            return None

    def lists(self, scheme: str, ip: IP, port: int, path: str) -> bool:
        default = {"http": 80, "https": 443}[self.scheme]
        prefix = self.path.rstrip("/")
        return (self.scheme == scheme and (self.port or default) == port and self.address == ip
                and (not prefix or path == prefix or path.startswith(prefix + "/")))


SCHEMES = st.sampled_from(["http", "https"])
PORTS = st.sampled_from([None, None, 80, 443, 8000, 65535])
PATHS = st.sampled_from(["", "/", "/v1", "/v1/chat", "/v10"])


def literal(ip: IP) -> str:
    return f"[{ip.compressed}]" if ip.version == 6 else str(ip)


@st.composite
def entries(draw: st.DrawFn, near: IP | None = None) -> Entry:
    host = draw(st.one_of(ADDRESSES.map(literal), st.sampled_from(["api.example.com", "*.example.com",
                                                                   "metadata.google.internal"]),
                          *([st.just(literal(near))] if near is not None else [])))
    return Entry(draw(SCHEMES), host, draw(PORTS), draw(st.sampled_from(["", "/v1"])))


# ------------------------------------------------------------------ spellings of one address


def v4_refused_forms(ip: ipaddress.IPv4Address) -> list[str]:
    """Numeric spellings a resolver reads as ``ip`` but that the module refuses outright."""
    n, parts = int(ip), [int(p) for p in str(ip).split(".")]
    forms = [
        str(n), hex(n), f"0{n:o}",                                    # one number: decimal, hex, octal
        ".".join(f"0{p:o}" for p in parts), ".".join(hex(p) for p in parts),  # per-part octal, hex
        f"{parts[0]}.{parts[1]}.{parts[2] * 256 + parts[3]}", f"{parts[0]}.{n & 0xFFFFFF}",  # short forms
        "0" + str(ip), ".".join(f"{p:03d}" for p in parts),           # leading zeros
        "%" + f"{ord(str(ip)[0]):02X}" + str(ip)[1:],                 # a percent-encoded digit
        str(ip) + "..",                                               # two trailing dots
    ]
    return [f for f in forms if f != str(ip)]  # 127.112.228.100 is its own zero-padded form


def v6_refused_forms(ip: ipaddress.IPv6Address) -> list[str]:
    return [f"[{ip.compressed}%25eth0]", f"[{ip.compressed}%eth0]", ip.compressed, ip.exploded]


@dataclass(frozen=True)
class Case:
    url: str
    scheme: str
    ip: IP
    port: int
    path: str
    canonical: bool  # spelled as the allowlist writes it (the oracle can predict a match)


@st.composite
def cases(draw: st.DrawFn, ip: IP, *, refused: bool) -> Case:
    """A URL naming ``ip`` unambiguously, or (``refused``) in a form the module refuses."""
    scheme = draw(SCHEMES)
    shown_scheme = draw(st.sampled_from([scheme, scheme.upper(), scheme.capitalize()]))
    port = draw(PORTS)
    path = draw(PATHS)
    effective = port or {"http": 80, "https": 443}[scheme]
    port_text = "" if port is None else f":{port}"
    if isinstance(ip, ipaddress.IPv4Address):
        good = [str(ip), str(ip) + "."]
        bad = v4_refused_forms(ip)
    else:
        good = [literal(ip), literal(ip).upper(), f"[{ip.exploded}]"]
        if ip.ipv4_mapped is not None:
            good.append(f"[::ffff:{ip.ipv4_mapped}]")
        bad = v6_refused_forms(ip)
    host = draw(st.sampled_from(good))
    if refused:
        how = draw(st.sampled_from(["host", "userinfo", "port"]))
        if how == "host":
            host = draw(st.sampled_from(bad))
        elif how == "userinfo":
            host = draw(st.sampled_from(["user@", "user:pass@", "a%40b@", ":@"])) + host
        else:
            port_text = draw(st.sampled_from([f":0{effective}", f":+{effective}", f":00{effective}", f": {effective}",
                                              ":0", ":65536", f":{effective + 65536}", ":-1", ":8o"]))
    canonical = not refused and host.lower() in (literal(ip), str(ip), str(ip) + ".")
    url = f"{shown_scheme}://{host}{port_text}{path}"
    return Case(url, scheme, ip, effective, "" if path == "/" else path, canonical)


@st.composite
def policies_and_cases(draw: st.DrawFn, *, refused: bool = False) -> tuple[list[Entry], Case]:
    ip = draw(ADDRESSES)
    case = draw(cases(ip, refused=refused))
    allow = draw(st.lists(entries(near=ip), max_size=3))
    if refused or draw(st.sampled_from([True, True, True, False])):  # an entry for this very address
        port = draw(st.sampled_from([None, case.port])) if case.port in (80, 443) else case.port
        allow.append(Entry(case.scheme, literal(ip), port, draw(st.sampled_from(["", "/v1"]))))
    return allow, case


def allowed(policy: EgressPolicy, url: str) -> bool:
    try:
        policy.check(url)
    except EgressRefused:
        return False
    return True


@bounded(300, deadline_ms=1000)
@given(policies_and_cases())
def test_a_literal_url_is_allowed_exactly_where_the_oracle_allows_it(drawn: tuple[list[Entry], Case]) -> None:
    allow, case = drawn
    policy = EgressPolicy.from_patterns([e.text for e in allow])
    verdict = address_class(case.ip)
    listing = [e for e in allow if e.lists(case.scheme, case.ip, case.port, case.path)]
    expected = bool(listing) and verdict in ("public", "waivable")
    if allowed(policy, case.url):
        assert expected, f"{case.url} ({verdict}) allowed by {[e.text for e in allow]}"
        pinned = policy.pin(case.url, resolve=lambda host, port: pytest.fail(f"a literal was resolved: {host}"))
        assert reached(pinned.address) == reached(case.ip)
        assert reached(ipaddress.ip_address(httpx.URL(pinned.url).host)) == reached(case.ip)
    elif case.canonical:
        assert not expected, f"{case.url} ({verdict}) refused although {listing[0].text} lists it"


@bounded(200, deadline_ms=1000)
@given(policies_and_cases(refused=True))
def test_ambiguous_spellings_are_refused_even_when_the_address_is_listed(drawn: tuple[list[Entry], Case]) -> None:
    """Refused with the address listed, and with the very same spelling listed (when the
    pattern parser lets it through at all)."""
    allow, case = drawn
    assert not allowed(EgressPolicy.from_patterns([e.text for e in allow]), case.url), case.url
    try:
        same = EgressPolicy.from_patterns([case.url.split("?")[0]])
    except ValueError:
        return
    assert not allowed(same, case.url), f"{case.url} allowed when listed as written"


@bounded(150, deadline_ms=1000)
@given(st.sampled_from([a for a in V4 + V6 if address_class(ipaddress.ip_address(a)) == "never"]), SCHEMES, PORTS)
def test_forbidden_classes_are_never_reached_even_when_listed(address: str, scheme: str, port: int | None) -> None:
    ip = ipaddress.ip_address(address)
    entry = Entry(scheme, literal(ip), port, "")
    policy = EgressPolicy.from_patterns([entry.text])
    for host in {literal(ip), str(ip) + "." if ip.version == 4 else literal(ip).upper()}:
        url = f"{scheme}://{host}{'' if port is None else f':{port}'}/v1"
        assert not allowed(policy, url), f"{url} reached a forbidden address listed literally"


# ------------------------------------------------------------------ names


NAMES = ["api.example.com", "a.b.example.com", "example.com", "evil-example.com", "metadata.google.internal",
         "instance-data", "llm.corp.test"]


@st.composite
def name_spellings(draw: st.DrawFn) -> tuple[str, str, bool]:
    """(spelling, the name it names, whether the module documents it as accepted)."""
    name = draw(st.sampled_from(NAMES))
    form = draw(st.sampled_from(["plain", "upper", "dot", "mixed", "two-dots", "percent", "userinfo"]))
    spelled = {"plain": name, "upper": name.upper(), "dot": name + ".",
               "mixed": "".join(c.upper() if i % 2 else c for i, c in enumerate(name)) + ".",
               "two-dots": name + "..", "percent": f"%{ord(name[0]):02x}{name[1:]}",
               "userinfo": f"{name}@{name}"}[form]
    return spelled, name, form in ("plain", "upper", "dot", "mixed")


ANSWERS = st.one_of(st.lists(MOSTLY_PUBLIC, min_size=1, max_size=3), st.lists(ADDRESSES, min_size=1, max_size=3),
                    st.tuples(MOSTLY_PUBLIC, WAIVABLE).map(list))  # a public and a private address
HOSTS = ["api.example.com", "*.example.com", "llm.corp.test", "metadata.google.internal", "instance-data",
         "10.0.0.5", "127.0.0.1"]


@bounded(300, deadline_ms=1000)
@given(name_spellings(), ANSWERS, SCHEMES, st.lists(st.sampled_from(HOSTS), max_size=2), st.data())
def test_a_name_reaches_only_public_addresses_and_only_when_listed(
        spelling: tuple[str, str, bool], answer: list[IP], scheme: str, hosts: list[str], data: st.DataObject) -> None:
    spelled, name, accepted = spelling
    if data.draw(st.sampled_from([True, True, False])):  # mostly, a pattern that names it (or looks as if it does)
        hosts.append(data.draw(st.sampled_from([name, "*." + name.partition(".")[2], "*.example.com"])))
    hosts = [h for h in hosts if h != "*."]
    policy = EgressPolicy.from_patterns([f"{scheme}://{h}" for h in hosts])
    listed = any(h == name or (h.startswith("*.") and name.endswith(h[1:])) for h in hosts)
    public = all(address_class(a) == "public" for a in answer)
    expected = accepted and listed and public and name not in METADATA_HOSTS
    url = f"{data.draw(st.sampled_from([scheme, scheme.upper()]))}://{spelled}/v1"
    try:
        pinned = policy.pin(url, resolve=lambda host, port: [str(a) for a in answer])
    except EgressRefused:
        assert not expected, f"{url} -> {answer} refused although {hosts} lists it"
        return
    assert expected, f"{url} -> {[str(a) for a in answer]} allowed by {hosts}"
    assert pinned.address == answer[0] and pinned.headers["Host"] == name
