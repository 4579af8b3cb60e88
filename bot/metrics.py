"""Prometheus metrics and the one structured log line per turn.

The manager marks a turn's start, first token, tokens and outcome through :func:`observe_turn` and the
helpers below; when the turn ends this module writes the ``turn finished`` log line and moves the
counters, so the log and ``/metrics`` never disagree about what happened.

Metrics live in their own :data:`REGISTRY` (not the client's global one) so importing this module in a
process that also uses prometheus-client elsewhere never clashes. Counters are per process: several
services in one test process share them, which is why tests compare before/after values.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from agent.events import AgentEvent, TextDelta, TurnFinished
from channels import observe

log = logging.getLogger("switchboard.turn")

REGISTRY = CollectorRegistry(auto_describe=True)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)

TURNS = Counter(
    "switchboard_turns", "Finished turns by provider and outcome.", ["provider", "outcome"], registry=REGISTRY
)
TURN_SECONDS = Histogram(
    "switchboard_turn_duration_seconds",
    "Wall time of a turn, from start to final reply.",
    ["provider"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
FIRST_TOKEN_SECONDS = Histogram(
    "switchboard_time_to_first_token_seconds",
    "Time from a turn's start to the model's first streamed text.",
    ["provider"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
QUEUE_WAIT_SECONDS = Histogram(
    "switchboard_queue_wait_seconds",
    "Time from a message's arrival to the start of its turn (busy thread, turn slots, restarts).",
    ["provider"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
MODEL_TOKENS = Counter(
    "switchboard_model_tokens", "Model tokens by model and direction.", ["model", "kind"], registry=REGISTRY
)
INBOX_UNFINISHED = Gauge(
    "switchboard_inbox_unfinished",
    "Accepted messages not finished yet (queued or running).",
    registry=REGISTRY,
)
COMPONENT_UP = Gauge(
    "switchboard_component_up",
    "1 while a component works: database and agent when they answered their last health check (a real "
    "round trip), disk when its last write check into data_dir worked, channel:<name> while messages "
    "from that platform reach the service through this instance (/health's intake says why not).",
    ["component"],
    registry=REGISTRY,
)
PLATFORM_CALLS = Counter(
    "switchboard_platform_api_calls",
    "Outbound reply calls (send, edit, files) by provider.",
    ["provider"],
    registry=REGISTRY,
)
PLATFORM_RATE_LIMITED = Counter(
    "switchboard_platform_rate_limited",
    "Reply calls a platform refused with a rate limit (HTTP 429 / retry_after), by provider.",
    ["provider"],
    registry=REGISTRY,
)


def set_component_up(component: str, up: bool) -> None:
    """Record a component's latest health check (``database``, ``agent``, ``disk``; bot/probes.py)."""
    COMPONENT_UP.labels(component).set(1 if up else 0)


def _platform_event(provider: str, event: str) -> None:
    if event == observe.CALL:
        PLATFORM_CALLS.labels(provider).inc()
    elif event == observe.RATE_LIMITED:
        PLATFORM_RATE_LIMITED.labels(provider).inc()


observe.set_listener(_platform_event)


def chat_hash(provider: str, workspace: str, chat: str) -> str:
    """A short, stable pseudonym of a chat: lines about one chat can be grouped without naming it."""
    return hashlib.sha256(f"{provider}\x00{workspace}\x00{chat}".encode()).hexdigest()[:12]


@dataclass(slots=True)
class TurnRecord:
    """What one turn did, filled in while it runs."""

    trace_id: str
    provider: str
    chat: str
    thread: str
    model: str
    hidden: bool = False
    #: Wall-clock arrival of the message (``InboundMessage.received_at``); None for hidden follow-ups.
    received_at: float | None = None
    started: float = field(default_factory=time.monotonic)
    first_token: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    outcome: str = "ok"


_current: contextvars.ContextVar[TurnRecord | None] = contextvars.ContextVar("switchboard_turn", default=None)


@contextlib.contextmanager
def observe_turn(record: TurnRecord) -> Iterator[TurnRecord]:
    """Time a turn; on exit write its log line and metrics (``cancelled`` when the task was cancelled)."""
    token = _current.set(record)
    if record.received_at is not None:
        QUEUE_WAIT_SECONDS.labels(record.provider).observe(max(0.0, time.time() - record.received_at))
    try:
        yield record
    except BaseException:
        record.outcome = "cancelled" if record.outcome == "ok" else record.outcome
        raise
    finally:
        _current.reset(token)
        _finish(record)


def mark_outcome(outcome: str) -> None:
    """Set the running turn's outcome (``failed``, ``stopped``, ``delivery_failed``, ``error``)."""
    record = _current.get()
    if record is not None:
        record.outcome = outcome


def observe_event(event: AgentEvent) -> None:
    """Note the first streamed text and the token counts of the running turn."""
    record = _current.get()
    if record is None:
        return
    if isinstance(event, TextDelta) and record.first_token is None:
        record.first_token = time.monotonic()
    elif isinstance(event, TurnFinished):
        record.input_tokens, record.output_tokens = event.input_tokens, event.output_tokens


def _finish(record: TurnRecord) -> None:
    duration = time.monotonic() - record.started
    TURNS.labels(record.provider, record.outcome).inc()
    TURN_SECONDS.labels(record.provider).observe(duration)
    ttft_ms: int | None = None
    if record.first_token is not None:
        FIRST_TOKEN_SECONDS.labels(record.provider).observe(record.first_token - record.started)
        ttft_ms = round((record.first_token - record.started) * 1000)
    if record.input_tokens:
        MODEL_TOKENS.labels(record.model, "input").inc(record.input_tokens)
    if record.output_tokens:
        MODEL_TOKENS.labels(record.model, "output").inc(record.output_tokens)
    fields = {
        "trace_id": record.trace_id,
        "provider": record.provider,
        "chat": record.chat,
        "thread": record.thread,
        "model": record.model,
        "hidden": record.hidden,
        "duration_ms": round(duration * 1000),
        "first_token_ms": ttft_ms,
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "outcome": record.outcome,
    }
    level = logging.INFO if record.outcome in ("ok", "stopped") else logging.WARNING
    log.log(
        level, "turn finished: %s in %d ms", record.outcome, fields["duration_ms"], extra={"fields": fields}
    )


def render(inbox_unfinished: int | None = None, components: dict[str, bool] | None = None) -> bytes:
    """The exposition text for ``/metrics``; gauges read at scrape time are set here.

    ``components``: name → up, e.g. ``{"channel:telegram": False}``; the names are the configured
    channels, so the label's values stay few."""
    if inbox_unfinished is not None:
        INBOX_UNFINISHED.set(inbox_unfinished)
    for component, up in (components or {}).items():
        COMPONENT_UP.labels(component).set(1 if up else 0)
    return generate_latest(REGISTRY)
