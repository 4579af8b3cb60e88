"""The sandbox's only way out: an HTTP proxy in the service that decides about every connection.

Every sandbox (and every isolated MCP server) has a network namespace of its own, with nothing in it
but its own ``lo``. Its single door is a unix socket of this proxy, bound into the sandbox; a relay
there (:mod:`agent.egress_relay`) offers it as ``127.0.0.1:3128``, and ``HTTP_PROXY``/``HTTPS_PROXY``/
``ALL_PROXY`` point ``pip``, ``curl``, ``git`` and most other tools at it. The proxy speaks:

* ``CONNECT host:port`` — a byte tunnel (HTTPS, git over HTTPS, any TCP protocol a client can tunnel);
* absolute-form plain HTTP (``GET http://host/path``) — forwarded in origin form, one request per
  connection (``Connection: close``), so a connection never carries requests to a second host.

For each connection the proxy resolves the name itself, applies :class:`EgressPolicy` to *every*
address (the rule of :mod:`agent.netguard`: nothing of this machine, private networks, link-local,
CGNAT, NAT64-mapped …; ``sandbox.egress.allow_hosts``/``deny_hosts`` for exceptions), and connects to
the address it checked — never re-resolving, so DNS cannot answer differently between check and
connect. A refusal is answered ``403`` with a sentence, logged once per host per listener, and kept so
the ``bash`` tool result can say what was refused and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from agent.netguard import refused_range
from config.schema import EgressConfig, parse_host_rule

log = logging.getLogger(__name__)

#: Where things are inside a sandbox.
RELAY_PORT = 3128
RUN_DIR = "/run/switchboard"
SOCKET_IN_SANDBOX = f"{RUN_DIR}/egress.sock"
RELAY_IN_SANDBOX = f"{RUN_DIR}/relay.py"
PROXY_URL = f"http://127.0.0.1:{RELAY_PORT}"
#: The sandbox's own loopback stays direct: servers a command starts itself are reached as usual.
NO_PROXY = "localhost,127.0.0.1,::1"
RELAY_SCRIPT = Path(__file__).with_name("egress_relay.py")

PRIVATE_REASON = (
    "addresses of this machine and private networks are not reachable from the sandbox; "
    "ask an operator to add it to sandbox.egress.allow_hosts"
)
DENIED_REASON = "the operator blocked this destination (sandbox.egress.deny_hosts)"
#: ioctl on a namespace file: the user namespace that owns it (linux/nsfs.h).
NS_GET_USERNS = 0xB701
HOLDER_START_SECONDS = 30.0
HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 15.0
#: Open connections per listener: each costs the service two file descriptors, and a command must not be
#: able to exhaust the service's (its database and the chat platforms need them).
MAX_CONNECTIONS = 256
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "upgrade"}
)


def proxy_environment() -> dict[str, str]:
    """The variables that send a command's HTTP(S) traffic to the relay (both spellings: tools differ)."""
    env = {}
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        env[name] = env[name.upper()] = PROXY_URL
    env["no_proxy"] = env["NO_PROXY"] = NO_PROXY
    return env


class Refused(Exception):
    """The policy refuses this destination; the message says why, in words the model can act on."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason)
        #: For the log: what was found (``resolves to 127.0.0.1, loopback``).
        self.detail = detail


class Unreachable(Exception):
    """The destination could not be resolved or connected to (not a policy decision)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    host: str
    port: int
    reason: str

    @property
    def target(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def note(self) -> str:
        """The line appended to a ``bash`` tool result."""
        return f"[network: refused {self.target} — {self.reason}]"


def _matches(rule: tuple[str, int | None], host: str, port: int) -> bool:
    name, rule_port = rule
    if rule_port is not None and rule_port != port:
        return False
    if name.startswith("*."):
        return host.endswith(name[1:])
    return host == name


class EgressPolicy:
    """``sandbox.egress``: public addresses pass, everything else only when allowed by name."""

    def __init__(self, config: EgressConfig) -> None:
        self.allow = [parse_host_rule(entry) for entry in config.allow_hosts]
        self.deny = [parse_host_rule(entry) for entry in config.deny_hosts]

    async def addresses(self, host: str, port: int) -> list[str]:
        """The checked addresses to connect to, in order; raises :class:`Refused` or :class:`Unreachable`."""
        host = host.lower().rstrip(".")
        if any(_matches(rule, host, port) for rule in self.deny):
            raise Refused(DENIED_REASON, "listed in sandbox.egress.deny_hosts")
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise Unreachable(f"cannot resolve {host}: {exc.strerror or exc}") from None
        found = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in found:
            if any(_matches(rule, address, port) for rule in self.deny):
                raise Refused(DENIED_REASON, f"resolves to {address}, listed in sandbox.egress.deny_hosts")
        if any(_matches(rule, host, port) for rule in self.allow):
            return found
        for address in found:  # every address the name has must pass, not just the first
            if (kind := refused_range(address)) is not None:
                raise Refused(PRIVATE_REASON, f"resolves to {address}, {kind}")
        return found


def split_host_port(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` of a CONNECT request; ValueError when it is not one."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(text)
    return host, int(port)


def _response(status: str, text: str) -> bytes:
    body = (text + "\n").encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


class EgressProxy:
    """One listener on a unix socket: the policy point for one thread's sandboxes or one MCP server."""

    def __init__(self, policy: EgressPolicy, path: Path, label: str, owner: int | None = None) -> None:
        self.policy = policy
        self.path = path
        #: Who the refusals are logged for (a thread id, ``mcp:<name>``); never a secret.
        self.label = label
        #: The uid that connects from inside when the service is root; the socket is made theirs alone.
        self.owner = owner
        self.refusals: list[Refusal] = []
        self._logged: set[str] = set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=HEAD_LIMIT)
        os.chmod(self.path, 0o600)
        if self.owner is not None:
            os.chown(self.path, self.owner, self.owner)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def notes_since(self, mark: int) -> list[str]:
        """One line per destination refused since ``mark`` (a length of :attr:`refusals`)."""
        return list(dict.fromkeys(refusal.note() for refusal in self.refusals[mark:]))

    # --- one connection ----------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._tasks) >= MAX_CONNECTIONS:
            writer.write(
                _response("503 Service Unavailable", f"at most {MAX_CONNECTIONS} connections at once")
            )
            writer.close()
            return
        self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except Exception:
            log.exception("egress proxy for %s: a connection failed", self.label)
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            writer.write(_response("400 Bad Request", "not an HTTP proxy request"))
            return
        method, target, version = parts
        forward: bytes | None = None
        try:
            if method.upper() == "CONNECT":
                host, port = split_host_port(target)
            else:
                host, port, forward = self._origin_form(method, target, version, lines[1:])
        except ValueError as exc:
            writer.write(_response("400 Bad Request", str(exc) or f"cannot proxy {target}"))
            return
        try:
            addresses = await self.policy.addresses(host, port)
        except Refused as exc:
            refusal = Refusal(host.lower(), port, str(exc))
            self._refuse(refusal, exc.detail)
            writer.write(_response("403 Forbidden", f"{refusal.target} refused: {refusal.reason}"))
            return
        except Unreachable as exc:
            writer.write(_response("502 Bad Gateway", str(exc)))
            return
        upstream = await self._connect(addresses, port)
        if upstream is None:
            writer.write(_response("502 Bad Gateway", f"cannot connect to {host}:{port}"))
            return
        up_reader, up_writer = upstream
        try:
            if forward is None:
                writer.write(f"{version} 200 Connection established\r\n\r\n".encode())
            else:
                up_writer.write(forward)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()

    def _origin_form(
        self, method: str, target: str, version: str, headers: list[str]
    ) -> tuple[str, int, bytes]:
        """Host, port and the request rewritten for the origin server (``GET /path``, no proxy headers)."""
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(
                f"only CONNECT and plain http:// requests go through this proxy, not {target[:100]}"
            )
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        # The request target names the host; a different Host header is replaced (RFC 9112, 3.2.2).
        dropped = HOP_BY_HOP | {"host"}
        kept = [line for line in headers if line and line.split(":", 1)[0].strip().lower() not in dropped]
        kept.insert(0, f"Host: {url.netloc.rpartition('@')[2]}")
        request = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""])
        return url.hostname, url.port or 80, request.encode("latin-1")

    async def _connect(
        self, addresses: list[str], port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for address in addresses:  # each one was checked; the name is never looked up again
            try:
                return await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT)
            except (OSError, TimeoutError):
                continue
        return None

    def _refuse(self, refusal: Refusal, detail: str) -> None:
        self.refusals.append(refusal)
        if refusal.target not in self._logged:  # once per destination per listener: a retry loop is one line
            self._logged.add(refusal.target)
            log.warning("sandbox network for %s: refused %s (%s)", self.label, refusal.target, detail)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then pass the half-close on (a client may still be reading)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


def relay_interpreter() -> tuple[str, list[str]]:
    """The Python that runs the relay inside a sandbox, and the bwrap arguments that make it exist there.

    The host's real interpreter (a venv's ``python`` is a link to it). Under ``/usr`` it is already in
    every sandbox; a pyenv, uv or conda build lives elsewhere and its prefix is bound read-only, with
    world-traversable parents (bubblewrap would make them 0700, and the command is not root).
    """
    real = os.path.realpath(sys.executable)
    if real.startswith("/usr/"):
        return real, []
    base = os.path.realpath(sys.base_prefix)
    prefix = base if real.startswith(base + "/") else str(PurePosixPath(real).parent.parent)
    args: list[str] = []
    parts = PurePosixPath(prefix).parts[1:]
    for depth in range(1, len(parts)):
        args += ["--perms", "0755", "--dir", "/" + "/".join(parts[:depth])]
    return real, [*args, "--ro-bind", prefix, prefix]


def relay_argv(interpreter: str) -> list[str]:
    """The start of the command line inside a sandbox: the relay, which then ``exec``s what follows."""
    return [interpreter, "-I", "-S", "-B", RELAY_IN_SANDBOX, str(RELAY_PORT), SOCKET_IN_SANDBOX]


def egress_mounts(socket_path: Path) -> list[str]:
    """bwrap arguments that put the proxy's socket and the relay script into a sandbox (read-only)."""
    return [
        "--perms",
        "0755",
        "--dir",
        str(PurePosixPath(RUN_DIR).parent),
        "--perms",
        "0755",
        "--dir",
        RUN_DIR,
        "--ro-bind",
        str(socket_path),
        SOCKET_IN_SANDBOX,
        "--ro-bind",
        str(RELAY_SCRIPT),
        RELAY_IN_SANDBOX,
    ]


class HolderFailed(Exception):
    """The turn's network namespace could not be set up; the message says what bubblewrap reported."""


def _read_info(fd: int) -> dict[str, int]:
    """bubblewrap's ``--info-fd`` JSON (``child-pid`` …), read until complete or the writer is gone."""
    data = b""
    while not data.rstrip().endswith(b"}"):
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        info = json.loads(data)
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


class NetworkHolder:
    """Keeps one private network namespace alive for a thread's sandboxes, with the relay inside it.

    Starting the relay (a Python interpreter) costs more than a whole bubblewrap sandbox, so it runs
    once per thread in this holder — its own bubblewrap with ``--unshare-net`` and nothing but the system
    directories, the relay and the proxy's socket — and the thread's sandboxes join the holder's
    network namespace with ``nsenter`` instead of starting a relay of their own. Their commands see
    nothing else of the holder: their PID, mount, IPC and user namespaces are their own.
    """

    def __init__(self, process: asyncio.subprocess.Process, fds: tuple[int, ...], prefix: list[str]) -> None:
        self.process = process
        #: Open namespace files, passed to each command's ``nsenter`` as ``/proc/self/fd/N``.
        self.fds = fds
        #: What goes in front of a command's ``bwrap`` to put it into this namespace.
        self.prefix = prefix

    @classmethod
    async def start(cls, argv: list[str], *, nsenter: str, join_userns: bool) -> NetworkHolder:
        """Start the holder ``argv`` (bwrap … relay, hold mode) and open its network namespace.

        ``join_userns``: the service is not root, so the namespace belongs to the holder's user
        namespace, and a command must enter that first (as its owner, the service may).
        """
        read_fd, write_fd = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                argv[0],
                "--info-fd",
                str(write_fd),
                *argv[1:],
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        fds: list[int] = []
        try:
            info = await asyncio.wait_for(asyncio.to_thread(_read_info, read_fd), HOLDER_START_SECONDS)
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), HOLDER_START_SECONDS)
            if line != b"ready\n" or "child-pid" not in info:
                rest = await asyncio.wait_for(process.stdout.read(4000), 5)
                said = (line + rest).decode(errors="replace").strip().splitlines()
                raise HolderFailed(said[-1] if said else "the relay did not start")
            fds.append(os.open(f"/proc/{info['child-pid']}/ns/net", os.O_RDONLY | os.O_CLOEXEC))
            if join_userns:
                fds.append(fcntl.ioctl(fds[0], NS_GET_USERNS))
        except BaseException:
            for fd in fds:
                os.close(fd)
            await _end(process)
            raise
        finally:
            os.close(read_fd)
        prefix = [nsenter, f"--net=/proc/self/fd/{fds[0]}"]
        if join_userns:
            prefix = [nsenter, f"--user=/proc/self/fd/{fds[1]}", "--preserve-credentials", prefix[1]]
        return cls(process, tuple(fds), prefix)

    async def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = ()
        await _end(self.process)


async def _end(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        await process.wait()
