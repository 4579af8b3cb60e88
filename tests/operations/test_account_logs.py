"""Linking and unlinking an account each leave one structured log line (who, which platform, which link)."""

from __future__ import annotations

import logging

from tests.conftest import make_settings
from tests.connections.conftest import running_app


async def test_link_and_unlink_are_logged(tmp_path, llm, caplog):
    caplog.set_level(logging.INFO, logger="connections.store")
    async with running_app(make_settings(tmp_path, llm)) as app:
        code = (await app.new_code())["code"]
        await app.say(f"/connect {code}")
        (connection,) = await app.connections()
        assert (await app.client.delete(f"/api/channels/connections/{connection['id']}")).status_code == 204
    events = [r.fields for r in caplog.records if r.name == "connections.store"]  # type: ignore[attr-defined]
    assert events == [
        {"event": "link", "owner": "default", "provider": "telegram", "connection": connection["id"]},
        {"event": "unlink", "owner": "default", "provider": "telegram", "connection": connection["id"]},
    ]
