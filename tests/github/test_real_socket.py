"""GitHub deliveries over a real socket: the app under uvicorn, as GitHub (and bench/webhooks.py) reach it.

The webhook is served ahead of FastAPI's routing (webhooks/route.py); what GitHub notices must not
change: a 2xx only once the delivery is committed, the same JSON answers and headers, refusals that
store nothing, a body that arrives in pieces read whole, and every other request still FastAPI's.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from config.schema import Settings
from tests.github.conftest import SECRET, comment_payload, github_settings
from tests.github.test_delivery_write_path import stored
from tests.serving import serving
from webhooks.signature import sign

PATH = "/api/webhooks/github"


@asynccontextmanager
async def served(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The real app (create_app, lifespan included) under uvicorn on 127.0.0.1; a client for it."""
    from bot.app import create_app

    async with (
        serving(create_app(settings)) as url,
        httpx.AsyncClient(base_url=url, trust_env=False) as client,
    ):
        yield client


def signed(body: bytes, delivery: str, secret: str = SECRET) -> dict[str, str]:
    return {
        "X-GitHub-Event": "issue_comment",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(secret, body),
        "Content-Type": "application/json",
    }


async def test_a_delivery_is_committed_before_its_200_and_answered_as_json(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    body = json.dumps(comment_payload("no mention here")).encode()
    delivery = str(uuid.uuid4())
    async with served(settings) as client:
        response = await client.post(PATH, content=body, headers=signed(body, delivery))
        on_disk = stored(settings, delivery)  # before anything else runs: the 200 means committed
    assert response.status_code == 200
    assert on_disk == ("done", "issue_comment")
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)
    answer = response.json()
    assert (answer["ok"], answer["delivery"], answer["handled"], answer["duplicate"]) == (
        True,
        delivery,
        True,
        False,
    )


async def test_forged_and_oversize_deliveries_are_refused_and_store_nothing(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github, max_body_bytes=4096)
    small = json.dumps(comment_payload("hi")).encode()[:4000]
    big = json.dumps(comment_payload("x" * 5000)).encode()
    forged_id, big_id = str(uuid.uuid4()), str(uuid.uuid4())
    async with served(settings) as client:
        forged = await client.post(PATH, content=small, headers=signed(small, forged_id, "not-the-secret"))
        oversize = await client.post(PATH, content=big, headers=signed(big, big_id))
    assert forged.status_code == 401
    assert forged.json() == {"ok": False, "error": "X-Hub-Signature-256 does not match the body"}
    assert oversize.status_code == 413
    assert oversize.json() == {
        "ok": False,
        "error": "payload larger than channels.github.max_body_bytes (4096)",
    }
    assert stored(settings, forged_id) is None
    assert stored(settings, big_id) is None


def pieces(body: bytes) -> AsyncIterator[bytes]:
    """The body as several chunks, without a Content-Length (chunked transfer encoding)."""

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1000):
            yield body[start : start + 1000]

    return chunks()


async def test_a_body_sent_in_chunks_is_verified_and_stored_whole(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    body = json.dumps(comment_payload("no mention here")).encode()
    delivery = str(uuid.uuid4())
    async with served(settings) as client:
        response = await client.post(PATH, content=pieces(body), headers=signed(body, delivery))
    assert response.status_code == 200, response.text
    assert stored(settings, delivery) == ("done", "issue_comment")


async def post_chunked_at_once(client: httpx.AsyncClient, body: bytes, headers: dict[str, str]) -> int:
    """A chunked request written in one piece (so the server may read it in one go); its status."""
    url = client.base_url
    reader, writer = await asyncio.open_connection(url.host, url.port)
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 1000]), body[i : i + 1000]) for i in range(0, len(body), 1000)
    )
    request = f"POST {PATH} HTTP/1.1\r\nHost: {url.host}\r\nTransfer-Encoding: chunked\r\n{head}\r\n"
    writer.write(request.encode() + chunks + b"0\r\n\r\n")
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    writer.close()
    await writer.wait_closed()
    return status


async def test_a_chunked_body_over_the_size_cap_is_refused_and_stores_nothing(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github, max_body_bytes=2048)
    body = json.dumps(comment_payload("no mention here")).encode()
    in_pieces, at_once = str(uuid.uuid4()), str(uuid.uuid4())
    async with served(settings) as client:
        response = await client.post(PATH, content=pieces(body), headers=signed(body, in_pieces))
        status = await post_chunked_at_once(client, body, signed(body, at_once))
    assert response.status_code == 413
    assert status == 413
    assert stored(settings, in_pieces) is None
    assert stored(settings, at_once) is None


async def test_other_methods_on_the_webhook_path_are_still_answered_by_fastapi(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with served(settings) as client:
        wrong_method = await client.get(PATH)
        docs = await client.get("/openapi.json")
    assert wrong_method.status_code == 405
    assert wrong_method.json() == {"detail": "Method Not Allowed"}
    assert PATH in docs.json()["paths"]
