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


#: The slowest tests of the README's run (7–10 s each under load, ``pytest --durations``, 2026-12-08),
#: slowest first. Not heavy: each is one scenario that waits on a real timeout or a stream, and is the
#: README suite's test of its feature. They are handed out right after the heavy ones (so first in
#: ``pytest``): in file order the web chat's reload test (17 s then) came near the very end, and the
#: last few tests of a run are what leaves one of the two workers idle while the other finishes.
SLOW = (
    "tests/channels/dingtalk/test_delivery.py::test_after_a_gateway_error_health_says_reconnecting_until_the_stream_is_back",
    "tests/agent/test_sandbox.py::test_a_command_past_its_timeout_is_killed_with_everything_it_started",
    "tests/channels/telegram/test_group_pacing.py::test_a_group_final_goes_ahead_of_the_other_answers_pending_edit",
    "tests/foundation/test_restart_order.py::test_messages_of_one_chat_accepted_in_one_group_commit_resume_in_arrival_order",
    "tests/github/test_postgres.py::test_on_postgres_an_upgraded_log_refuses_a_replay_racing_its_original",
    "tests/console/test_cli.py::test_an_operator_runs_every_console_action_from_the_shell",
    "tests/channels/dingtalk/test_buttons.py::test_an_answer_that_spills_into_a_second_card_keeps_stop_on_the_newest_card",
    "tests/channels/feishu/test_feishu_buttons.py::test_a_typed_stop_stops_every_time_at_once",
    "tests/connections/test_one_machine.py::test_metrics_need_a_token_in_jwt_mode_unless_made_public",
    "tests/github/test_postgres.py::test_on_postgres_racing_duplicates_run_once_and_a_failed_delivery_can_be_retried",
    "tests/agent/test_isolation.py::test_runaway_commands_end_with_a_clear_result_while_other_chats_get_answers",
    "tests/tasks/test_task_cards.py::test_a_run_that_waits_behind_an_answer_in_its_chat_waits_as_its_queued_card",
    "tests/channels/feishu/test_feishu_platform_rules.py::test_a_reply_paced_faster_than_feishu_allows_stays_inside_the_per_object_rates",
    "tests/channels/slack/test_slack_buttons.py::test_a_press_the_bus_cannot_store_is_not_acked_and_slacks_redelivery_stops_the_answer",
    "tests/foundation/test_restart_order.py::test_unfinished_messages_of_one_chat_resume_in_arrival_order_after_a_restart",
    "tests/channels/telegram/test_buttons.py::test_somebody_elses_press_in_a_group_is_refused_and_the_answer_goes_on",
    "tests/channels/slack/test_slack_store_then_confirm.py::test_a_stop_while_the_bus_is_full_loses_nothing_and_the_restart_answers_once",
    "tests/channels/slack/test_slack_connect.py::test_connect_sent_as_a_slack_slash_command_is_routed_like_typed_text",
    "tests/tasks/test_long_tool_in_jobs.py::test_a_scheduled_runs_long_command_is_a_step_of_its_one_card_and_a_chat_turns_gets_its_own",
)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the :data:`HEAVY` files and tests ``heavy``; hand them out first, then the :data:`SLOW`
    tests, each in list order, then the rest in file order."""
    rank = {entry: i for i, entry in enumerate(HEAVY + SLOW)}
    root = Path(str(config.rootpath))

    def key(item: pytest.Item) -> int:
        path = Path(str(item.path)).relative_to(root).as_posix()
        return rank.get(item.nodeid.split("[")[0], rank.get(path, len(rank)))

    for item in items:
        if key(item) < len(HEAVY):
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
    database = overrides.get("database")
    if isinstance(database, dict) and "url" not in database:
        # A test that sets other database keys still gets its own file: without the url the service's
        # default (./data, relative to the working directory) is the checkout itself, which an ordinary
        # user cannot write to and which tests running side by side would share.
        overrides = {**overrides, "database": {**base["database"], **database}}  # type: ignore[dict-item]
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
