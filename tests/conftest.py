"""Fixtures shared by every test area: the fake model server, settings on a temp dir, the harness."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from config.loader import load_settings
from config.schema import Settings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.transcription import FakeTranscriber
from tests.harness import Harness

# Tests talk to 127.0.0.1 only; proxies would intercept SDKs that ignore NO_PROXY.
for _var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_var, None)


#: The heavy tests: each runs for tens of seconds or minutes (a service killed with SIGKILL and started
#: again, several ``serve`` processes, a PostgreSQL outage, thousands of chats, a browser), slowest first,
#: from ``pytest --durations``. They carry the ``heavy`` mark: ``pytest`` (the README's command) leaves them
#: out so the suite stays under ten minutes on two cores; ``pytest -m heavy`` runs them, and CI runs both
#: (docs/testing.md, "Suite time"). Within a run they go to the workers first: started last, one of them
#: alone would keep a worker busy for minutes after the other finished. An entry is a file, or one test
#: (``file::name``) where the rest of its file is quick.
HEAVY = (
    "tests/agent/test_goal_durability.py",
    "tests/channels/feishu/test_feishu_resume_in_place.py",
    "tests/channels/telegram/test_crash_recovery.py",
    "tests/operations/test_cluster.py",
    "tests/agent/test_memory_durability.py",
    "tests/channels/telegram/test_final_delivery.py",
    "tests/operations/test_cluster_processes.py",
    "tests/channels/slack/test_slack_resume_in_place.py",
    "tests/channels/discord/test_resume_in_place.py",
    "tests/foundation/test_bursts.py",
    "tests/operations/test_nonroot.py",
    "tests/operations/test_postgres_outage.py",
    "tests/connections/test_browser.py",
    "tests/webchat/test_browser.py",
    "tests/console/test_browser.py",
    "tests/foundation/test_cli.py",
    "tests/operations/test_terminal_chat.py",
    "tests/channels/telegram/test_resume_in_place.py",
    "tests/tasks/test_task_card_restart.py",
    "tests/tasks/test_subagent_restart.py",
    "tests/tasks/test_long_tool_restart.py",
    "tests/tasks/test_long_tool_in_job_restart.py",
    "tests/tasks/test_goal_card_restart.py",
    "tests/operations/test_startup.py",
    "tests/operations/test_idle_imports.py",
    "tests/channels/discord/test_backfill_kill.py",
    "tests/operations/test_packaging.py",
    # Builds the wheel and installs it into a venv twice (pip, offline): test_packaging.py's kind of work.
    "tests/operations/test_deploy_files.py::test_install_script_installs_the_wheel_into_a_venv_with_a_starter_config",
    "tests/operations/test_extras.py",
    "tests/operations/test_instances.py",
    "tests/schedules/test_schedule_restart.py",
    "tests/channels/dingtalk/test_resume_in_place.py",
    "tests/operations/test_disk_full.py",
    "tests/agent/test_mcp.py",
    "tests/operations/test_reload.py",
    "tests/agent/test_sandbox_startup.py",
)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the :data:`HEAVY` files and tests ``heavy`` and hand them out first, in that order."""
    rank = {entry: i for i, entry in enumerate(HEAVY)}
    root = Path(str(config.rootpath))

    def key(item: pytest.Item) -> int:
        path = Path(str(item.path)).relative_to(root).as_posix()
        return rank.get(item.nodeid.split("[")[0], rank.get(path, len(rank)))

    for item in items:
        if key(item) < len(rank):
            item.add_marker(pytest.mark.heavy)
    items.sort(key=key)


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server  # type: ignore[misc]


@pytest.fixture
def stt() -> Iterator[FakeTranscriber]:
    """The fake speech-to-text server (OpenAI's transcriptions API) the voice tests send audio to."""
    with FakeTranscriber() as server:
        yield server  # type: ignore[misc]


#: The chat platforms' test users are members, said explicitly: the scenarios written before trust levels
#: talk to the bot from arbitrary user ids and expect answers. Guests (the default for a stranger's private
#: message on Telegram and Discord) are exercised by tests/channels/telegram/test_trust.py, which sets
#: its own ``trust``.
TEST_TRUST: dict[str, object] = {"members": ["*"]}
CHAT_CHANNELS = ("telegram", "slack", "discord", "feishu", "dingtalk")


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
        # Memory extraction is an extra model call after every turn; tests that want it enable it.
        "memory": {"enabled": False, "debounce_seconds": 0},
    }
    base.update(overrides)
    channels = base.get("channels")
    if isinstance(channels, dict):
        base["channels"] = {
            name: {"trust": TEST_TRUST, **section}
            if name in CHAT_CHANNELS and isinstance(section, dict)
            else section
            for name, section in channels.items()
        }
    return load_settings(overrides=base, env={})


PG_URL_VAR = "SWITCHBOARD_TEST_PG_URL"


@asynccontextmanager
async def fresh_pg_database() -> AsyncIterator[str]:
    """A new, empty PostgreSQL database, dropped afterwards; skips the test when no server is configured.

    One database per test keeps parallel workers (pytest-xdist) and leftovers from interfering.
    """
    base = os.environ.get(PG_URL_VAR)
    if not base:
        pytest.skip(f"{PG_URL_VAR} is not set (CI sets it; see .ci/run)")
    import asyncpg
    from sqlalchemy.engine import make_url

    url = make_url(base)
    name = f"sb_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(
        host=url.host, port=url.port or 5432, user=url.username, password=url.password, database=url.database
    )
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield url.set(database=name).render_as_string(hide_password=False)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with fresh_pg_database() as url:
        yield url


@pytest.fixture
def settings(tmp_path: Path, llm: FakeOpenAI) -> Settings:
    return make_settings(tmp_path, llm)


@pytest.fixture
async def harness(settings: Settings) -> AsyncIterator[Harness]:
    async with Harness.running(settings) as h:
        yield h


@pytest.fixture(params=["sqlite", "postgres"])
async def settings_on(
    request: pytest.FixtureRequest, tmp_path: Path, llm: FakeOpenAI
) -> AsyncIterator[Callable[..., Settings]]:
    """Settings on each store a deployment can choose — the embedded SQLite and PostgreSQL (a fresh
    database) — for durability tests (restarts, redelivery, finals kept for later), which must hold on both.
    Call it like :func:`make_settings` without the path and model: ``settings_on(connections={...})``."""
    if request.param == "sqlite":
        yield lambda **overrides: make_settings(tmp_path, llm, **overrides)
        return
    async with fresh_pg_database() as url:
        yield lambda **overrides: make_settings(tmp_path, llm, database={"url": url}, **overrides)
