"""docs/reference.md is generated from the code; a change that adds a key, command, route, table, tool or
metric without regenerating it fails here (``python -m bot.reference`` rewrites it)."""

from __future__ import annotations

from bot.reference import REFERENCE, config_rows, render
from config.schema import Settings


def test_the_reference_page_matches_the_code() -> None:
    assert REFERENCE.read_text() == render(), "docs/reference.md is stale: run python -m bot.reference"


def test_the_reference_lists_nested_keys_commands_routes_and_tables() -> None:
    text = render()
    keys = {key for key, _, _ in config_rows(Settings)}
    # Nested sections, list entries and per-channel sections are all walked.
    assert {"sandbox.limits.memory_mb", "models[].api_key", "channels.telegram.admins"} <= keys
    for entry in ("| /connect, /start |", "`switchboard webhooks retry`", "`POST /api/webhooks/github`"):
        assert entry in text
    for table in ("`inbox`", "`cluster_claims`", "`discord_cursors`", "`github_deliveries`"):
        assert table in text
