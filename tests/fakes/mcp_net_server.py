"""A real MCP server (official SDK, stdio) with one tool, ``get``, for the egress tests.

``get`` fetches an http:// URL directly or through the proxy named in ``HTTP_PROXY`` (absolute form,
so the proxy decides), and answers the status and body — or why it failed.
"""

from __future__ import annotations

import http.client
import os
from urllib.parse import urlsplit

from mcp.server import MCPServer

server = MCPServer("switchboard-test-net")


@server.tool()
def get(url: str, via_proxy: bool) -> str:
    """GET an http:// URL, directly or through the proxy named in HTTP_PROXY; the status and body."""
    try:
        if via_proxy:
            proxy = urlsplit(os.environ.get("HTTP_PROXY", "http://127.0.0.1:3128"))
            conn = http.client.HTTPConnection(proxy.hostname or "", proxy.port or 80, timeout=10)
            conn.request("GET", url)
        else:
            target = urlsplit(url)
            conn = http.client.HTTPConnection(target.hostname or "", target.port or 80, timeout=10)
            conn.request("GET", target.path or "/")
        response = conn.getresponse()
        return f"HTTP {response.status}: {response.read().decode().strip()}"
    except OSError as exc:
        return f"failed: {exc}"


if __name__ == "__main__":
    server.run()
