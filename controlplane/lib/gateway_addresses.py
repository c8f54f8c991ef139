"""Which gateway addresses a node may report: the control plane sends replay traffic (a client key, customers' logged
messages) to them, so a node must not be able to point it anywhere else.

An address is `http(s)://host[:port]` with nothing after the host but an optional "/". The host must be one the
operator allows (`NODE_GATEWAY_ALLOWED`: addresses, networks, host names, `*.suffix` patterns; by default only the
address the node's own WebSocket came from, any loopback address or `localhost` when that was loopback), on a port
of `NODE_GATEWAY_PORTS` when that is set. Link-local and cloud metadata addresses are refused whatever the operator
allows, as are IPv4 addresses in IPv6 or non-canonical disguise.
"""

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

MAX_URL_CHARS = 500
# Cloud instance metadata services: they answer anyone on the host with credentials.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "192.0.0.192")
)
METADATA_NAMES = frozenset(
    {
        "metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal",
        "metadata.azure.com", "metadata.tencentyun.com", "metadata.platformequinix.com",
    }
)  # fmt: skip
# IPv6 prefixes that carry an IPv4 address (NAT64, 6to4, Teredo, IPv4-compatible): write the IPv4 address itself.
_IPV4_CARRIERS = tuple(
    ipaddress.ip_network(prefix) for prefix in ("64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32", "::/96")
)
# 0.0.0.0/8 reaches this host on Linux; the IPv6 unspecified address (::) is in IPv6's reserved ranges.
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_BROADCAST = ipaddress.ip_address("255.255.255.255")
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


class GatewayRefused(ValueError):
    """The reported gateway address is not one the control plane sends to; the message says why."""


@dataclass(frozen=True)
class Allowed:
    """The operator's `NODE_GATEWAY_ALLOWED`, parsed: networks, exact host names and `*.suffix` patterns."""

    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()

    @property
    def is_default(self) -> bool:
        return not (self.networks or self.names or self.suffixes)


def allowed_parse(entries: list[str]) -> Allowed:
    """`NODE_GATEWAY_ALLOWED`'s entries; ValueError naming the first that is no address, network or host name."""
    networks, names, suffixes = [], set(), []
    for entry in entries:
        text = entry.strip().lower().rstrip(".")
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
            continue
        except ValueError:
            pass
        pattern = text.removeprefix("*.")
        if not _is_host_name(pattern):
            raise ValueError(f"{entry!r} is not an address, a network (10.0.0.0/8), a host name or *.suffix")
        if pattern != text:
            suffixes.append("." + pattern)
        else:
            names.add(text)
    return Allowed(tuple(networks), frozenset(names), tuple(suffixes))


def ports_parse(entries: list[str]) -> frozenset[int]:
    """`NODE_GATEWAY_PORTS`' entries (`9000`, `9000-9099`); ValueError naming the first that is neither."""
    ports: set[int] = set()
    for entry in entries:
        low, _, high = entry.strip().partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"{entry!r} is not a port or a range of ports (9000-9099)") from None
        if not 1 <= first <= last <= 65535:
            raise ValueError(f"{entry!r} is not a port or a range of ports between 1 and 65535")
        ports.update(range(first, last + 1))
    return frozenset(ports)


def gateway_url_checked(url, *, agent_address: str | None, resolve: bool = False) -> str:
    """The gateway's base URL (`scheme://host:port`, no trailing slash) if the control plane may send to it, else
    GatewayRefused. `agent_address` is where the node's WebSocket came from (None when unknown); `resolve` also looks
    a host name up and refuses it when any of its addresses is a forbidden one (for the moment of sending)."""
    if not isinstance(url, str) or not url:
        raise GatewayRefused("gateway_url: not reported")
    if len(url) > MAX_URL_CHARS or not url.isascii() or not url.isprintable() or any(c.isspace() for c in url):
        raise GatewayRefused(f"gateway_url: must be printable ASCII of at most {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise GatewayRefused(f"gateway_url: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise GatewayRefused("gateway_url: must start with http:// or https://")
    if "@" in parts.netloc:
        raise GatewayRefused("gateway_url: must not carry a user name or password")
    if "?" in url or "#" in url:
        raise GatewayRefused("gateway_url: must not carry a query or fragment")
    if parts.path not in ("", "/"):
        raise GatewayRefused("gateway_url: must not carry a path (the control plane adds /v1/...)")
    if port == 0:
        raise GatewayRefused("gateway_url: port 0 is no port")
    port = port or (443 if parts.scheme == "https" else 80)
    allowed_ports = ports_parse(settings.NODE_GATEWAY_PORTS)
    if allowed_ports and port not in allowed_ports:
        raise GatewayRefused(f"gateway_url: port {port} is not in NODE_GATEWAY_PORTS")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise GatewayRefused("gateway_url: has no host")
    address = _address(host)
    if address is not None:
        _check_address(address)
    elif host in METADATA_NAMES:
        raise GatewayRefused(f"gateway_url: {host} is a cloud metadata service")
    elif not _is_host_name(host):
        raise GatewayRefused(f"gateway_url: {host!r} is neither an IP address nor a host name")
    _check_allowed(host, address, agent_address)
    if resolve and address is None:
        _check_resolved(host, port, agent_address)
    return f"{parts.scheme}://{parts.netloc}"


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The host as an IP address; None for a host name. IPv4 in forms only inet_aton reads (`2852039166`,
    `0xa9.0xfe.0xa9.0xfe`, `169.254.43518`) is refused: resolvers read it as an address the allow-list never saw."""
    if "%" in host:
        raise GatewayRefused("gateway_url: an IPv6 zone (%) is not an address a client can use")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        socket.inet_aton(host)
    except OSError:
        return None
    raise GatewayRefused(f"gateway_url: {host!r} is an IPv4 address in disguise; write it as four decimal numbers")


def _check_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    """Refuse the addresses no allow-list can make right (loopback is decided with the node's own address)."""
    if address in METADATA_ADDRESSES:
        raise GatewayRefused(f"gateway_url: {address} is a cloud metadata service")
    if address.is_loopback:
        return
    if address.version == 6 and (address.ipv4_mapped or any(address in net for net in _IPV4_CARRIERS)):
        raise GatewayRefused(f"gateway_url: {address} carries an IPv4 address; write that address itself")
    if address.is_link_local:
        raise GatewayRefused(f"gateway_url: {address} is link-local (where metadata services live)")
    if address.is_multicast or address.is_reserved or address in _THIS_NETWORK or address == _BROADCAST:
        raise GatewayRefused(f"gateway_url: {address} is not an address a gateway listens on")


def _check_allowed(host: str, address, agent_address: str | None) -> None:
    agent = _agent_address(agent_address)
    loopback = host == "localhost" or (address is not None and address.is_loopback)
    if loopback:
        # The control plane's own loopback: only a node on this host has its gateway there, whatever is allowed.
        if agent is not None and agent.is_loopback:
            return
        raise GatewayRefused(f"gateway_url: {host} is the control plane's own host; the node connected from {agent}")
    allowed = allowed_parse(settings.NODE_GATEWAY_ALLOWED)
    if not allowed.is_default:
        if address is not None and any(address in network for network in allowed.networks):
            return
        if address is None and (host in allowed.names or host.endswith(allowed.suffixes)):
            return
        raise GatewayRefused(f"gateway_url: {host} is not in NODE_GATEWAY_ALLOWED")
    if agent is None:
        raise GatewayRefused(
            "gateway_url: the node's own address is unknown and NODE_GATEWAY_ALLOWED is empty, so no address is allowed"
        )
    if address is not None and address == agent:
        return
    raise GatewayRefused(
        f"gateway_url: {host} is not the address the node connected from ({agent}); "
        "list the gateways' addresses or networks in NODE_GATEWAY_ALLOWED"
    )


def _agent_address(value: str | None):
    try:
        address = ipaddress.ip_address(value or "")
    except ValueError:
        return None
    return address.ipv4_mapped or address if address.version == 6 else address


def _check_resolved(host: str, port: int, agent_address: str | None) -> None:
    """An allowed name must not lead where an address could not: checked on what the resolver answers now."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise GatewayRefused(f"gateway_url: {host} does not resolve ({exc})") from None
    for info in infos:
        resolved = _agent_address(str(info[4][0]).split("%")[0])
        if resolved is None:
            continue
        try:
            _check_address(resolved)
            if resolved.is_loopback:
                _check_allowed(str(resolved), resolved, agent_address)
        except GatewayRefused as exc:
            raise GatewayRefused(f"gateway_url: {host} resolves to {resolved}: {exc}") from None


def _is_host_name(host: str) -> bool:
    """ASCII letters, digits and hyphens in dot-separated labels: no IDNA mapping turns it into another name."""
    return 0 < len(host) <= 253 and all(_LABEL.match(label) for label in host.split("."))
