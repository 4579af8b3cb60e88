"""``switchboard users export|delete`` cover the web chat: a person's transcripts, uploads and received
files are listed in the export and gone after the delete, and another person's stay."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import yaml

from bot.app import create_app
from bot.cli import main as cli_main
from tests.conftest import make_settings
from tests.connections.conftest import jwt_overrides, token_for
from tests.serving import serving
from tests.webchat.conftest import new_conversation, send, texts, watching, web_channel

pytestmark = pytest.mark.slow


async def test_users_delete_removes_a_persons_web_chat_and_keeps_the_others(tmp_path, llm, capsys):
    settings = make_settings(tmp_path, llm, channels=web_channel(), **jwt_overrides())
    async with serving(create_app(settings)) as url, httpx.AsyncClient(base_url=url) as client:
        for user in ("alice", "bob"):
            token = token_for(user)
            conversation = await new_conversation(client, token)
            async with watching(client, token, conversation) as tab:
                note = [(f"{user}-notes.txt", f"{user.upper()}MARK".encode())]
                assert (
                    await send(client, token, conversation, f"hi from {user}", files=note)
                ).status_code == 202
                await tab.until(lambda es, user=user: any(f"echo: hi from {user}" in t for t in texts(es)))

    data_dir = Path(settings.data_dir)
    config = tmp_path / "cli.yaml"
    config.write_text(yaml.safe_dump({"database": {"url": settings.database.url}, "data_dir": str(data_dir)}))
    capsys.readouterr()
    assert await asyncio.to_thread(cli_main, ["users", "export", "alice", "--config", str(config)]) == 0
    exported = json.loads(capsys.readouterr().out)
    paths = [f["path"] for f in exported["web_chat_files"]]
    assert any(p.startswith("conversations/") for p in paths)
    assert any(p.endswith("alice-notes.txt") for p in paths)
    assert "bob" not in json.dumps(exported["web_chat_files"])

    assert (
        await asyncio.to_thread(cli_main, ["users", "delete", "alice", "--yes", "--config", str(config)]) == 0
    )
    assert not (data_dir / "web-chat" / "alice").exists()
    assert any(p.name == "bob-notes.txt" for p in (data_dir / "web-chat" / "bob").rglob("*"))
