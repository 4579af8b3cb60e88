"""The fake's robot media upload and robot messages follow DingTalk's documented rules (each test here
failed against the old fake, which took any file as any type and any msgKey)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from tests.fakes.dingtalk import FakeDingTalk

MB = 1024 * 1024


@asynccontextmanager
async def _client(fake: FakeDingTalk) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    async with httpx.AsyncClient(base_url=fake.url) as client:
        answer = await client.post(
            "/v1.0/oauth2/accessToken", json={"appKey": fake.client_id, "appSecret": fake.client_secret}
        )
        yield client, answer.json()["accessToken"]


async def _upload(client: httpx.AsyncClient, token: str, media_type: str, name: str, data: bytes) -> dict:
    answer = await client.post(
        "/media/upload", params={"access_token": token, "type": media_type}, files={"media": (name, data)}
    )
    assert answer.status_code == 200  # the old oapi host answers errors as HTTP 200 + errcode
    return answer.json()


@pytest.mark.parametrize(
    ("media_type", "name", "size", "errcode"),
    [
        ("document", "a.pdf", 10, 40004),  # not one of image/voice/video/file
        ("file", "table.csv", 10, 40005),  # csv is not on the file list
        ("file", "notes.txt", 10, 40005),
        ("file", "chart.png", 10, 40005),  # a picture is an image upload, not a file
        ("image", "photo.webp", 10, 40005),  # image takes jpg/gif/png/bmp
        ("voice", "clip.amr", 2 * MB + 1, 40006),  # voice is at most 2 MB
        ("file", "big.zip", 20 * MB + 1, 40006),
        ("file", "empty.pdf", 0, 40006),
    ],
)
async def test_an_upload_dingtalk_refuses_gets_its_errcode(fake_dingtalk, media_type, name, size, errcode):
    async with _client(fake_dingtalk) as (client, token):
        answer = await _upload(client, token, media_type, name, b"x" * size)
    assert answer["errcode"] == errcode and "media_id" not in answer
    assert fake_dingtalk.media == {}


async def test_each_type_takes_its_own_formats(fake_dingtalk):
    async with _client(fake_dingtalk) as (client, token):
        answers = [
            await _upload(client, token, t, n, b"x" * 100)
            for t, n in (("image", "a.png"), ("voice", "b.mp3"), ("video", "c.mp4"), ("file", "d.zip"))
        ]
    assert [a["errcode"] for a in answers] == [0, 0, 0, 0]
    assert [a["type"] for a in answers] == ["image", "voice", "video", "file"]


async def test_a_file_message_needs_a_file_upload_and_a_picture_an_image_upload(fake_dingtalk):
    conversation = fake_dingtalk.p2p_conversation("alice")

    async def send(client: httpx.AsyncClient, token: str, key: str, param: dict) -> int:
        answer = await client.post(
            "/v1.0/robot/oToMessages/batchSend",
            headers={"x-acs-dingtalk-access-token": token},
            json={
                "robotCode": fake_dingtalk.client_id,
                "userIds": ["alice"],
                "msgKey": key,
                "msgParam": json.dumps(param),
            },
        )
        return answer.status_code

    async with _client(fake_dingtalk) as (client, token):
        image = (await _upload(client, token, "image", "a.png", b"png"))["media_id"]
        file = (await _upload(client, token, "file", "d.pdf", b"pdf"))["media_id"]
        codes = [
            await send(
                client, token, "sampleFile", {"mediaId": image, "fileName": "a.png", "fileType": "png"}
            ),
            await send(client, token, "sampleImageMsg", {"photoURL": file}),
            await send(client, token, "sampleVideo", {"videoMediaId": file}),
            await send(client, token, "sampleImageMsg", {"photoURL": image}),
            await send(
                client, token, "sampleFile", {"mediaId": file, "fileName": "d.pdf", "fileType": "pdf"}
            ),
        ]
    assert codes == [400, 400, 400, 200, 200]
    assert [b.kind for b in fake_dingtalk.bubbles(conversation)] == ["image", "file"]
