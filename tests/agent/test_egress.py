"""Issue 27: every sandbox has a network of its own; the only way out is the service's egress proxy.

Every probe goes through the real path: the fake model asks for a ``bash`` call, the service runs it
in bubblewrap, and the test reads the tool result the model was sent. The listeners are real sockets on
this machine's loopback, standing in for the service's own HTTP port, PostgreSQL, a model server and
an intranet package index; each counts who connected, so "unreachable" means nothing arrived at all.
"""

from __future__ import annotations

import http.server
import io
import logging
import os
import shutil
import socket
import sys
import threading
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.egress import RELAY_IN_SANDBOX
from config.schema import McpServerConfig
from tests.agent.helpers import system_text, tool_results
from tests.agent.test_isolation import run, run_commands, sandbox_settings
from tests.agent.test_mcp import FAKES
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.harness import Harness

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is needed (apt install curl)")

PRIVATE = "addresses of this machine and private networks are not reachable from the sandbox"
HINT = "ask an operator to add it to sandbox.egress.allow_hosts"


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(default_reply=run_commands) as server:
        yield server


class Listener:
    """A TCP (or abstract unix) server that greets whoever connects, and counts them."""

    def __init__(self, family: int = socket.AF_INET, address: str | None = None) -> None:
        self.connections = 0
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_UNIX:
            self.name = f"switchboard-test-{uuid.uuid4().hex}"
            self.socket.bind("\0" + self.name)  # abstract: no file, scoped to a network namespace
        else:
            self.socket.bind((address or "127.0.0.1", 0))
            self.port = self.socket.getsockname()[1]
        self.socket.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.socket.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.sendall(b"HELLO-FROM-THE-HOST\n")

    def close(self) -> None:
        self.socket.close()


def holders() -> list[str]:
    """Network holders (bwrap running the relay) started by this process — the service, in the test."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and RELAY_IN_SANDBOX in command:
            found.append(command)
    return found


def tiny_wheel() -> bytes:
    """A valid, minimal wheel (what ``pip download`` fetches and reads the metadata of)."""
    buffer = io.BytesIO()
    info = "tinypkg-1.0.dist-info"
    with zipfile.ZipFile(buffer, "w") as wheel:
        wheel.writestr("tinypkg/__init__.py", "")
        wheel.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    return buffer.getvalue()


class Index(http.server.ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1: a page, and a PEP 503 simple index with one wheel."""

    def __init__(self) -> None:
        wheel = tiny_wheel()
        pages = {
            "/hello": b"HELLO-FROM-THE-INDEX\n",
            "/simple/tinypkg/": b'<a href="/files/tinypkg-1.0-py3-none-any.whl">tinypkg-1.0-py3-none-any.whl</a>',
            "/files/tinypkg-1.0-py3-none-any.whl": wheel,
        }
        self.requests: list[str] = []
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                index.requests.append(self.path)
                body = pages.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                if self.path.startswith("/simple/"):
                    self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                return None

        super().__init__(("127.0.0.1", 0), Handler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def index() -> Iterator[Index]:
    server = Index()
    yield server
    server.close()


@pytest.fixture
def listeners() -> Iterator[dict[str, Listener]]:
    made = {
        "postgres": Listener(),
        "ipv6": Listener(socket.AF_INET6, "::1"),
        "abstract": Listener(socket.AF_UNIX),
    }
    yield made
    for listener in made.values():
        listener.close()


async def test_nothing_on_this_machine_is_reachable_from_bash_and_refusals_are_explained(
    tmp_path, model, index, listeners, caplog
):
    postgres, ipv6, abstract = listeners["postgres"].port, listeners["ipv6"].port, listeners["abstract"].name
    service = index.port  # stands in for the service's own HTTP port
    connect_abstract = (
        'python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
        f"s.connect('\\0{abstract}'); print(s.recv(100))\""
    )
    probes = {
        "service direct": f"curl -sS -m 5 http://127.0.0.1:{service}/hello",
        "service via proxy": f"curl -sS -m 5 --noproxy '' http://127.0.0.1:{service}/hello",
        "postgres direct": f"exec 3<>/dev/tcp/127.0.0.1/{postgres} && head -1 <&3",
        "postgres via proxy": f"curl -sS -m 5 --noproxy '' -p http://127.0.0.1:{postgres}/",
        "ipv6 direct": f"exec 3<>/dev/tcp/::1/{ipv6} && head -1 <&3",
        "ipv6 via proxy": f"curl -sS -m 5 --noproxy '' -p http://[::1]:{ipv6}/",
        "metadata": "curl -sS -m 5 http://169.254.169.254/latest/meta-data/",
        "metadata tunnel": "curl -sS -m 5 -p http://169.254.169.254/latest/meta-data/",
        "abstract socket": connect_abstract,
    }
    caplog.set_level(logging.WARNING, logger="agent.egress")
    async with Harness.running(sandbox_settings(tmp_path, model)) as h:
        seen = {name: await run(h, command) for name, command in probes.items()}
    everything = "\n".join(seen.values())
    assert "HELLO-FROM-THE" not in everything
    assert index.requests == []
    assert all(listener.connections == 0 for listener in listeners.values())
    # Direct connections find the sandbox's own, empty loopback.
    assert "Couldn't connect to server" in seen["service direct"]
    assert "Connection refused" in seen["postgres direct"]
    assert "Connection refused" in seen["ipv6 direct"]
    assert "ConnectionRefusedError" in seen["abstract socket"]
    # Through the proxy, the refusal is explained in the tool result — once per destination and command.
    for name, target in {
        "service via proxy": f"127.0.0.1:{service}",
        "postgres via proxy": f"127.0.0.1:{postgres}",
        "ipv6 via proxy": f"[::1]:{ipv6}",
        "metadata": "169.254.169.254:80",
        "metadata tunnel": "169.254.169.254:80",
    }.items():
        note = f"[network: refused {target} — {PRIVATE}; {HINT}]"
        assert seen[name].count(note) == 1, seen[name]
    # The log names what the address is (each probe is a turn of its own: one line per probe).
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "refused 169.254.169.254:80 (resolves to 169.254.169.254, link-local)" in logged


async def test_an_allowed_host_answers_curl_and_pip_through_the_proxy_and_others_are_refused(
    tmp_path, model, index, listeners
):
    allowed = f"127.0.0.1:{index.port}"
    egress = {"allow_hosts": [allowed], "deny_hosts": ["*.example.com"]}
    # 127.0.0.1 is in NO_PROXY (the sandbox's own loopback); the index stands in for an intranet host, so
    # these commands clear it to go through the proxy as a remote host would.
    pip = (
        f"NO_PROXY= no_proxy= python3 -m pip --isolated download --no-deps --no-cache-dir --disable-pip-version-check"
        f" --index-url http://{allowed}/simple/ -d downloads tinypkg && ls downloads"
    )
    probes = {
        "curl": f"curl -sS -m 10 --noproxy '' http://{allowed}/hello",
        "curl tunnel": f"curl -sS -m 10 --noproxy '' -p http://{allowed}/hello",
        "pip": pip,
        "other port": f"curl -sS -m 5 --noproxy '' -p http://127.0.0.1:{listeners['postgres'].port}/",
        "denied": "curl -sS -m 5 https://www.example.com/",
        # The relay that starts every command leaves no trace in it: SIGPIPE ends `yes` as usual.
        "signals": "yes | head -1",
    }
    async with Harness.running(sandbox_settings(tmp_path, model, egress=egress)) as h:
        seen = {}
        for name, command in probes.items():
            seen[name] = await run(h, command)
            # One network holder for the thread, kept for its next command (not one per turn or command).
            assert len(holders()) == 1
    assert holders() == []  # and it ended with the service
    assert seen["signals"] == "[exit code 0]\ny"
    assert seen["curl"] == "[exit code 0]\nHELLO-FROM-THE-INDEX"
    assert seen["curl tunnel"] == "[exit code 0]\nHELLO-FROM-THE-INDEX"
    assert seen["pip"].startswith("[exit code 0]"), seen["pip"]
    assert seen["pip"].endswith("tinypkg-1.0-py3-none-any.whl")
    assert "/files/tinypkg-1.0-py3-none-any.whl" in index.requests
    assert (
        f"[network: refused 127.0.0.1:{listeners['postgres'].port} — {PRIVATE}; {HINT}]" in seen["other port"]
    )
    assert listeners["postgres"].connections == 0
    assert (
        "[network: refused www.example.com:443 — the operator blocked this destination "
        "(sandbox.egress.deny_hosts)]" in seen["denied"]
    )
    # The model was told how its network works.
    guide = system_text(model.completions[0])
    assert "only through an HTTP proxy" in guide and "Nothing of this server" in guide


async def test_with_network_off_there_is_no_proxy_and_nothing_is_reachable(tmp_path, model, index):
    egress = {"allow_hosts": [f"127.0.0.1:{index.port}"]}
    settings = sandbox_settings(tmp_path, model, network=False, egress=egress)
    async with Harness.running(settings) as h:
        env = await run(h, "env | grep -ci _proxy=; test -e /run/switchboard/egress.sock || echo NO-SOCKET")
        direct = await run(h, f"curl -sS -m 5 http://127.0.0.1:{index.port}/hello")
        proxied = await run(h, f"curl -sS -m 5 -x http://127.0.0.1:3128 http://127.0.0.1:{index.port}/hello")
    assert env == "[exit code 0]\n0\nNO-SOCKET"
    assert "Couldn't connect to server" in direct
    assert "Couldn't connect to server" in proxied
    assert index.requests == []
    assert "no network access" in system_text(model.completions[0])


async def test_one_turn_logs_a_refused_destination_once_and_every_command_explains_it(
    tmp_path, model, caplog
):
    command = "curl -sS -m 5 http://169.254.169.254/; curl -sS -m 5 http://169.254.169.254/"
    model.script(
        Reply(tool_calls=[ToolCall("bash", {"command": command}), ToolCall("bash", {"command": command})]),
        Reply(text="done"),
    )
    caplog.set_level(logging.WARNING, logger="agent.egress")
    async with Harness.running(sandbox_settings(tmp_path, model)) as h:
        assert await h.ask("look at the metadata service") == "done"
    results = [m["content"] for m in model.completions[-1]["messages"] if m["role"] == "tool"]
    note = f"[network: refused 169.254.169.254:80 — {PRIVATE}; {HINT}]"
    assert [result.count(note) for result in results] == [1, 1]
    logged = [r for r in caplog.records if "refused 169.254.169.254:80" in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.WARNING


@pytest.mark.slow  # starts real MCP server processes
async def test_an_isolated_mcp_server_gets_the_same_egress_policy(tmp_path, llm, index, listeners):
    allowed, private = (
        f"http://127.0.0.1:{index.port}/hello",
        f"http://127.0.0.1:{listeners['postgres'].port}/",
    )
    calls = [
        ToolCall("net__get", {"url": allowed, "via_proxy": True}),
        ToolCall("net__get", {"url": private, "via_proxy": True}),
        ToolCall("net__get", {"url": allowed, "via_proxy": False}),
        ToolCall("offline__get", {"url": allowed, "via_proxy": True}),
    ]
    llm.script(*[Reply(tool_calls=[call]) for call in calls], Reply(text="done"))
    settings = sandbox_settings(tmp_path, llm, egress={"allow_hosts": [f"127.0.0.1:{index.port}"]})
    command = {"command": sys.executable, "args": [str(FAKES / "mcp_net_server.py")]}
    settings.mcp_servers = [
        McpServerConfig(name="net", **command, mounts=[sys.prefix, str(FAKES)]),
        McpServerConfig(name="offline", **command, mounts=[sys.prefix, str(FAKES)], network=False),
    ]
    async with Harness.running(settings) as h:
        assert await h.ask("fetch things") == "done"
    through, refused, direct, offline = tool_results(llm.completions[-1])
    assert through == "HTTP 200: HELLO-FROM-THE-INDEX"
    assert refused.startswith("HTTP 403:") and PRIVATE in refused
    assert direct.startswith("failed:") and "refused" in direct.lower()  # its own, empty loopback
    assert offline.startswith("failed:")
    assert index.requests == ["/hello"]
    assert listeners["postgres"].connections == 0
