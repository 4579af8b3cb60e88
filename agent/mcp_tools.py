"""MCP tool servers: each configured server's tools become agent tools named ``<server>__<tool>``.

Why our own small adapter over the official ``mcp`` SDK's ``Client`` (rather than a generic one): tool
calls must go through the same path as every other tool — argument checking, one-line progress,
secret masking, a timeout with a plain-words result — and a server that fails must never stop the
service. So each server is held by one long-lived task (the SDK's transports are anyio task groups,
which must be entered and left in the same task); ``start`` waits for every server to connect and list
its tools, or to fail, within ``start_timeout_seconds``; failures are kept for ``/health`` and doctor.

stdio servers run, by default, in a bubblewrap sandbox of their own (read-only system directories,
their ``mounts`` read-only, a private home, no view of the service's data or processes), as a
non-root user when the service is root — with a network namespace of their own whose only way out
is an egress proxy under ``sandbox.egress`` (agent/egress.py), as for ``bash``; none with
``network: false``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.egress import (
    EgressPolicy,
    EgressProxy,
    egress_mounts,
    proxy_environment,
    relay_argv,
    relay_interpreter,
)
from config.schema import McpServerConfig, SandboxConfig

log = logging.getLogger(__name__)

SEPARATOR = "__"
#: Made by us with their own modes (a 1777 tmpfs): their subdirectories are made, they are not.
OWN_TOP = frozenset({"/tmp", "/home"})
MAX_RESULT_CHARS = 100_000


class McpCallFailed(Exception):
    """A tool call that did not produce a result; the message is the tool result, in plain words."""


@dataclass(frozen=True, slots=True)
class McpTool:
    server: str
    name: str
    description: str
    parameters: dict[str, Any]

    @property
    def qualified(self) -> str:
        """The name the model sees: model APIs accept only ``[A-Za-z0-9_-]{1,64}``."""
        return re.sub(r"[^A-Za-z0-9_-]", "_", f"{self.server}{SEPARATOR}{self.name}")[:64]


@dataclass(slots=True)
class _Connection:
    config: McpServerConfig
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    client: Any = None
    tools: list[McpTool] = field(default_factory=list)
    error: str | None = None
    task: asyncio.Task[None] | None = None


def mcp_uid(server: McpServerConfig, sandbox: SandboxConfig) -> int:
    """The host uid an isolated server runs as when the service is root (its own, from its name)."""
    return sandbox.uid_base + zlib.crc32(f"mcp:{server.name}".encode()) % sandbox.uid_count


def isolated_argv(
    server: McpServerConfig, sandbox: SandboxConfig, bwrap: str = "bwrap", egress: Path | None = None
) -> list[str]:
    """The bubblewrap command line that runs a stdio server in a sandbox of its own.

    ``egress``: the socket of the server's egress proxy; the relay starts the server (network: true).
    """
    from agent.sandbox_bwrap import mount_parents, system_mounts

    assert server.command is not None
    args = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--hostname", "sandbox"]
    args.append("--unshare-net")  # never the host's network; egress only through the proxy
    as_root = os.geteuid() == 0
    if not as_root:
        args += ["--unshare-user", "--uid", "1000", "--gid", "1000"]
    args += system_mounts()
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    args += ["--perms", "0755", "--dir", "/home", "--perms", "1777", "--tmpfs", "/home/mcp"]
    made: set[str] = set()
    for path in [*python_mounts(server.command), *server.mounts, *([server.cwd] if server.cwd else [])]:
        args += mount_parents(path, made, OWN_TOP)
        args += ["--ro-bind-try", path, path]
    if server.cwd:
        args += ["--chdir", server.cwd]
    else:
        args += ["--chdir", "/home/mcp"]
    relay: list[str] = []
    if egress is not None:
        interpreter, interpreter_mounts = relay_interpreter()
        args += [*egress_mounts(egress), *interpreter_mounts]
        relay = relay_argv(interpreter)
    if as_root:
        uid = mcp_uid(server, sandbox)
        args += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        args += ["--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    return [*args, *relay, server.command, *server.args]


def python_mounts(command: str) -> list[str]:
    """What a Python interpreter started as ``command`` needs, beyond the system directories.

    A venv holds only links and its own packages: its ``bin/python`` points at the interpreter it was
    made from (pyenv, uv, conda, a build under ``/opt``), whose standard library lies under the base
    installation named by the venv's ``pyvenv.cfg`` (``home``). Mounting the venv alone leaves a
    dangling link in the sandbox, so the venv, that base installation (as named and as its real path)
    and the real interpreter file are mounted too (read-only). Empty for a command that is no Python.
    """
    from agent.sandbox_bwrap import SYSTEM_TOP

    found = shutil.which(command)
    if found is None:
        return []
    exe = Path(found).absolute()
    real = Path(os.path.realpath(exe))
    wanted: list[Path] = []
    venv = exe.parent.parent
    config = venv / "pyvenv.cfg"
    if config.is_file():
        wanted.append(venv)
        home = _venv_home(config)
        if home is not None:
            wanted += [home.parent, Path(os.path.realpath(home)).parent]
    prefix = _install_prefix(real)
    if prefix is None and not wanted:
        return []
    wanted.append(real)
    if prefix is not None:
        wanted.append(prefix)
    mounts: list[str] = []
    for path in sorted(set(wanted), key=lambda p: len(p.parts)):
        if path.parts[1:2] and path.parts[1] in SYSTEM_TOP:
            continue  # /usr and friends are mounted read-only already
        if not any(path.is_relative_to(mount) for mount in mounts):
            mounts.append(str(path))
    return mounts


def _venv_home(config: Path) -> Path | None:
    """The ``home`` of a ``pyvenv.cfg``: the folder of the interpreter the venv was made from."""
    for line in config.read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home" and value.strip():
            return Path(value.strip())
    return None


def _install_prefix(interpreter: Path) -> Path | None:
    """The installation a Python interpreter belongs to: the folder with its ``lib/python3.*/os.py``
    (the landmark Python itself looks for), up to two levels above the executable."""
    for folder in list(interpreter.parents)[:2]:
        if any(folder.glob("lib/python3*/os.py")):
            return folder
    return None


class McpHub:
    """The MCP servers of this service: connections, their tools, and calls to them."""

    def __init__(self, servers: list[McpServerConfig], sandbox: SandboxConfig) -> None:
        self.sandbox = sandbox
        self._connections = {s.name: _Connection(s) for s in servers}
        self._policy = EgressPolicy(sandbox.egress)
        #: Where the servers' egress sockets live (0700, made on first use).
        self._runtime: Path | None = None

    # --- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            import mcp  # noqa: F401 - the optional extra
        except ImportError:
            for connection in self._connections.values():
                connection.error = "the MCP SDK is not installed: pip install 'switchboard-chatops[mcp]'"
                connection.ready.set()
                log.error("MCP server %s is not available: %s", connection.config.name, connection.error)
            return
        for connection in self._connections.values():
            connection.task = asyncio.create_task(
                self._hold(connection), name=f"mcp-{connection.config.name}"
            )
        for connection in self._connections.values():
            try:
                await asyncio.wait_for(connection.ready.wait(), connection.config.start_timeout_seconds)
            except TimeoutError:
                connection.error = f"did not start within {connection.config.start_timeout_seconds:g} s"
                connection.closing.set()
            if connection.error:
                log.error("MCP server %s is not available: %s", connection.config.name, connection.error)
            else:
                log.info("MCP server %s: %d tools", connection.config.name, len(connection.tools))

    async def _egress(self, config: McpServerConfig) -> EgressProxy | None:
        """The egress proxy of an isolated stdio server with network (None for any other server)."""
        if config.command is None or not config.isolate or self.sandbox.mode != "bwrap" or not config.network:
            return None
        if self._runtime is None:
            self._runtime = Path(tempfile.mkdtemp(prefix="switchboard-mcp-egress-"))
        owner = mcp_uid(config, self.sandbox) if os.geteuid() == 0 else None
        proxy = EgressProxy(self._policy, self._runtime / f"{config.name}.sock", f"mcp:{config.name}", owner)
        await proxy.start()
        return proxy

    async def _hold(self, connection: _Connection) -> None:
        """Keep one server connected until the hub closes (entered and left in this one task)."""
        proxy: EgressProxy | None = None
        try:
            proxy = await self._egress(connection.config)
            async with self._client(connection.config, proxy) as client:
                listing = await client.list_tools()
                connection.tools = [
                    McpTool(
                        connection.config.name,
                        tool.name,
                        " ".join((tool.description or tool.name).split())[:500],
                        dict(tool.input_schema or {"type": "object", "properties": {}}),
                    )
                    for tool in listing.tools
                ]
                connection.client = client
                connection.ready.set()
                await connection.closing.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # an ExceptionGroup from the transport's task group, usually
            connection.error = _describe(exc)
        finally:
            connection.client = None
            connection.ready.set()
            if proxy is not None:
                await proxy.close()

    def _client(self, config: McpServerConfig, proxy: EgressProxy | None = None) -> Any:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters

        if config.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = httpx2.AsyncClient(headers=config.headers, timeout=config.timeout_seconds)
            return Client(streamable_http_client(config.url, http_client=http))
        assert config.command is not None
        # sandbox.mode bwrap has been proven to work at start-up (the sandbox provider starts first).
        env = dict(config.env)
        if config.isolate and self.sandbox.mode == "bwrap":
            argv = isolated_argv(config, self.sandbox, egress=proxy.path if proxy is not None else None)
            env.setdefault("HOME", "/home/mcp")  # the service's home does not exist in there
            if proxy is not None:
                env.update(proxy_environment())
        else:
            argv = [config.command, *config.args]
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env or None, cwd=config.cwd)
        return Client(params)

    async def close(self) -> None:
        for connection in self._connections.values():
            connection.closing.set()
        tasks = [c.task for c in self._connections.values() if c.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=10)
            for task in pending:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*pending, return_exceptions=True)
        if self._runtime is not None:
            await asyncio.to_thread(shutil.rmtree, self._runtime, True)

    # --- what the agent and operators see ----------------------------------------------------------
    def tools(self) -> list[McpTool]:
        return [tool for c in self._connections.values() if c.client is not None for tool in c.tools]

    def status(self) -> dict[str, str]:
        """Per server: ``ok (N tools)`` or ``error: …`` — for /health and doctor."""
        report = {}
        for name, connection in self._connections.items():
            if connection.client is not None:
                report[name] = f"ok ({len(connection.tools)} tools)"
            else:
                report[name] = f"error: {connection.error or 'not connected'}"
        return report

    async def call(self, tool: McpTool, arguments: dict[str, Any]) -> tuple[str, bool]:
        """The tool's text result and whether it succeeded."""
        connection = self._connections[tool.server]
        client = connection.client
        if client is None:
            raise McpCallFailed(
                f"the MCP server {tool.server} is not connected ({connection.error or 'stopped'})"
            )
        timeout = connection.config.timeout_seconds
        try:
            result = await asyncio.wait_for(client.call_tool(tool.name, arguments), timeout)
        except TimeoutError:
            raise McpCallFailed(f"{tool.qualified} did not answer within {timeout:g} s") from None
        except Exception as exc:
            raise McpCallFailed(f"{tool.qualified} failed: {_describe(exc)}") from None
        return _text_of(result)[:MAX_RESULT_CHARS], not result.is_error


def _text_of(result: Any) -> str:
    from mcp.types import TextContent

    parts = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{block.type} content omitted]")
    if not parts and result.structured_content is not None:
        import json

        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts) or "(no output)"


def _describe(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups for the real cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
