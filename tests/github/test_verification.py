"""SCENARIOS 34–36: who may call the webhook route, and how it answers what it cannot use."""

from __future__ import annotations

import json
import logging

from tests.conftest import make_settings
from tests.github.conftest import SECRET, comment_payload, github_settings, payload, running_service
from webhooks.signature import sign

BAD_SIGNATURES = [
    (None, "missing"),
    ("sha1=0123456789abcdef0123456789abcdef01234567", "malformed"),
    ("sha256=zz", "malformed"),
    ("sha256=" + "0" * 64, "does not match"),
]


async def test_a_delivery_without_a_valid_signature_is_rejected_with_401(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        for signature, why in BAD_SIGNATURES:
            headers = {"X-Hub-Signature-256": signature} if signature else {}
            response = await sb.deliver(
                "issue_comment", comment_payload("@switchboard-bot hi"), secret=None, headers=headers
            )
            assert response.status_code == 401, signature
            assert why in response.json()["error"]
        other_secret = await sb.deliver(
            "issue_comment", comment_payload("@switchboard-bot hi"), secret="nope"
        )
        assert other_secret.status_code == 401
    assert llm.completions == []
    assert github.calls() == []


async def test_a_signature_wrong_only_in_its_first_or_last_hex_digit_is_rejected(tmp_path, llm, github):
    """The compare covers the whole digest: a prefix or truncated compare would let these through."""
    body = json.dumps(comment_payload("@switchboard-bot hi")).encode()
    good = sign(SECRET, body)
    flip = {c: "0" if c != "0" else "1" for c in "0123456789abcdef"}
    last = good[:-1] + flip[good[-1]]
    first = good[:7] + flip[good[7]] + good[8:]
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        for forged in (last, first):
            response = await sb.deliver(
                "issue_comment", body, secret=None, headers={"X-Hub-Signature-256": forged}
            )
            assert response.status_code == 401, forged
        accepted = await sb.deliver("issue_comment", body, secret=None, headers={"X-Hub-Signature-256": good})
        assert accepted.status_code == 200
        await sb.idle()
    assert len(llm.completions) == 1


async def test_the_signature_covers_the_raw_bytes_not_the_parsed_json(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    data = payload("ping")
    odd_bytes = json.dumps(data, indent=7, ensure_ascii=True).encode()
    async with running_service(settings) as sb:
        # Signed over exactly what is sent, unusual whitespace included: accepted.
        accepted = await sb.deliver("ping", odd_bytes)
        # Same JSON value, but signed over a different serialisation: rejected.
        from webhooks.signature import sign

        forged = await sb.deliver(
            "ping",
            json.dumps(data).encode(),
            secret=None,
            headers={"X-Hub-Signature-256": sign(SECRET, odd_bytes)},
        )
    assert accepted.status_code == 200
    assert forged.status_code == 401


async def test_without_a_webhook_secret_the_route_refuses_with_503(tmp_path, llm):
    settings = make_settings(tmp_path, llm)  # GitHub not configured at all
    async with running_service(settings, with_channel=False) as sb:
        response = await sb.deliver("ping", payload("ping"))
    assert response.status_code == 503
    assert "webhook_secret" in response.json()["error"]


async def test_an_enabled_channel_whose_secret_is_removed_still_refuses_unsigned_calls(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    settings.channels.github.webhook_secret = None
    async with running_service(settings) as sb:
        response = await sb.deliver("issue_comment", comment_payload("@switchboard-bot hi"), secret=None)
    assert response.status_code == 503
    assert llm.completions == []


async def test_the_insecure_dev_flag_accepts_unsigned_deliveries_and_says_so_loudly(
    tmp_path, llm, github, caplog
):
    settings = github_settings(tmp_path, llm, github, webhook_secret=None, allow_unsigned_webhooks=True)
    with caplog.at_level(logging.WARNING):
        async with running_service(settings) as sb:
            response = await sb.deliver("issue_comment", comment_payload("@switchboard-bot hi"), secret=None)
            await sb.idle()
    assert response.status_code == 200
    assert response.json()["dispatch"]["fired"] == ["reviewer"]
    assert any(
        "INSECURE" in r.getMessage() and "allow_unsigned_webhooks" in r.getMessage() for r in caplog.records
    )


async def test_ping_is_answered_200(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        response = await sb.deliver("ping", payload("ping"), delivery="ping-1")
    assert response.status_code == 200
    assert response.json() == {
        "ok": True,
        "event": "ping",
        "delivery": "ping-1",
        "handled": True,
        "duplicate": False,
        "dispatch": {"matched": [], "fired": [], "skipped": [], "trust": []},
    }


async def test_an_unknown_event_is_acknowledged_but_not_handled(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        response = await sb.deliver("star", {"action": "created", "repository": {"full_name": "a/b"}})
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True and body["handled"] is False and body["event"] == "star"
    assert llm.completions == []


async def test_malformed_json_is_a_400(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        broken = await sb.deliver("issue_comment", b'{"action": "created", ')
        not_an_object = await sb.deliver("issue_comment", b"[1, 2, 3]")
    assert broken.status_code == 400
    assert "JSON" in broken.json()["error"]
    assert not_an_object.status_code == 400


async def test_a_delivery_without_an_event_header_is_a_400(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        response = await sb.deliver("", payload("ping"))
    assert response.status_code == 400
    assert "X-GitHub-Event" in response.json()["error"]


async def test_a_body_over_the_size_cap_is_refused_with_413(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github, max_body_bytes=2048)
    big = comment_payload("@switchboard-bot " + "x" * 5000)
    async with running_service(settings) as sb:
        response = await sb.deliver("issue_comment", big)
    assert response.status_code == 413
    assert llm.completions == []
