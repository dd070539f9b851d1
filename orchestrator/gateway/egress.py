"""Where a model call may go: the operator's allowlist of base URLs and the address rules.

A plan-defined model (untrusted input in a cluster) may call a URL only when

1. the URL parses strictly (see :func:`parse_url`): ``http`` or ``https``, no
   credentials, no query or fragment, no backslash, ``@``, whitespace or control
   character anywhere, a port in 1-65535, a host that is a canonical IPv4
   dotted quad, a bracketed IPv6 literal without a zone id, or a DNS name of
   letters, digits and hyphens (IDNA names are compared in their ``xn--`` form);
   numeric hosts that resolvers read as IPv4 in other notations (``2852039166``,
   ``0xa9fea9fe``, ``0251.0376.0251.0376``, ``127.1``) are refused outright;
2. it matches a pattern of the operator's allowlist (:class:`UrlPattern`);
3. every address it reaches is a public unicast address (:func:`classify`): the
   literal in the URL, or — at call time — every address its name resolves to.
   The one exception: a loopback, private or link-local address written
   literally in a matching pattern (``http://10.0.0.5:8000``) — the operator
   listed that address. Cloud-metadata addresses and names, the unspecified
   address, multicast and reserved ranges are never allowed. A DNS-name pattern
   never waives the address rules: a name can be re-pointed by whoever controls
   its zone, a literal cannot.

At call time :meth:`EgressPolicy.pin` resolves the name once, checks every
address, and returns a request aimed at the checked address (the URL's host
replaced by the IP, the original ``Host`` header, and the ``sni_hostname``
extension so that TLS still sends and verifies the real name). There is no
second lookup between the check and the connect, so a DNS answer that changes
in between (rebinding) cannot redirect the call. Redirects are never followed
(:mod:`orchestrator.gateway.providers.http`).

Pattern syntax (``CONCLAVE_ALLOWED_BASE_URLS``): ``scheme://host[:port][/path]``.
The host matches exactly, case-insensitively, one trailing dot ignored; ``*.``
before a name matches any name below it (``*.example.com`` matches
``api.example.com`` and ``a.b.example.com``, not ``example.com``) — the only
wildcard. No port means the scheme's default port (80, 443), never "any port".
A path is a prefix on segment boundaries: ``/v1`` matches ``/v1`` and
``/v1/chat/completions``, not ``/v10``.

This module is a leaf of ``orchestrator.gateway``: it imports nothing of Conclave outside it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from orchestrator.gateway.failures import EgressRefused, ProviderUnavailable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_PORTS = {"http": 80, "https": 443}

#: Addresses of cloud instance-metadata and platform services: never a model's.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",   # AWS, GCP, Azure, OCI, DigitalOcean, OpenStack
    "169.254.170.2",     # AWS ECS task metadata
    "169.254.169.253",   # AWS VPC DNS
    "169.254.169.123",   # AWS time sync
    "fd00:ec2::254",     # AWS IMDS over IPv6
    "fd00:ec2::253",     # AWS VPC DNS over IPv6
    "fd00:ec2::123",     # AWS time sync over IPv6
    "100.100.100.200",   # Alibaba Cloud
    "168.63.129.16",     # Azure platform (wireserver)
))

#: Names of metadata services, compared after normalisation (lower case, no trailing dot).
METADATA_HOSTS = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog", "instance-data",
    "instance-data.ec2.internal", "metadata.tencentyun.com", "metadata.azure.internal",
})

_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598)
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))

#: Classes an operator may waive by listing the literal address; the others never are.
WAIVABLE = frozenset({"loopback", "private", "link-local"})
_SEVERITY = ("metadata", "scoped", "unspecified", "multicast", "reserved", "link-local", "loopback", "private")

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_FORBIDDEN_CHARS = re.compile(r"[\s\\@\x00-\x1f\x7f]")
_ENCODED_SEPARATORS = re.compile(r"%(2e|2f|5c|00)", re.IGNORECASE)
_MAX_URL = 2000
_AUTHORITY = re.compile(r"^(\[[^\]]*\]|[^:\[\]]*)(:([1-9][0-9]{0,4})?)?$")  # host, then a canonical port


@dataclass(frozen=True)
class Target:
    """A URL reduced to what decides where a connection goes."""

    scheme: str
    host: str  # ASCII, lower case, no trailing dot; an IPv6 literal without brackets
    port: int  # explicit or the scheme's default
    path: str  # the normalised path ('' or '/…')
    ip: IPAddress | None  # the host when it is a literal address

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if isinstance(self.ip, ipaddress.IPv6Address) else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"


@dataclass(frozen=True)
class Pinned:
    """A request aimed at a checked address: send it to ``url`` with ``headers`` and
    ``extensions`` added, and it reaches that address and nothing else."""

    url: str
    headers: dict[str, str]
    extensions: dict[str, Any]
    address: IPAddress


def classify(ip: IPAddress) -> str | None:
    """Why an address is refused (``"metadata"``, ``"loopback"``, …), or None for a
    public unicast address. IPv6 forms that embed an IPv4 address (mapped, 6to4,
    NAT64, Teredo) are judged by the embedded address too, the stricter verdict wins."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        return "scoped"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return _classify_one(ip.ipv4_mapped)  # ::ffff:a.b.c.d is that IPv4 address on the wire
    own = _classify_one(ip)
    embedded = [_classify_one(v4) for v4 in _embedded_ipv4(ip)]
    verdicts = [v for v in (own, *embedded) if v is not None]
    if not verdicts:
        return None
    return min(verdicts, key=_SEVERITY.index)


def _classify_one(ip: IPAddress) -> str | None:
    if ip in METADATA_ADDRESSES:
        return "metadata"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return "private"
    if ip.is_private and _rfc_private(ip):
        return "private"
    if ip.is_reserved or ip.is_private or not ip.is_global:
        return "reserved"
    return None


def _rfc_private(ip: IPAddress) -> bool:
    """RFC 1918 and unique-local addresses: the ones an operator may host models on."""
    nets = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16") if ip.version == 4 else ("fc00::/7",)
    return any(ip in ipaddress.ip_network(n) for n in nets)


def _embedded_ipv4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found = [ip.sixtofour] if ip.sixtofour is not None else []
    if ip.teredo is not None:
        found.extend(ip.teredo)
    if any(ip in net for net in _NAT64) or (int(ip) >> 32 == 0 and int(ip) > 1):  # NAT64, ::a.b.c.d
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def parse_url(url: str, *, pattern: bool = False) -> tuple[Target, bool]:
    """Strictly parse ``url`` (or an allowlist pattern); returns the target and whether
    its host began with ``*.`` (patterns only). Raises :class:`EgressRefused`."""
    if not isinstance(url, str) or not url:
        raise EgressRefused("the URL is empty")
    if len(url) > _MAX_URL:
        raise EgressRefused(f"the URL is longer than {_MAX_URL} characters")
    if _FORBIDDEN_CHARS.search(url):
        raise EgressRefused("the URL contains '@', a backslash, whitespace or a control character")
    wildcard = False
    text = url
    if pattern and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://\*\.", url):
        wildcard = True
        text = url.replace("*.", "", 1)
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise EgressRefused(f"the URL does not parse ({_short(exc)})") from None
    scheme = parsed.scheme
    if scheme not in DEFAULT_PORTS:
        raise EgressRefused(f"the scheme must be http or https, not {scheme or 'missing'!r}")
    if parsed.userinfo:
        raise EgressRefused("credentials in the URL are refused")
    if parsed.query or parsed.fragment or "?" in text or "#" in text:
        raise EgressRefused("a query or fragment is refused")
    if not _AUTHORITY.fullmatch(text.split("://", 1)[-1].split("/", 1)[0]):
        raise EgressRefused("the port must be written as plain digits (no sign, no leading zero)")
    port = parsed.port if parsed.port is not None else DEFAULT_PORTS[scheme]
    if not 1 <= port <= 65535:
        raise EgressRefused(f"port {port} is out of range")
    raw_path = parsed.raw_path.decode("ascii")
    if _ENCODED_SEPARATORS.search(raw_path):
        raise EgressRefused("percent-encoded dots, slashes, backslashes or NULs in the path are refused")
    host, ip = _host(parsed.raw_host.decode("ascii"), bracketed=parsed.netloc.startswith(b"["))
    if wildcard and ip is not None:
        raise EgressRefused("'*.' only goes before a DNS name")
    path = parsed.path.rstrip("/") if pattern else parsed.path
    return Target(scheme, host, port, "" if path == "/" else path, ip), wildcard


def _host(raw: str, *, bracketed: bool) -> tuple[str, IPAddress | None]:
    if not raw:
        raise EgressRefused("the URL has no host")
    if bracketed or ":" in raw:
        if "%" in raw:
            raise EgressRefused("IPv6 zone ids are refused")
        try:
            return raw.lower(), ipaddress.IPv6Address(raw)
        except ValueError:
            raise EgressRefused(f"{raw!r} is not an IPv6 address") from None
    name = raw.lower()
    if name.endswith("."):
        name = name[:-1]
    labels = name.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        try:
            ip = ipaddress.IPv4Address(name)
        except ValueError:
            raise EgressRefused(f"{raw!r} is a numeric host that is not a dotted-quad IPv4 address") from None
        if str(ip) != name:
            raise EgressRefused(f"{raw!r} is not a canonical IPv4 address")
        return name, ip
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise EgressRefused(f"{raw!r} is not a valid host name")
    return name, None


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]


@dataclass(frozen=True)
class UrlPattern:
    """One allowlist entry; see the module docstring for the syntax."""

    text: str
    scheme: str
    host: str
    wildcard: bool
    port: int
    path: str
    ip: IPAddress | None

    @classmethod
    def parse(cls, text: str) -> UrlPattern:
        """Raises ``ValueError`` saying what is wrong with the pattern."""
        try:
            target, wildcard = parse_url(text.strip(), pattern=True)
        except EgressRefused as exc:
            raise ValueError(f"{text!r}: {exc.message}") from None
        return cls(text.strip(), target.scheme, target.host, wildcard, target.port, target.path, target.ip)

    def matches(self, target: Target) -> bool:
        if target.scheme != self.scheme or target.port != self.port:
            return False
        if self.wildcard:
            if target.ip is not None or not target.host.endswith("." + self.host):
                return False
        elif target.host != self.host:
            return False
        return not self.path or target.path == self.path or target.path.startswith(self.path + "/")

    def waives(self, target: Target, address: IPAddress) -> bool:
        """Whether this (matching) pattern lists ``address`` literally."""
        return self.ip is not None and not self.wildcard and self.ip == address == target.ip


Resolver = Callable[[str, int], Sequence[str]]


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host`` (one lookup)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in seen:
            seen.append(address)
    return seen


@dataclass(frozen=True)
class EgressPolicy:
    """The operator's allowlist and the address rules. The empty policy refuses everything.
    ``setting``: the variable the allowlist comes from, named when a URL matches none of it."""

    allowed: tuple[UrlPattern, ...] = ()
    setting: str = "CONCLAVE_ALLOWED_BASE_URLS"

    @classmethod
    def from_patterns(cls, patterns: Iterable[str], *, setting: str = "CONCLAVE_ALLOWED_BASE_URLS") -> EgressPolicy:
        return cls(tuple(UrlPattern.parse(p) for p in patterns), setting)

    def check(self, url: str) -> Target:
        """The checks that need no DNS: syntax, allowlist, literal addresses, metadata
        names. Returns the target; raises :class:`EgressRefused` naming the reason."""
        target, _ = parse_url(url)
        if target.ip is None and target.host in METADATA_HOSTS:
            raise EgressRefused(f"{target.host} is a cloud metadata service")
        pattern = self._match(target)
        if target.ip is not None:
            verdict = classify(target.ip)
            waived = verdict in WAIVABLE and pattern is not None and pattern.waives(target, target.ip)
            if verdict is not None and not waived:
                raise EgressRefused(f"{_display(target)} is a {verdict} address")
        if pattern is None:
            raise EgressRefused(f"{_display(target)} matches no entry of the operator's allowlist ({self.setting})")
        return target

    def pin(self, url: str, *, resolve: Resolver | None = None) -> Pinned:
        """Check ``url``, resolve its host once, check every address, and aim the request
        at the first one. Raises :class:`EgressRefused`, or :class:`ProviderUnavailable`
        when the name does not resolve."""
        target = self.check(url)
        pattern = self._match(target)
        assert pattern is not None  # check() returned
        if target.ip is not None:
            addresses: list[IPAddress] = [target.ip]
        else:
            try:
                found = (resolve or system_resolver)(target.host, target.port)
            except OSError as exc:
                raise ProviderUnavailable(f"cannot resolve {target.host}: {_short(exc)}") from None
            addresses = [_parse_resolved(a, target) for a in found]
            if not addresses:
                raise ProviderUnavailable(f"{target.host} resolves to no address")
        for address in addresses:
            self._check_address(target, pattern, address)
        chosen = addresses[0]
        pinned_url = str(httpx.URL(url).copy_with(host=str(chosen)))
        extensions: dict[str, Any] = {}
        if target.scheme == "https" and target.ip is None:
            extensions["sni_hostname"] = target.host
        return Pinned(pinned_url, {"Host": target.host_header}, extensions, chosen)

    def _match(self, target: Target) -> UrlPattern | None:
        return next((p for p in self.allowed if p.matches(target)), None)

    @staticmethod
    def _check_address(target: Target, pattern: UrlPattern, address: IPAddress) -> None:
        verdict = classify(address)
        if verdict is None:
            return
        if verdict in WAIVABLE and pattern.waives(target, address):
            return
        where = _display(target) if target.ip is not None else f"{target.host} resolves to {address}, which"
        raise EgressRefused(f"{where} is a {verdict} address")


def _parse_resolved(address: str, target: Target) -> IPAddress:
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        raise EgressRefused(f"{target.host} resolved to something that is not an address") from None


def _display(target: Target) -> str:
    return f"{target.scheme}://{target.host_header}{target.path}"
