"""A real MCP server (official SDK, stdio) with three tools, run as a subprocess by the MCP tests.

``add`` adds two integers; ``whoami`` reports what the server can see of its host — so the tests can
prove an isolated server sees neither the service's data directory nor its environment; ``wait``
answers only after a while, for the timeout test.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server import MCPServer

server = MCPServer("switchboard-test-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def whoami(probe: str) -> str:
    """Report the user id, whether a path exists, and the environment variable names."""
    names = ",".join(sorted(os.environ))
    return f"uid={os.getuid()} exists={Path(probe).exists()} env={names}"


@server.tool()
async def wait(seconds: float) -> str:
    """Answer after ``seconds``."""
    import anyio

    await anyio.sleep(seconds)
    return f"waited {seconds} s"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--crash":
        raise SystemExit("this server is broken on purpose")
    server.run()
