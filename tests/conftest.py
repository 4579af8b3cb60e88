"""Fixtures shared by every test area: the fake model server, settings on a temp dir, the harness."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from config.loader import load_settings
from config.schema import Settings
from tests.fakes.openai_server import FakeOpenAI
from tests.harness import Harness

# Tests talk to 127.0.0.1 only; proxies would intercept SDKs that ignore NO_PROXY.
for _var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_var, None)


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server  # type: ignore[misc]


def make_settings(tmp_path: Path, llm: FakeOpenAI | None = None, **overrides: object) -> Settings:
    base: dict[str, object] = {
        "data_dir": str(tmp_path / "data"),
        "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'data' / 'switchboard.db'}"},
        "models": [
            {
                "name": "default",
                "model": "fake-model",
                "api_key": "sk-test-not-a-real-key",
                "base_url": llm.base_url if llm else "http://127.0.0.1:9/v1",
            },
            {
                "name": "smart",
                "model": "fake-smart",
                "api_key": "sk-test-not-a-real-key",
                "base_url": llm.base_url if llm else "http://127.0.0.1:9/v1",
            },
        ],
        "memory": {"debounce_seconds": 0},
    }
    base.update(overrides)
    return load_settings(overrides=base, env={})


@pytest.fixture
def settings(tmp_path: Path, llm: FakeOpenAI) -> Settings:
    return make_settings(tmp_path, llm)


@pytest.fixture
async def harness(settings: Settings) -> AsyncIterator[Harness]:
    async with Harness.running(settings) as h:
        yield h
