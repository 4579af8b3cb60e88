"""One trace id per turn, the same in logs, ``switchboard inbox list``, OpenTelemetry spans and the API's
``X-Trace-Id`` header.

The id is given where a message is accepted (:func:`receive`, around the inbox write) and stored with
the message itself — ``context["traceparent"]``, W3C form — so a turn resumed after a restart keeps it,
and the operator can take the id from a log line or an inbox row to the tracing backend.

OpenTelemetry is optional (the ``[otel]`` extra). Without it, or with no tracer provider set, every
function here still carries the id (logs and the header work) and no span is made; with one, spans go
to it — the OTLP exporter :func:`configure` installs, or a test's in-memory one. Span names follow the turn:
``receive`` → ``store`` → ``route`` → ``turn`` (``model`` / ``tools`` inside) → ``reply``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from bot.logs import trace_id_var

if TYPE_CHECKING:
    from channels.types import InboundMessage
    from config.schema import TracingConfig

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
except ImportError:  # the [otel] extra is not installed: ids only, no spans
    otel_trace = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: Where the id travels with a message through the durable inbox.
CONTEXT_KEY = "traceparent"
#: The response header (and accepted request header) naming a request's trace.
HEADER = "X-Trace-Id"
TRACER_NAME = "switchboard"
#: Environment variables the OTLP exporter reads by itself (the OpenTelemetry standard).
OTLP_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_ZERO_TRACE = "0" * 32
#: Trace and span ids come from a PRNG seeded from the OS, as OpenTelemetry's own id generator does: they
#: name a trace, they guard nothing (a request may even choose its own, ``X-Trace-Id``), and reading
#: ``os.urandom`` twice per message was a visible share of the message path's CPU.
_ids = random.Random()
#: Set once a tracer provider is seen; OpenTelemetry's provider is set once per process and never unset.
_provider_seen = False
#: The environment variable that names a provider for OpenTelemetry to load on first use; read once.
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_UNSET = object()


class TracingUnavailable(RuntimeError):
    """Tracing export is configured but the ``[otel]`` extra is not installed."""


def new_trace_id() -> str:
    """A fresh id: 32 lowercase hex digits, so it is also a valid OpenTelemetry trace id."""
    return f"{_ids.getrandbits(128) or 1:032x}"


def _new_span_id() -> str:
    return f"{_ids.getrandbits(64) or 1:016x}"


def valid_trace_id(value: str | None) -> str | None:
    """``value`` as a trace id (lowercased), or None if it is not 32 hex digits or is all zeros."""
    if not value:
        return None
    value = value.strip().lower()
    if _TRACE_ID.fullmatch(value) and value != _ZERO_TRACE:
        return value
    return None


def _parse(traceparent: object) -> tuple[str, str] | None:
    m = _TRACEPARENT.fullmatch(traceparent) if isinstance(traceparent, str) else None
    return (m.group(1), m.group(2)) if m and m.group(1) != _ZERO_TRACE else None


def trace_id_of(message: InboundMessage) -> str | None:
    """The trace id stored with ``message`` when it was accepted; None for one accepted before tracing."""
    parsed = _parse(message.context.get(CONTEXT_KEY))
    return parsed[0] if parsed else None


def _spans_wanted() -> bool:
    """True once a tracer provider is set (:func:`configure`, a test's): before that, spans would be
    thrown away, so the per-message path skips making them. A provider, once set, stays (OpenTelemetry
    sets it once per process), so after the first yes this is one global read."""
    global _provider_seen
    if _provider_seen:
        return True
    if otel_trace is None:
        return False
    # No provider yet (the usual case without tracing): one global read. OpenTelemetry's public getter
    # reads the environment each time (a visible share of a message's CPU); this reads it once.
    if getattr(otel_trace, "_TRACER_PROVIDER", _UNSET) is None and not _PROVIDER_FROM_ENV:
        return False
    if isinstance(otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider):
        return False
    _provider_seen = True
    return True


def _parent_context(trace_id: str, message: InboundMessage | None, under_receive: bool) -> Any:
    """The OpenTelemetry context a span of ``trace_id`` starts in: the current span if it belongs to
    the trace (unless ``under_receive``), else the message's ``receive`` span (named by its stored
    traceparent), else a remote parent with only the trace id (an incoming ``X-Trace-Id``)."""
    current = otel_trace.get_current_span().get_span_context()
    if current.is_valid and f"{current.trace_id:032x}" == trace_id and not under_receive:
        return None
    parsed = _parse(message.context.get(CONTEXT_KEY)) if message is not None else None
    span_id = parsed[1] if parsed and parsed[0] == trace_id else _new_span_id()
    parent = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return otel_trace.set_span_in_context(NonRecordingSpan(parent))


#: What :func:`span` returns when no span is made: one shared no-op context (reusable and re-entrant).
_NO_SPAN: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def span(
    name: str,
    message: InboundMessage | None = None,
    *,
    under_receive: bool = False,
    **attributes: str | int | bool,
) -> contextlib.AbstractContextManager[None]:
    """A span of the current trace (``trace_id_var``); nothing without OpenTelemetry or a trace id.

    ``under_receive`` starts it under ``message``'s ``receive`` span whatever span is current: a turn,
    whose lane task may have been started by another message's routing. Without spans (the usual
    case) it is one shared no-op context: a message passes through five of these, and a generator
    context each was a visible share of its CPU."""
    if not _spans_wanted():
        return _NO_SPAN
    trace_id = valid_trace_id(trace_id_var.get())
    if trace_id is None:
        return _NO_SPAN
    return _span(name, trace_id, message, under_receive, attributes)


@contextlib.contextmanager
def _span(
    name: str,
    trace_id: str,
    message: InboundMessage | None,
    under_receive: bool,
    attributes: dict[str, str | int | bool],
) -> Iterator[None]:
    if message is not None:
        attributes = {"switchboard.provider": message.provider, **attributes}
    tracer = otel_trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        name, _parent_context(trace_id, message, under_receive), attributes=attributes
    ):
        yield


@contextlib.contextmanager
def receive(message: InboundMessage) -> Iterator[str]:
    """Give ``message`` its trace id before it is stored, inside a ``receive`` span; yields the id.

    The id is the one it already carries (a redelivery), else the current one (an HTTP request's
    ``X-Trace-Id``, a turn's follow-up), else a new one. The stored traceparent names the ``receive``
    span, so the later spans of the turn — in other tasks, maybe after a restart — hang under it.
    """
    trace_id = trace_id_of(message) or valid_trace_id(trace_id_var.get()) or new_trace_id()
    token = trace_id_var.set(trace_id)
    try:
        with span("receive", message):
            span_id = _new_span_id()
            if _spans_wanted():
                context = otel_trace.get_current_span().get_span_context()
                if context.is_valid:
                    span_id = f"{context.span_id:016x}"
            message.context.setdefault(CONTEXT_KEY, f"00-{trace_id}-{span_id}-01")
            yield trace_id
    finally:
        trace_id_var.reset(token)


class AgentSpans(BaseCallbackHandler):
    """LangChain callbacks that open a ``model`` or ``tools`` span for each step of the agent's graph,
    under the span current when it was made (the turn's). The agent package knows nothing of tracing:
    it passes these callbacks to the run with the rest of its config."""

    run_inline = True  # called on the event loop, in order; each span is ended by its own run id

    def __init__(self) -> None:
        self._parent = otel_context.get_current()
        self._spans: dict[UUID, Any] = {}

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name")
        if name in ("model", "tools") and (metadata or {}).get("langgraph_node") == name:
            # The run's metadata (run_metadata below) reaches every step: the thread, to find it by.
            attributes = {f"switchboard.{k}": v for k, v in (metadata or {}).items() if k in _RUN_KEYS}
            tracer = otel_trace.get_tracer(TRACER_NAME)
            self._spans[run_id] = tracer.start_span(name, self._parent, attributes=attributes)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if (step := self._spans.pop(run_id, None)) is not None:
            step.end()

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if (step := self._spans.pop(run_id, None)) is not None:
            step.set_status(Status(StatusCode.ERROR, type(error).__name__))
            step.end()


def agent_callbacks() -> list[BaseCallbackHandler]:
    """The callbacks an agent run gets: its step spans when OpenTelemetry is installed."""
    return [AgentSpans()] if _spans_wanted() else []


_RUN_KEYS = ("provider", "thread_id")


def run_metadata(trace_id: str, provider: str, thread_id: str) -> dict[str, str]:
    """What LangSmith / Langfuse show with the agent's run, to find it from a log line or inbox row."""
    return {"trace_id": trace_id, "provider": provider, "thread_id": thread_id}


def export_wanted(config: TracingConfig, environ: Mapping[str, str] = os.environ) -> bool:
    return bool(config.otlp_endpoint) or any(environ.get(name) for name in OTLP_ENV)


def configure(config: TracingConfig, environ: Mapping[str, str] = os.environ) -> bool:
    """Install an OTLP/HTTP span exporter when ``tracing.otlp_endpoint`` or the standard
    ``OTEL_EXPORTER_OTLP_*ENDPOINT`` variable asks for one; True if it did.

    Raises :class:`TracingUnavailable` (with the line that installs it) when export is asked for
    without the ``[otel]`` extra, rather than start without the traces the operator expects."""
    if not export_wanted(config, environ):
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise TracingUnavailable(
            "tracing export is configured (tracing.otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT) but "
            "OpenTelemetry is not installed: pip install 'switchboard-chatops[otel]'"
        ) from None
    endpoint = config.otlp_endpoint
    exporter = (
        OTLPSpanExporter(endpoint=f"{endpoint.rstrip('/')}/v1/traces") if endpoint else OTLPSpanExporter()
    )
    provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    otel_trace.set_tracer_provider(provider)
    log.info("tracing: exporting spans over OTLP/HTTP to %s", endpoint or "the OTEL_EXPORTER_OTLP_* endpoint")
    return True
