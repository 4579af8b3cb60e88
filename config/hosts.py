"""Which host names mean "this machine only" — for ``server.host`` and for a request's ``Host`` header.

Here (in ``config``) because three parts apply the same rule: ``serve`` refuses ``auth.mode: none`` on an
address other machines can reach, the start-up summary names the address, and the API refuses a
request whose ``Host`` is not this server's when nobody signs in (``connections.auth``).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

#: What the API accepts in ``Host`` with ``auth.mode: none`` besides ``server.public_url``'s host.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def is_loopback(host: str) -> bool:
    """True when ``host`` (a name or an address; IPv6 with or without brackets) reaches only this machine.

    ``localhost`` is the only name accepted: any other name may resolve anywhere (or be made to).
    """
    name = host.strip().lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str | None:
    """The host of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lower-case and without
    brackets or port; None when it is not a host at all."""
    text = header.strip()
    if not text or any(c in text for c in "/?#@ \t\\"):
        return None
    try:
        parts = urlsplit(f"//{text}")
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError:
        return None
    return parts.hostname or None


def url_host(url: str) -> str | None:
    """The host of a URL such as ``server.public_url``, lower-case and without brackets."""
    try:
        return urlsplit(url).hostname or None
    except ValueError:
        return None
