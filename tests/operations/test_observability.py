"""What an operator sees: the start-up summary, one line per turn, /metrics, /ready, offline /docs."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bot.app import create_app, log_startup_summary
from bot.logs import configure_logging
from bot.service import Service
from channels.base import InboundSink
from channels.errors import RetryAfter
from channels.memory import MemoryChannel
from tests.fakes.openai_server import Reply


@asynccontextmanager
async def serving(app) -> AsyncIterator[httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


def sample(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


async def settle(service: Service) -> None:
    for _ in range(500):
        if not service.bus.load and service.manager is not None and not service.manager.lanes.active:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("turn did not finish")


async def test_summary_turn_line_and_metrics_after_a_turn(settings, llm, caplog):
    caplog.set_level(logging.INFO)
    chat = MemoryChannel("memory")
    # OpenAI-compatible servers report token usage in a stream only when asked.
    settings.models[0].stream_usage = True  # type: ignore[attr-defined]
    app = create_app(settings, channels={"memory": chat}, config_source="/etc/switchboard/config.yaml")
    llm.script(Reply(text="hello there, operator", chunk_size=4, prompt_tokens=11, completion_tokens=5))
    async with serving(app) as client:
        summary = next(r for r in caplog.records if r.getMessage().startswith("switchboard "))
        fields = summary.fields  # type: ignore[attr-defined]
        assert fields["config"] == "/etc/switchboard/config.yaml"
        assert fields["sandbox"] == settings.sandbox.mode
        assert fields["channels"] == "memory=connected"
        assert fields["data_dir"].endswith("data")
        assert fields["docs"].endswith("/docs") and fields["metrics"].endswith("/metrics")
        assert any(r.getMessage() == "channel memory: connected" for r in caplog.records)

        before = (await client.get("/metrics")).text
        chat.fail_next("edit", RetryAfter(0.01))
        await chat.say("hi")
        await settle(app.state.service)
        after = (await client.get("/metrics")).text

    turn = next(r for r in caplog.records if r.name == "switchboard.turn")
    line = turn.fields  # type: ignore[attr-defined]
    assert line["outcome"] == "ok" and line["provider"] == "memory" and line["model"] == "default"
    assert re.fullmatch(r"[0-9a-f]{12}", line["chat"]) and line["thread"]
    assert line["trace_id"] and line["duration_ms"] >= 0 and line["first_token_ms"] is not None
    assert (line["input_tokens"], line["output_tokens"]) == (11, 5)

    def moved(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert moved("switchboard_turns_total", provider="memory", outcome="ok") == 1
    assert moved("switchboard_turn_duration_seconds_count", provider="memory") == 1
    assert moved("switchboard_time_to_first_token_seconds_count", provider="memory") == 1
    assert moved("switchboard_queue_wait_seconds_count", provider="memory") == 1
    assert moved("switchboard_model_tokens_total", model="default", kind="output") == 5
    assert moved("switchboard_platform_api_calls_total", provider="memory") >= 2  # placeholder + final
    assert moved("switchboard_platform_rate_limited_total", provider="memory") == 1
    assert sample(after, "switchboard_inbox_unfinished") == 0


class GatedChannel(MemoryChannel):
    """A platform whose connection takes as long as the test says."""

    def __init__(self) -> None:
        super().__init__("memory")
        self.gate = asyncio.Event()

    async def start(self, sink: InboundSink) -> None:
        await self.gate.wait()
        await super().start(sink)


async def test_ready_is_503_until_channels_are_up_while_health_answers(settings):
    channel = GatedChannel()
    app = create_app(settings, channels={"memory": channel})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        lifespan = app.router.lifespan_context(app)
        starting = asyncio.create_task(lifespan.__aenter__())
        for _ in range(500):
            if app.state.service.manager is not None:
                break
            await asyncio.sleep(0.02)
        not_yet = await client.get("/ready")
        assert not_yet.status_code == 503
        assert not_yet.json() == {"ready": False, "reason": "starting: channels not started yet"}
        channel.gate.set()
        await starting
        try:
            ready = await client.get("/ready")
            assert ready.status_code == 200 and ready.json() == {"ready": True}
            assert (await client.get("/health")).status_code == 200
        finally:
            await lifespan.__aexit__(None, None, None)


async def test_docs_use_only_local_assets_and_declare_a_bearer_scheme(settings):
    app = create_app(settings, channels={"memory": MemoryChannel("memory")})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        html = (await client.get("/docs")).text
        assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
        assert assets, html
        assert all(a.startswith("/") and not a.startswith("//") for a in assets), assets
        assert "cdn" not in html.lower()
        for asset in assets:
            response = await client.get(asset)
            assert response.status_code == 200, asset
            assert len(response.content) > 100
        schema = (await client.get("/openapi.json")).json()
    assert schema["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": schema["components"]["securitySchemes"]["bearer"]["description"],
    }
    assert {"bearer": []} in schema["security"]


def test_the_summary_says_built_in_defaults_without_a_config_file(settings, caplog):
    # (auth.mode none on a reachable address is refused by serve before any summary: test_host_check.py)
    caplog.set_level(logging.INFO)
    log_startup_summary(Service(settings, channels={}), None)
    summary = next(r for r in caplog.records if r.getMessage().startswith("switchboard "))
    assert summary.fields["config"] == "built-in defaults"  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_database_password_is_hidden_in_the_summary(settings, caplog):
    caplog.set_level(logging.INFO)
    settings.database.url = "postgresql+asyncpg://sb:hunter2-secret@db.internal/sb"
    log_startup_summary(Service(settings, channels={}), None)
    summary = next(r for r in caplog.records if r.getMessage().startswith("switchboard "))
    assert "hunter2" not in summary.getMessage()
    assert summary.fields["database"] == "postgresql+asyncpg://sb:***@db.internal/sb"  # type: ignore[attr-defined]


def test_formats_fields_masking_and_quiet_libraries():
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        stream = io.StringIO()
        configure_logging("INFO", ["sk-super-secret-value"], stream=stream)  # not a TTY: JSON
        logging.getLogger("switchboard.test").info(
            "token sk-super-secret-value", extra={"fields": {"model": "m", "key": "sk-super-secret-value"}}
        )
        logging.getLogger("httpx").info("HTTP Request: GET https://api.example/ 200")
        logging.getLogger("httpx2").info("HTTP Request: GET https://api.example/ 200")
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert len(lines) == 1
        assert lines[0]["msg"] == "token ***" and lines[0]["model"] == "m" and lines[0]["key"] == "***"

        stream = io.StringIO()
        configure_logging("INFO", stream=stream, fmt="text")
        logging.getLogger("switchboard.test").info("turn finished", extra={"fields": {"outcome": "ok"}})
        text = stream.getvalue()
        assert "INFO    switchboard.test: turn finished  outcome=ok" in text
        assert not text.startswith("{")
    finally:
        for handler in root.handlers[:]:
            if handler not in saved[0]:
                root.removeHandler(handler)
        root.setLevel(saved[1])
