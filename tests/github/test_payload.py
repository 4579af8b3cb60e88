"""The partial payload decoder (webhooks/payload.py) reads a delivery exactly as the full JSON parse did.

A field ``parse_event`` reads but the Structs do not declare would read as absent on the fast path and
nowhere else: a prompt without the comment, an author who is nobody. These tests catch that on every
stored payload, and check that payloads the Structs do not fit still parse the lenient way.
"""

from __future__ import annotations

import json

import orjson
import pytest

from tests.github.conftest import PAYLOADS, github_settings, payload, running_service
from webhooks.events import parse_event
from webhooks.payload import Payload, decode_payload

EVENTS = sorted(path.stem for path in PAYLOADS.glob("*.json"))


def _event_name(stem: str) -> str:
    return stem.split(".")[0]


@pytest.mark.parametrize("stem", EVENTS)
def test_every_stored_payload_decodes_to_the_same_event_as_the_full_parse(stem):
    body = json.dumps(payload(stem)).encode()
    decoded = decode_payload(body)
    assert isinstance(decoded, Payload), "a documented payload must take the fast path"
    fast, full = parse_event(_event_name(stem), decoded), parse_event(_event_name(stem), orjson.loads(body))
    assert fast == full
    if full is not None:  # ping is not an event we act on
        assert full.repo and full.number and full.author_login and full.url


def test_the_fields_that_decide_a_prompt_survive_the_fast_path():
    """Spelled out for one review and one review comment, the two shapes with the most fields."""
    review = parse_event(
        "pull_request_review", decode_payload(json.dumps(payload("pull_request_review.submitted")).encode())
    )
    assert review is not None
    assert review.text == "Looks good overall, one question about the timeout."
    assert review.extra == "review state: commented"
    comment_data = payload("pull_request_review_comment.created")
    comment = parse_event("pull_request_review_comment", decode_payload(json.dumps(comment_data).encode()))
    assert comment is not None
    path, line = comment_data["comment"]["path"], comment_data["comment"]["line"]
    assert comment.extra == f"on {path} line {line}"
    assert comment.author_id == str(comment_data["comment"]["user"]["id"])


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda d: d["issue"].__setitem__("number", "1"), id="number as a string"),
        pytest.param(
            lambda d: d["comment"]["user"].__setitem__("id", "MDQ6VXNlcjI="), id="user id as a string"
        ),
        pytest.param(lambda d: d.__setitem__("comment", "hello"), id="comment not an object"),
        pytest.param(lambda d: d["comment"].__setitem__("body", 42), id="comment body a number"),
    ],
)
def test_a_payload_of_other_types_is_read_the_lenient_way(mutate):
    data = payload("issue_comment.created")
    mutate(data)
    body = json.dumps(data).encode()
    decoded = decode_payload(body)
    assert isinstance(decoded, dict)  # the Structs did not fit: orjson's dictionaries
    assert parse_event("issue_comment", decoded) == parse_event("issue_comment", orjson.loads(body))


@pytest.mark.parametrize(
    "body",
    [b'{"action": "created", "issue": {"number": 1,}}', b'{"action": "created"} trailing', b"[" * 5000],
    ids=["trailing comma", "trailing text", "nested too deep"],
)
def test_what_is_not_json_still_raises_value_error(body):
    with pytest.raises(ValueError):
        decode_payload(body)


async def test_a_delivery_of_other_types_is_still_answered_through_the_route(tmp_path, llm, github):
    """End to end: such a delivery is neither a 400 nor a 500, it is read as before (not handled,
    since its number is no number)."""
    data = payload("issue_comment.created")
    data["issue"]["number"] = "1"
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        response = await sb.deliver("issue_comment", data)
    assert response.status_code == 200
    assert response.json()["handled"] is False
