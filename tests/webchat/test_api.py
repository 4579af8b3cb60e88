"""``/api/chat``: the web chat's API on the real app under uvicorn (real sockets, streamed events).

Signed-out callers are refused, a message is in the inbox before its POST is answered, nobody reaches
another person's conversations or files, and a conversation (and a reply still being written) survives
a reload of the page and a restart of the service.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bot.app import create_app
from bot.inbox import PENDING
from bot.manager import STOPPED_NOTE
from tests.conftest import make_settings
from tests.connections.conftest import auth, jwt_overrides, token_for
from tests.fakes.openai_server import Hold, Reply, ToolCall
from tests.serving import serving
from tests.webchat.conftest import new_conversation, send, texts, watching, web_channel

pytestmark = pytest.mark.slow

LONG = " ".join(f"word{i}" for i in range(400))


def settings_for(tmp_path, llm, **overrides):  # type: ignore[no-untyped-def]
    return make_settings(tmp_path, llm, channels=web_channel(), **jwt_overrides(), **overrides)


async def test_signed_out_callers_are_refused_and_nobody_sees_another_persons_conversations(tmp_path, llm):
    app = create_app(settings_for(tmp_path, llm))
    alice, bob = token_for("alice"), token_for("bob")
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for path in ("/api/chat/conversations", "/api/chat/files/abcdefghijkl"):
            assert (await client.get(path)).status_code == 401
            bad = await client.get(path, headers=auth(token_for("alice") + "x"))
            assert bad.status_code == 401
            assert "signature" in bad.json()["detail"]
        assert (await client.post("/api/chat/conversations")).status_code == 401

        mine = await new_conversation(client, alice)
        async with watching(client, alice, mine) as tab:
            assert (await send(client, alice, mine, "hello there")).status_code == 202
            await tab.until(lambda es: "echo: hello there" in texts(es))

        listed = (await client.get("/api/chat/conversations", headers=auth(alice))).json()
        assert [(c["id"], c["title"]) for c in listed] == [(mine, "hello there")]
        assert (await client.get("/api/chat/conversations", headers=auth(bob))).json() == []

        # Bob knows Alice's conversation id: to him it does not exist.
        for response in (
            await client.get(f"/api/chat/conversations/{mine}", headers=auth(bob)),
            await client.get(f"/api/chat/conversations/{mine}/events", headers=auth(bob)),
            await send(client, bob, mine, "let me in"),
        ):
            assert response.status_code == 404, response.text
        assert (await client.get(f"/api/chat/conversations/{mine}", headers=auth(None))).status_code == 401
        detail = (await client.get(f"/api/chat/conversations/{mine}", headers=auth(alice))).json()
        assert texts(detail["entries"], "user") == ["hello there"]
        assert "let me in" not in str(detail)


async def test_a_message_is_in_the_inbox_before_its_post_is_answered(tmp_path, llm):
    llm.script(Reply(text=LONG, chunk_size=8, delay=0.05))
    app = create_app(settings_for(tmp_path, llm))
    token = token_for("alice")
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        conversation = await new_conversation(client, token)
        async with watching(client, token, conversation) as tab:
            response = await send(
                client, token, conversation, "write a long story", client_id="first-message"
            )
            assert response.status_code == 202 and response.json()["accepted"] is True
            stored = [e for e in await app.state.service.inbox.unfinished() if e.message.provider == "web"]
            assert [(e.message.text, e.message.workspace, e.status) for e in stored] == [
                ("write a long story", "alice", PENDING)
            ]
            # A POST retried because its answer was lost (the page retries once): stored once, run once.
            again = await send(client, token, conversation, "write a long story", client_id="first-message")
            assert again.status_code == 202 and again.json()["accepted"] is False
            assert len(await app.state.service.inbox.unfinished()) == 1
            live = await tab.until(lambda es: any(e["live"] and "word3" in e["text"] for e in es))
            [reply] = [e for e in live if e["role"] == "assistant"]
            [stop] = [a for a in reply["actions"] if a["command"].startswith("/stop")]
            assert (
                await send(client, token, conversation, stop["command"], pressed=reply["ref"])
            ).status_code == 202
            done = await tab.until(lambda es: any(STOPPED_NOTE in t for t in texts(es)))
            assert not any(e["live"] for e in done)
            assert len(texts(done, "user")) == 1 and len(texts(done)) == 1
            assert "word399" not in "".join(texts(done))


async def test_a_reload_shows_the_reply_in_progress_and_a_restart_keeps_the_conversation(tmp_path, llm):
    # The answer waits mid-stream until the reloaded tab has its snapshot: it is certainly still being
    # written then (no 9 s stream sized as that margin).
    hold = Hold()
    llm.script(Reply(text=LONG, chunk_size=8, hold=hold, hold_after_chunks=10))
    settings = settings_for(tmp_path, llm)
    token = token_for("alice")
    app = create_app(settings)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        conversation = await new_conversation(client, token)
        assert (await send(client, token, conversation, "tell me everything")).status_code == 202
        async with watching(client, token, conversation) as first:
            await first.until(lambda es: any(e["live"] and "word5" in e["text"] for e in es))
        # The tab reloads while the answer is being written: it gets the text so far, then the rest.
        async with watching(client, token, conversation) as reloaded:
            assert reloaded.snapshot is not None
            [partial] = [e for e in reloaded.snapshot if e["role"] == "assistant"]
            assert partial["live"] and "word5" in partial["text"] and "word399" not in partial["text"]
            hold.open()
            await reloaded.until(lambda es: any("word399" in e["text"] and not e["live"] for e in es))

    async with serving(create_app(settings)) as url, httpx.AsyncClient(base_url=url) as client:
        detail = (await client.get(f"/api/chat/conversations/{conversation}", headers=auth(token))).json()
        assert texts(detail["entries"], "user") == ["tell me everything"]
        assert texts(detail["entries"]) == [LONG]


async def test_bad_messages_get_a_clear_error_and_change_nothing(tmp_path, llm):
    settings = settings_for(tmp_path, llm)
    settings.channels.web.max_file_bytes = 10
    app = create_app(settings)
    token = token_for("alice")
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        conversation = await new_conversation(client, token)
        empty = await send(client, token, conversation, "   ")
        assert empty.status_code == 422 and "empty" in empty.json()["detail"]
        big = await send(client, token, conversation, "see file", files=[("big.bin", b"x" * 11)])
        assert big.status_code == 413 and "channels.web.max_file_bytes" in big.json()["detail"]
        assert (await send(client, token, "no-such-conversation", "hi")).status_code == 404
        detail = (await client.get(f"/api/chat/conversations/{conversation}", headers=auth(token))).json()
        assert detail["entries"] == []
        assert await app.state.service.inbox.unfinished() == []


async def test_commands_and_approval_buttons_work_as_on_every_other_channel(tmp_path, llm):
    risky = "rm -rf /mnt/user-data/workspace/build"
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": risky})]),
        Reply(text="done with the build directory"),
    )
    settings = settings_for(tmp_path, llm, sandbox={"mode": "host"})
    app = create_app(settings)
    token = token_for("alice")
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        conversation = await new_conversation(client, token)
        async with watching(client, token, conversation) as tab:
            assert (await send(client, token, conversation, "/help")).status_code == 202
            await tab.until(lambda es: any("/new" in t and "/stop" in t for t in texts(es)))

            assert (await send(client, token, conversation, "clean up the build")).status_code == 202
            entries = await tab.until(
                lambda es: any(a["label"] == "Approve" for e in es for a in e["actions"])
            )
            [request] = [e for e in entries if any(a["label"] == "Approve" for a in e["actions"])]
            assert risky in request["text"]
            approve = next(a for a in request["actions"] if a["label"] == "Approve")
            pressed = await send(client, token, conversation, approve["command"], pressed=request["ref"])
            assert pressed.status_code == 202
            await tab.until(lambda es: any("done with the build directory" in t for t in texts(es)))
            assert approve["command"] not in texts(
                list(tab.entries.values()), "user"
            )  # a press, not a message
    [workspace] = Path(settings.data_dir).glob("users/alice/threads/*/user-data/workspace")
    assert not (workspace / "build").exists()  # approved: the command ran in alice's own space
