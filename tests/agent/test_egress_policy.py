"""The egress rule, unit by unit: which addresses are "this machine or a private network", the lists,
and what the proxy sends on (spoken to over its real unix socket, with a real origin server).

Every address here is a literal or ``localhost``, so no test sends a name to DNS.
"""

from __future__ import annotations

import asyncio
import http.server
import re
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from agent.egress import PRIVATE_REASON, EgressPolicy, EgressProxy, Refused
from agent.netguard import refused_range
from agent.web import FetchRefused, check_address
from config.schema import EgressConfig, SandboxConfig, WebConfig

REFUSED = {
    "127.0.0.1": "loopback",
    "127.8.9.10": "loopback",
    "::1": "loopback",
    "0.0.0.0": "unspecified",  # connects to this machine on Linux
    "::": "unspecified",
    "10.1.2.3": "private",
    "172.16.0.1": "private",
    "192.168.1.1": "private",
    "169.254.169.254": "link-local",  # the cloud metadata service
    "fe80::1": "link-local",
    "100.64.0.1": "carrier-grade NAT",
    "fc00::1": "private",  # unique local
    "fd12:3456::1": "private",
    "224.0.0.1": "multicast",
    "ff02::1": "multicast",
    "240.0.0.1": "private",
    "255.255.255.255": "private",
    "::ffff:127.0.0.1": "loopback",  # IPv4-mapped
    "::ffff:169.254.169.254": "link-local",
    "64:ff9b::7f00:1": "loopback",  # NAT64 of 127.0.0.1: ipaddress calls it global
    "64:ff9b::a9fe:a9fe": "link-local",
    "64:ff9b:1::1": "local NAT64",
    "2002:7f00:1::": "loopback",  # 6to4 of 127.0.0.1
    "::7f00:1": "reserved",  # IPv4-compatible, deprecated
    "fec0::1": "site-local",
}


@pytest.mark.parametrize(("address", "kind"), REFUSED.items())
def test_addresses_of_this_machine_and_private_networks_are_refused(address, kind):
    assert refused_range(address) == kind


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_public_addresses_pass(address):
    assert refused_range(address) is None


def test_web_fetch_refuses_the_ipv6_forms_of_loopback_too():
    for address in ("64:ff9b::7f00:1", "2002:7f00:1::", "::ffff:127.0.0.1"):
        with pytest.raises(FetchRefused):
            check_address(address, "example.com", WebConfig())


async def policy_says(config: EgressConfig, host: str, port: int) -> str:
    try:
        return ",".join(await EgressPolicy(config).addresses(host, port))
    except Refused as exc:
        return f"refused: {exc} ({exc.detail})"


async def test_the_policy_refuses_private_addresses_unless_the_host_and_port_are_allowed():
    default = EgressConfig()
    assert await policy_says(default, "8.8.8.8", 443) == "8.8.8.8"
    assert await policy_says(default, "localhost", 5432) == (
        f"refused: {PRIVATE_REASON} (resolves to 127.0.0.1, loopback)"
    )
    allowed = EgressConfig(allow_hosts=["127.0.0.1:8080", "intranet.test"])
    assert await policy_says(allowed, "127.0.0.1", 8080) == "127.0.0.1"
    assert (await policy_says(allowed, "127.0.0.1", 8081)).startswith("refused: addresses of this machine")
    # An allowed name is looked up as usual; a different name for the same address is not allowed.
    assert (await policy_says(allowed, "localhost", 8080)).startswith("refused:")


async def test_denied_hosts_are_refused_by_name_before_any_lookup_and_by_address():
    denied = EgressConfig(deny_hosts=["*.example.com", "8.8.8.8", "pypi.org:80"])
    blocked = "refused: the operator blocked this destination (sandbox.egress.deny_hosts)"
    assert (await policy_says(denied, "files.example.com", 443)).startswith(blocked)
    assert (await policy_says(denied, "8.8.8.8", 53)).startswith(blocked)
    assert (await policy_says(denied, "PyPI.org.", 80)).startswith(blocked)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("pypi.org:99999", "the port must be a number from 1 to 65535"),
        ("pypi.org:http", "the port must be a number from 1 to 65535"),
        ("http://pypi.org/", "expected host, host:port or *.domain, not a URL"),
        ("a*.example.com", "expected host, host:port or *.domain"),
        ("[::1", "expected [IPv6 address]:port"),
    ],
)
def test_a_malformed_host_entry_is_a_clear_config_error(entry, message):
    with pytest.raises(ValidationError, match=re.escape(f"{entry!r}: {message}")):
        SandboxConfig(egress={"allow_hosts": [entry]})


class Recorder(http.server.ThreadingHTTPServer):
    """An origin server on 127.0.0.1 that answers what Host header and request line it received."""

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                proxy_headers = [h for h in self.headers if h.lower().startswith("proxy-")]
                body = f"{self.requestline} host={self.headers['Host']} proxy={proxy_headers}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        super().__init__(("127.0.0.1", 0), Handler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()


async def ask_proxy(path: Path, request: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(request)
    answer = await reader.read()
    writer.close()
    return answer


async def test_the_proxy_forwards_plain_http_in_origin_form_to_the_host_the_url_names(tmp_path):
    origin = Recorder()
    allowed = f"127.0.0.1:{origin.port}"
    proxy = EgressProxy(EgressPolicy(EgressConfig(allow_hosts=[allowed])), tmp_path / "egress.sock", "test")
    await proxy.start()
    try:
        forwarded = await ask_proxy(
            proxy.path,
            f"GET http://{allowed}/page?q=1 HTTP/1.1\r\nHost: intranet.test\r\n"
            "Proxy-Authorization: Basic abc\r\nProxy-Connection: keep-alive\r\n\r\n".encode(),
        )
        https = await ask_proxy(proxy.path, b"GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
        garbage = await ask_proxy(proxy.path, b"hello\r\n\r\n")
    finally:
        await proxy.close()
        origin.shutdown()
        origin.server_close()
    assert forwarded.startswith(b"HTTP/1.0 200")
    assert forwarded.endswith(f"GET /page?q=1 HTTP/1.1 host={allowed} proxy=[]".encode())
    assert https.startswith(b"HTTP/1.1 400") and b"only CONNECT and plain http://" in https
    assert garbage.startswith(b"HTTP/1.1 400") and b"not an HTTP proxy request" in garbage
    assert not proxy.path.exists()
