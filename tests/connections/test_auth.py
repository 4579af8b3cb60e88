"""auth.mode jwt: missing/invalid/expired tokens are 401 with a clear reason; the token CLI mints valid ones."""

from __future__ import annotations

import time

import jwt

from bot.cli import main as switchboard
from tests.conftest import make_settings
from tests.connections.conftest import JWT_SECRET, auth, jwt_overrides, running_app, token_for

API_CALLS = [
    ("GET", "/api/channels/providers"),
    ("GET", "/api/channels/connections"),
    ("POST", "/api/channels/telegram/connect"),
    ("DELETE", "/api/channels/connections/abc"),
]


def _token(claims: dict, secret: str = JWT_SECRET, algorithm: str = "HS256") -> str:
    return jwt.encode(claims, secret, algorithm=algorithm)


async def test_every_api_call_without_a_token_is_401_with_a_clear_reason(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm, **jwt_overrides())) as app:
        responses = [await app.client.request(method, path) for method, path in API_CALLS]
        page = await app.client.get("/connect")

    for response in responses:
        assert response.status_code == 401
        assert "missing Authorization header" in response.json()["detail"]
        assert response.headers["www-authenticate"] == "Bearer"
    assert page.status_code == 200 and 'data-auth-mode="jwt"' in page.text


BAD_TOKENS = {
    "expired": (_token({"sub": "alice", "exp": int(time.time()) - 10}), "expired"),
    "wrong-secret": (
        _token(
            {"sub": "alice", "exp": int(time.time()) + 86400}, secret="another-secret-0123456789abcdef-xyz"
        ),
        "signature",
    ),
    "no-exp": (_token({"sub": "alice"}), "'exp'"),
    "no-sub": (_token({"exp": int(time.time()) + 86400}), "'sub'"),
    "platform-identity-as-user": (
        _token({"sub": "telegram:-:42", "exp": int(time.time()) + 86400}),
        "not a valid user id",
    ),
    "alg-none": (
        jwt.encode({"sub": "alice", "exp": int(time.time()) + 86400}, None, algorithm="none"),
        "malformed",
    ),
    "garbage": ("not.a.jwt", "malformed"),
}


async def test_an_invalid_token_is_401_and_says_why(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm, **jwt_overrides())) as app:
        for case, (token, reason) in BAD_TOKENS.items():
            response = await app.client.get("/api/channels/connections", headers=auth(token))
            assert response.status_code == 401, case
            assert reason in response.json()["detail"], (case, response.json())


async def test_a_non_bearer_authorization_header_is_401(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm, **jwt_overrides())) as app:
        response = await app.client.get(
            "/api/channels/providers", headers={"Authorization": "Basic YWxpY2U6eA=="}
        )
    assert response.status_code == 401
    assert "Bearer" in response.json()["detail"]


async def test_a_token_from_the_cli_signs_in_as_that_user(tmp_path, llm, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(f"auth: {{mode: jwt, jwt_secret: {JWT_SECRET}}}\n")
    assert switchboard(["token", "create", "--config", str(config), "--user", "alice", "--ttl", "120"]) == 0
    token = capsys.readouterr().out.strip()

    claims = jwt.decode(token, JWT_SECRET, algorithms=["HS256"])
    assert claims["sub"] == "alice"
    assert 0 < claims["exp"] - time.time() <= 120
    async with running_app(make_settings(tmp_path, llm, **jwt_overrides())) as app:
        code = await app.new_code(token=token)
        reply = await app.say(f"/start {code['code']}")
        mine = await app.connections(token)
        others = await app.connections(token_for("bob"))
    assert reply == "Connected: this Telegram account now belongs to alice."
    assert len(mine) == 1 and others == []


def test_the_token_cli_refuses_without_a_secret_or_with_a_bad_user(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("auth: {mode: none}\n")
    assert switchboard(["token", "create", "--config", str(config), "--user", "alice"]) == 2
    assert "auth.jwt_secret" in capsys.readouterr().err

    config.write_text(f"auth: {{mode: jwt, jwt_secret: {JWT_SECRET}}}\n")
    assert switchboard(["token", "create", "--config", str(config), "--user", "bad:name"]) == 2
    assert "user id" in capsys.readouterr().err
    assert switchboard(["token", "create", "--config", str(config), "--user", "alice", "--ttl", "0"]) == 2
    assert "--ttl" in capsys.readouterr().err
