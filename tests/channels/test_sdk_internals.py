"""Canaries for the SDK internals the channels lean on, so an SDK upgrade that removes one fails here,
by name, instead of as a hang or a silent misroute in production.

Each internal is used because the SDK has no public way to do the job (say which in the module that
uses it); the pins in pyproject.toml stop at the next minor release of each SDK named here, and this
file is what to run before raising a pin.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
from typing import Any

import pytest

# lark-oapi is imported the way the channel imports it (channels/feishu/__init__.py): the tests below
# would otherwise be the first to import it outside a running loop and leave its event loop open.
import channels.feishu  # noqa: F401


def test_discord_py_internals_used_by_channels_discord():
    import discord
    import discord.http
    from discord.gateway import DiscordWebSocket

    # point_discord_at: discord.py has no per-client REST base or gateway URL. (A Discord test that ran
    # earlier in this worker may have pointed them at its local fake already.)
    assert discord.http.Route.BASE.startswith(("https://", "http://127.0.0.1"))
    assert str(DiscordWebSocket.DEFAULT_GATEWAY).startswith(("wss://", "ws://127.0.0.1"))
    # The voice extras are not installed on purpose; these class flags silence discord.py's warnings.
    assert isinstance(discord.VoiceClient.warn_nacl, bool) and isinstance(discord.VoiceClient.warn_dave, bool)
    # channels/discord/commands.py registers commands over the client's HTTP layer (no CommandTree).
    assert list(inspect.signature(discord.http.HTTPClient.get_global_commands).parameters) == [
        "self",
        "application_id",
    ]
    assert list(inspect.signature(discord.http.HTTPClient.bulk_upsert_global_commands).parameters) == [
        "self",
        "application_id",
        "payload",
    ]


async def test_discord_py_sends_a_stopped_view_without_storing_it_for_dispatch():
    """channels/discord/buttons.py renders buttons with a View stopped before it is sent: every send/edit
    path serialises it but stores only a view that is not finished (so nothing is kept per message and
    no view callback sees a press). If a path stopped checking ``is_finished()``, views would pile up."""
    import discord
    import discord.abc
    import discord.message
    import discord.webhook.async_

    view = discord.ui.View(timeout=None)
    view.add_item(discord.ui.Button(label="Go", custom_id="/go", style=discord.ButtonStyle.danger))
    view.stop()
    assert view.is_finished()
    assert view.to_components() == [
        {
            "type": 1,
            "components": [{"type": 2, "style": 4, "disabled": False, "label": "Go", "custom_id": "/go"}],
        }
    ]
    for method in (
        discord.abc.Messageable.send,
        discord.message.PartialMessage.edit,
        discord.InteractionResponse.send_message,
        discord.Interaction.edit_original_response,
        discord.webhook.async_.Webhook.send,
        discord.webhook.async_.Webhook.edit_message,
    ):
        source = inspect.getsource(method)
        assert "store_view(" in source and "view.is_finished()" in source, method.__qualname__


def test_sdk_request_paths_the_platform_tables_describe():
    """docs/channels/discord.md leaves Discord's per-route buckets to discord.py, which reads the
    ``X-RateLimit-*`` headers of each answer and waits when a bucket is empty; docs/channels/slack.md
    lists ``files_upload_v2`` as ``files.getUploadURLExternal`` + upload + ``files.completeUploadExternal``
    (what the Slack fake checks). An SDK that stopped doing either would change what the tables say."""
    import discord.http
    from slack_sdk.web.async_client import AsyncWebClient

    bucket = inspect.getsource(discord.http.Ratelimit.update)
    assert "X-Ratelimit-Remaining" in bucket and "X-Ratelimit-Reset-After" in bucket
    upload = inspect.getsource(AsyncWebClient.files_upload_v2)
    assert "files_getUploadURLExternal" in upload and "files_completeUploadExternal" in upload


def _lark_ws_client_on_its_own_loop(lark: Any) -> Any:
    """A ``lark.ws.Client`` built the way ``FeishuChannel._run_ws`` builds one: on a loop of its own.

    The client's ``ExpiringCache`` schedules a clear-cron task on the current loop as it is constructed.
    Built outside a running loop and never run, that task's coroutine was garbage-collected unawaited
    ("coroutine 'ExpiringCache._start_clear_cron' was never awaited", surfacing in whichever test ran
    next). Here it is built inside a running loop, whose tasks are then cancelled and awaited before it
    closes, as ``_run_ws`` does when the long connection stops.
    """

    async def build() -> Any:
        return lark.ws.Client("app", "secret")

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(build())
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()


def test_lark_oapi_internals_used_by_channels_feishu():
    import lark_oapi as lark
    import lark_oapi.ws.client as ws_module

    # _run_ws: the SDK schedules all its work on this module-level loop.
    assert hasattr(ws_module, "loop")
    # _shutdown_ws: no public stop(); start() runs the private _select() until it is cancelled.
    assert inspect.iscoroutinefunction(ws_module._select)
    client = _lark_ws_client_on_its_own_loop(lark)
    # _wait_connected reads _conn (no "connected" event); _shutdown_ws turns _auto_reconnect off.
    assert client._conn is None
    assert client._auto_reconnect is True
    assert callable(client.on_reconnecting) and callable(client.on_reconnected)
    # _LongConnection relabels card frames before the SDK's private data-frame handler reads them.
    handler = inspect.signature(ws_module.Client._handle_data_frame)
    assert list(handler.parameters) == ["self", "frame"]
    assert inspect.iscoroutinefunction(ws_module.Client._handle_data_frame)
    # normalise_press / _on_card_action: the callback registration and its answer type.
    assert callable(lark.EventDispatcherHandler.builder("", "").register_p2_card_action_trigger)


def test_importing_the_feishu_channel_outside_a_loop_leaves_no_event_loop_open() -> None:
    """lark-oapi makes and installs an event loop when ``lark_oapi.ws.client`` is imported outside a
    running one, and nothing closes it. The CLI's extras check and a test collection import the channel
    that way; the import must leave nothing open (a stray loop holds its selector and a socket pair, and
    was reported as "unclosed event loop" whenever it was collected)."""
    code = (
        "import os\n"
        "before = set(os.listdir('/proc/self/fd'))\n"
        "import channels.feishu.channel\n"
        "print(sorted(set(os.listdir('/proc/self/fd')) - before))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"file descriptors left open by the import: {done.stdout}"


def test_dingtalk_stream_internals_used_by_channels_dingtalk():
    import dingtalk_stream

    # _StreamClient: the gateway URL is a class attribute the SDK reads in open_connection().
    # (A DingTalk test that ran earlier in this worker may have pointed it at its local fake already.)
    assert dingtalk_stream.DingTalkStreamClient.OPEN_CONNECTION_API.startswith(
        ("https://", "http://127.0.0.1")
    )
    # The two methods _StreamClient overrides to report connection state, with the same signatures.
    assert list(inspect.signature(dingtalk_stream.DingTalkStreamClient.open_connection).parameters) == [
        "self"
    ]
    keepalive = inspect.signature(dingtalk_stream.DingTalkStreamClient.keepalive)
    assert list(keepalive.parameters) == ["self", "ws", "ping_interval"]
    assert inspect.iscoroutinefunction(dingtalk_stream.DingTalkStreamClient.keepalive)
    assert inspect.iscoroutinefunction(dingtalk_stream.ChatbotHandler.process)


@pytest.mark.parametrize(
    ("module", "attribute"),
    [
        ("telegram", "Bot.send_message_draft"),  # private-chat drafts (python-telegram-bot >= 22.7)
        ("slack_sdk.web.async_client", "AsyncWebClient.chat_startStream"),  # slack_sdk >= 3.48
        ("slack_sdk.web.async_client", "AsyncWebClient.chat_appendStream"),
        ("slack_sdk.web.async_client", "AsyncWebClient.chat_stopStream"),
        ("lark_oapi.api.cardkit.v1", "CreateCardRequest"),  # CardKit streaming cards (lark-oapi >= 1.7.5)
        ("lark_oapi.api.contact.v3", "GetUserRequest"),  # Feishu display names (channels/feishu/names.py)
    ],
)
def test_public_sdk_calls_the_native_replies_need_exist(module: str, attribute: str):
    imported = __import__(module, fromlist=["_"])
    target: object = imported
    for part in attribute.split("."):
        target = getattr(target, part)
    assert callable(target)
