"""deploy/slack-manifest.yaml grants what the Slack channel calls, and offers the one slash command.

An app installed from the manifest must not fail with ``missing_scope`` on its first answer: every Web
API method called in ``channels/slack*.py`` needs its scope (as Slack's method reference lists it) in the
manifest. A new call without an entry below fails this test until both are added.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from config.channels.slack import SlackConfig

ROOT = Path(__file__).resolve().parents[3]
#: Bot scope each method needs (Slack's method reference); None: no scope (or another token).
METHOD_SCOPES: dict[str, str | None] = {
    "auth_test": None,
    "apps_connections_open": None,  # the app-level token's connections:write
    "chat_postMessage": "chat:write",
    "chat_update": "chat:write",
    "chat_postEphemeral": "chat:write",
    "chat_startStream": "chat:write",
    "chat_appendStream": "chat:write",
    "chat_stopStream": "chat:write",
    "assistant_threads_setStatus": "assistant:write",
    "files_info": "files:read",
    "files_upload_v2": "files:write",
    "send": None,  # AsyncWebhookClient.send: a slash command's response_url needs no token
}
#: Events the channel listens to, and the scope each needs.
EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.im": "im:history",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
}


def manifest() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "deploy" / "slack-manifest.yaml").read_text())


def called_methods() -> set[str]:
    source = "".join(p.read_text() for p in (ROOT / "channels").glob("slack*.py"))
    return set(re.findall(r"client\.([A-Za-z0-9_]+)\(", source))


def test_every_web_api_call_of_the_channel_has_its_scope_in_the_manifest():
    scopes = set(manifest()["oauth_config"]["scopes"]["bot"])
    methods = called_methods()
    unknown = methods - METHOD_SCOPES.keys()
    assert not unknown, f"add the scope of {sorted(unknown)} to METHOD_SCOPES and the manifest"
    needed = {METHOD_SCOPES[m] for m in methods} - {None}
    assert needed <= scopes, f"missing in the manifest: {sorted(needed - scopes)}"
    events = set(manifest()["settings"]["event_subscriptions"]["bot_events"])
    assert {EVENT_SCOPES[e] for e in events} <= scopes
    assert "commands" in scopes  # the slash command


def test_the_manifest_offers_one_slash_command_over_socket_mode():
    data = manifest()
    commands = [c["command"] for c in data["features"]["slash_commands"]]
    assert commands == [SlackConfig.model_fields["slash_command"].default]
    assert data["settings"]["socket_mode_enabled"] is True
    assert data["settings"]["interactivity"]["is_enabled"] is True
