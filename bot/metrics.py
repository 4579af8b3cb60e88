"""Prometheus metrics and the one structured log line per turn.

The manager marks a turn's start, first token, tokens and outcome through :func:`observe_turn` and the
helpers below; when the turn ends this module writes the ``turn finished`` log line and moves the
counters, so the log and ``/metrics`` never disagree about what happened.

Metrics live in their own :data:`REGISTRY` (not the client's global one) so importing this module in a
process that also uses prometheus-client elsewhere never clashes. Counters are per process: several
services in one test process share them, which is why tests compare before/after values.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import hashlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from agent.events import AgentEvent, TextDelta, TurnFinished
from channels import observe

log = logging.getLogger("switchboard.turn")

REGISTRY = CollectorRegistry(auto_describe=True)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


class _Tally:
    """Counters and histograms kept in plain dicts and read by Prometheus only at scrape time.

    Every turn moved four of these and every platform call one more, each through prometheus-client's
    ``labels()`` (validation, a lock, a child lookup) and a locked increment: about a tenth of a message's
    CPU on the hot path (issue 32). Here a turn adds to a dict entry on the event loop — the only
    writer — and the exposition is built when ``/metrics`` is read, with the same names, labels, buckets
    and ``_created`` samples as before.
    """

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float] = ()
    ) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)  # empty: a counter
        self.values: dict[tuple[str, ...], list[float]] = {}  # counter: [total]; histogram: counts + [sum]
        self.created: dict[tuple[str, ...], float] = {}

    def _row(self, labels: tuple[str, ...]) -> list[float]:
        row = self.values.get(labels)
        if row is None:
            row = self.values[labels] = [0.0] * (len(self.bounds) + 2 if self.bounds else 1)
            self.created[labels] = time.time()
        return row

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        self._row(labels)[0] += amount

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        row = self._row(labels)
        row[bisect.bisect_left(self.bounds, value)] += 1  # le: the first bound >= value (last: +Inf)
        row[-1] += value

    def value(self, *labels: str) -> float:
        """A counter's total (or a histogram's count) for ``labels``: for tests and the reference."""
        row = self.values.get(labels)
        if row is None:
            return 0.0
        return row[0] if not self.bounds else sum(row[:-1])

    def collect(self) -> Iterator[Metric]:
        rows = list(self.values.items())
        if not self.bounds:
            counter = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
            for labels, row in rows:
                counter.add_metric(labels, row[0], created=self.created[labels])
            yield counter
            return
        histogram = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        edges = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        for labels, row in rows:
            cumulative, buckets = 0.0, []
            for edge, count in zip(edges, row[:-1], strict=True):
                cumulative += count
                buckets.append((edge, cumulative))
            histogram.add_metric(labels, buckets, row[-1])
            histogram.samples.append(
                Sample(
                    f"{self.name}_created",
                    dict(zip(self.labelnames, labels, strict=True)),
                    self.created[labels],
                )
            )
        yield histogram


class _TallyCollector(Collector):
    def __init__(self, tallies: Sequence[_Tally]) -> None:
        self.tallies = tallies

    def collect(self) -> Iterator[Metric]:
        for tally in self.tallies:
            yield from tally.collect()


TURNS = _Tally("switchboard_turns", "Finished turns by provider and outcome.", ["provider", "outcome"])
TURN_SECONDS = _Tally(
    "switchboard_turn_duration_seconds",
    "Wall time of a turn, from start to final reply.",
    ["provider"],
    _LATENCY_BUCKETS,
)
FIRST_TOKEN_SECONDS = _Tally(
    "switchboard_time_to_first_token_seconds",
    "Time from a turn's start to the model's first streamed text.",
    ["provider"],
    _LATENCY_BUCKETS,
)
QUEUE_WAIT_SECONDS = _Tally(
    "switchboard_queue_wait_seconds",
    "Time from a message's arrival to the start of its turn (busy thread, turn slots, restarts).",
    ["provider"],
    _LATENCY_BUCKETS,
)
MODEL_TOKENS = _Tally("switchboard_model_tokens", "Model tokens by model and direction.", ["model", "kind"])
#: Money is summed exactly in the database (integer micro-units, bot/spend/); this counter is its float
#: mirror for dashboards. No per-person labels: who spent what is ``/usage`` and ``switchboard usage``.
COST = _Tally(
    "switchboard_cost",
    "Cost of finished turns by agent and model, in the currency of models[].pricing.",
    ["agent", "model"],
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
PLATFORM_CALLS = _Tally(
    "switchboard_platform_api_calls", "Outbound reply calls (send, edit, files) by provider.", ["provider"]
)
PLATFORM_RATE_LIMITED = _Tally(
    "switchboard_platform_rate_limited",
    "Reply calls a platform refused with a rate limit (HTTP 429 / retry_after), by provider.",
    ["provider"],
)
REGISTRY.register(
    _TallyCollector(
        [
            *(TURNS, TURN_SECONDS, FIRST_TOKEN_SECONDS, QUEUE_WAIT_SECONDS, MODEL_TOKENS, COST),
            *(PLATFORM_CALLS, PLATFORM_RATE_LIMITED),
        ]
    )
)


def set_component_up(component: str, up: bool) -> None:
    """Record a component's latest health check (``database``, ``agent``, ``disk``; bot/probes.py)."""
    COMPONENT_UP.labels(component).set(1 if up else 0)


def _platform_event(provider: str, event: str) -> None:
    if event == observe.CALL:
        PLATFORM_CALLS.inc((provider,))
    elif event == observe.RATE_LIMITED:
        PLATFORM_RATE_LIMITED.inc((provider,))


observe.set_listener(_platform_event)


def chat_hash(provider: str, workspace: str, chat: str) -> str:
    """A short, stable pseudonym of a chat: lines about one chat can be grouped without naming it."""
    return hashlib.sha256(f"{provider}\x00{workspace}\x00{chat}".encode()).hexdigest()[:12]


@dataclass(slots=True)
class TurnRecord:
    """What one turn did, filled in while it runs."""

    trace_id: str
    provider: str
    #: The chat as the platform names it; the log line carries only its :func:`chat_hash`.
    workspace: str
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
        QUEUE_WAIT_SECONDS.observe((record.provider,), max(0.0, time.time() - record.received_at))
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
    provider = (record.provider,)
    TURNS.inc((record.provider, record.outcome))
    TURN_SECONDS.observe(provider, duration)
    ttft_ms: int | None = None
    if record.first_token is not None:
        FIRST_TOKEN_SECONDS.observe(provider, record.first_token - record.started)
        ttft_ms = round((record.first_token - record.started) * 1000)
    if record.input_tokens:
        MODEL_TOKENS.inc((record.model, "input"), record.input_tokens)
    if record.output_tokens:
        MODEL_TOKENS.inc((record.model, "output"), record.output_tokens)
    level = logging.INFO if record.outcome in ("ok", "stopped") else logging.WARNING
    if not log.isEnabledFor(level):  # the line, its fields and the chat's hash only when it is written
        return
    fields = {
        "trace_id": record.trace_id,
        "provider": record.provider,
        "chat": chat_hash(record.provider, record.workspace, record.chat),
        "thread": record.thread,
        "model": record.model,
        "hidden": record.hidden,
        "duration_ms": round(duration * 1000),
        "first_token_ms": ttft_ms,
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "outcome": record.outcome,
    }
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
