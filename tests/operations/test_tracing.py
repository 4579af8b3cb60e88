"""One trace id per turn: in its OpenTelemetry spans, its log line, ``switchboard inbox list`` and the
API's ``X-Trace-Id`` header (bot/tracing.py)."""

from __future__ import annotations

import asyncio
import http.server
import logging
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import ClassVar

import httpx
import pytest
import yaml
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bot import tracing
from bot.app import create_app
from bot.cli import main as cli_main
from bot.logs import trace_id_var
from channels.memory import MemoryChannel
from tests.fakes.openai_server import Reply, ToolCall
from tests.harness import Harness

TRACE_ID = re.compile(r"[0-9a-f]{32}")
_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Spans the service ends, kept in memory (the process's tracer provider is set once)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


def named(finished: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    [found] = [s for s in finished if s.name == name]
    return found


async def test_a_turn_has_one_trace_id_in_its_spans_its_log_line_and_the_inbox_list(
    settings, llm, spans, caplog, capsys, tmp_path
):
    caplog.set_level(logging.INFO)
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": "echo traced"})]), Reply(text="all done"))
    async with Harness.running(settings) as h:
        assert "all done" in await h.ask("run it")
        [entry] = await h.service.inbox.entries()

    turn_line = next(r for r in caplog.records if r.name == "switchboard.turn")
    trace_id = turn_line.fields["trace_id"]  # type: ignore[attr-defined]
    assert TRACE_ID.fullmatch(trace_id)

    finished = spans.get_finished_spans()
    assert {s.name for s in finished} >= {"receive", "store", "route", "turn", "model", "tools", "reply"}
    assert {hex_trace(s) for s in finished} == {trace_id}  # one trace, the log line's
    receive, turn = named(finished, "receive"), named(finished, "turn")
    assert receive.context is not None and turn.context is not None
    # The turn runs in another task than the one that received it: it still hangs under ``receive``.
    assert named(finished, "store").parent.span_id == receive.context.span_id  # type: ignore[union-attr]
    assert named(finished, "route").parent.span_id == receive.context.span_id  # type: ignore[union-attr]
    assert turn.parent.span_id == receive.context.span_id  # type: ignore[union-attr]
    for step in [s for s in finished if s.name in ("model", "tools", "reply")]:
        assert step.parent.span_id == turn.context.span_id  # type: ignore[union-attr]
    model = next(s for s in finished if s.name == "model")
    assert model.attributes is not None and model.attributes["switchboard.provider"] == "memory"
    assert model.attributes["switchboard.thread_id"]
    assert [
        s.name for s in sorted(finished, key=lambda s: s.start_time or 0) if s.name in ("model", "tools")
    ] == [
        "model",
        "tools",
        "model",
    ]

    # The id is stored with the message: the operator finds it in ``switchboard inbox list``.
    assert tracing.trace_id_of(entry.message) == trace_id
    config = tmp_path / "cli-config.yaml"
    config.write_text(
        yaml.safe_dump({"database": {"url": settings.database.url}, "data_dir": settings.data_dir})
    )
    capsys.readouterr()
    assert await asyncio.to_thread(cli_main, ["inbox", "list", "--config", str(config)]) == 0
    listing = capsys.readouterr().out
    assert "TRACE" in listing and trace_id in listing


async def test_the_agent_run_carries_the_trace_id_provider_and_thread_as_metadata(settings, llm, spans):
    """What LangSmith / Langfuse show with a run: read back from the callbacks LangChain calls."""
    seen: list[dict[str, object]] = []

    from langchain_core.callbacks import BaseCallbackHandler

    class Recorder(BaseCallbackHandler):
        run_inline = True

        def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, metadata=None, **kw):  # type: ignore[no-untyped-def]
            if parent_run_id is None:
                seen.append({"name": kw.get("name"), **(metadata or {})})

    llm.script(Reply(text="hello"))
    async with Harness.running(settings) as h:
        original = tracing.agent_callbacks
        tracing.agent_callbacks = lambda: [*original(), Recorder()]  # type: ignore[assignment]
        try:
            await h.ask("hi")
        finally:
            tracing.agent_callbacks = original  # type: ignore[assignment]
        [entry] = await h.service.inbox.entries()
    [run] = seen
    assert run["name"] == "switchboard turn"
    assert run["trace_id"] == tracing.trace_id_of(entry.message)
    assert run["provider"] == "memory" and run["thread_id"]


async def test_every_api_response_names_its_trace_and_a_valid_incoming_one_is_kept(settings):
    app = create_app(settings, channels={"memory": MemoryChannel("memory")})
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            fresh = (await client.get("/health")).headers["x-trace-id"]
            again = (await client.get("/health")).headers["x-trace-id"]
            mine = "4bf92f3577b34da6a3ce929d0e0e4736"
            kept = (await client.get("/health", headers={"X-Trace-Id": mine.upper()})).headers["x-trace-id"]
            bad = (await client.get("/nowhere", headers={"X-Trace-Id": "0" * 32})).headers["x-trace-id"]
    assert TRACE_ID.fullmatch(fresh) and TRACE_ID.fullmatch(again) and fresh != again
    assert kept == mine
    assert TRACE_ID.fullmatch(bad) and bad != "0" * 32


async def test_a_message_handed_in_during_a_request_joins_the_requests_trace(settings, llm, spans):
    """A webhook delivery's response names the trace of the turn it started."""
    llm.script(Reply(text="ok"))
    async with Harness.running(settings) as h:
        token = trace_id_var.set("4bf92f3577b34da6a3ce929d0e0e4736")  # what the X-Trace-Id wrapper sets
        try:
            await h.chat.say("from a webhook")
        finally:
            trace_id_var.reset(token)
        await h.idle()
        [entry] = await h.service.inbox.entries()
    assert tracing.trace_id_of(entry.message) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert {hex_trace(s) for s in spans.get_finished_spans()} == {"4bf92f3577b34da6a3ce929d0e0e4736"}


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver on loopback: keeps each decoded ``ExportTraceServiceRequest``."""

    received: ClassVar[list[ExportTraceServiceRequest]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        _Collector.received.append(request)
        self.send_response(200 if self.path == "/v1/traces" else 404)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(ExportTraceServiceResponse().SerializeToString())

    def log_message(self, *args: object) -> None:
        pass


EXPORT_SCRIPT = """
import sys
from opentelemetry import trace
from bot import tracing
from bot.logs import trace_id_var
from config.schema import TracingConfig

assert tracing.configure(TracingConfig(otlp_endpoint=sys.argv[1], service_name="sb-test"))
trace_id_var.set("4bf92f3577b34da6a3ce929d0e0e4736")
with tracing.span("route"):
    pass
trace.get_tracer_provider().shutdown()  # flushes the batch
"""


def test_configured_otlp_export_sends_the_turns_spans_to_the_collector():
    _Collector.received.clear()
    server = http.server.HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        done = subprocess.run(
            [sys.executable, "-c", EXPORT_SCRIPT, url], capture_output=True, text=True, timeout=60
        )
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    [request] = _Collector.received
    [resource_spans] = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    [exported] = [s for scope in resource_spans.scope_spans for s in scope.spans]
    assert (service, exported.name, exported.trace_id.hex()) == (
        "sb-test",
        "route",
        "4bf92f3577b34da6a3ce929d0e0e4736",
    )


def test_serve_with_export_configured_but_no_opentelemetry_stops_with_the_install_line(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"tracing": {"otlp_endpoint": "http://127.0.0.1:9"}}))
    # This environment has the [otel] extra: hide its exporter, as an install without it would lack it.
    script = (
        "import sys; sys.modules['opentelemetry.exporter.otlp.proto.http.trace_exporter'] = None; "
        "from bot.cli import main; sys.exit(main(['serve', '--config', sys.argv[1]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(config)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 2
    assert "pip install 'switchboard-chatops[otel]'" in done.stderr


WITHOUT_OTEL_SCRIPT = """
import sys
sys.modules["opentelemetry"] = None  # as an install without the [otel] extra
from bot import tracing
from bot.logs import trace_id_var
from channels.types import InboundMessage, Sender

message = InboundMessage("memory", "", "chat-1", Sender("u1", "Ann"), "hi", "m1")
with tracing.receive(message) as trace_id:
    assert trace_id_var.get() == trace_id
    with tracing.span("store", message):
        pass
assert trace_id_var.get() is None and tracing.trace_id_of(message) == trace_id
assert tracing.agent_callbacks() == []
print(trace_id)
"""


def test_without_opentelemetry_a_message_still_gets_and_keeps_its_trace_id():
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert TRACE_ID.fullmatch(done.stdout.strip())
