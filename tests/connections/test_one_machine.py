"""Issue 27: ``auth.mode: none`` is for one machine — serve listens only on loopback, the API answers only
requests addressed to this machine (DNS rebinding), and /metrics needs a token in jwt mode."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_settings
from tests.connections.conftest import auth, jwt_overrides, running_app, token_for
from tests.foundation.test_cli import cli_env

FOREIGN = "rebind.example:8001"


@pytest.mark.slow
@pytest.mark.parametrize(("configured", "flag"), [("0.0.0.0", None), ("127.0.0.1", "::")])
def test_serve_refuses_no_auth_on_an_address_other_machines_reach(tmp_path, configured, flag):
    config = tmp_path / "config.yaml"
    config.write_text(
        f"server: {{host: '{configured}'}}\n"
        f"data_dir: {tmp_path / 'data'}\n"
        "models: [{name: default, model: m, api_key: sk-x, base_url: 'http://127.0.0.1:9/v1'}]\n"
    )
    command = [
        sys.executable,
        "-m",
        "bot",
        "serve",
        "--config",
        str(config),
        *(["--host", flag] if flag else []),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=90, env=cli_env())
    assert result.returncode == 2
    host = flag or configured
    assert result.stderr.strip().splitlines() == [
        f"switchboard: auth.mode is none but server.host is {host}, which other machines can reach, and "
        "every request would act as user 'default': listen on 127.0.0.1 (behind a proxy that "
        "authenticates) or set auth.mode: jwt with auth.jwt_secret"
    ]
    assert not (tmp_path / "data").exists()  # nothing started


def pending_codes(settings) -> int:  # type: ignore[no-untyped-def]
    database = Path(settings.database.url.split("///", 1)[1])
    with sqlite3.connect(database) as db:
        return int(db.execute("SELECT count(*) FROM connect_codes").fetchone()[0])


async def test_a_request_addressed_to_another_server_is_refused_when_nobody_signs_in(tmp_path, llm):
    settings = make_settings(tmp_path, llm, server={"public_url": "https://bot.example.com"})
    async with running_app(settings) as app:
        refused = await app.client.post("/api/channels/telegram/connect", headers={"Host": FOREIGN})
        listing = await app.client.get("/api/channels/connections", headers={"Host": FOREIGN})
        codes_after_refusal = pending_codes(settings)
        accepted = {
            host: (await app.client.get("/api/channels/connections", headers={"Host": host})).status_code
            for host in ("localhost", "localhost:8001", "127.0.0.1:9999", "[::1]:8001", "bot.example.com")
        }
    assert refused.status_code == 400 and listing.status_code == 400
    detail = refused.json()["detail"]
    assert detail == (
        f"the Host header ('{FOREIGN}') is not this server's: with auth.mode none only localhost, "
        "127.0.0.1, [::1], bot.example.com are accepted (server.public_url sets the last), so that no "
        "other web site can reach this API through your browser (DNS rebinding); use one of those "
        "names, or set auth.mode: jwt"
    )
    assert codes_after_refusal == 0  # refused before anything was made
    assert accepted == dict.fromkeys(accepted, 200)


async def test_with_tokens_the_host_is_not_what_decides(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm, **jwt_overrides())) as app:
        response = await app.client.get(
            "/api/channels/connections", headers={"Host": FOREIGN, **auth(token_for("alice"))}
        )
    assert response.status_code == 200


async def test_metrics_need_a_token_in_jwt_mode_unless_made_public(tmp_path, llm):
    async with running_app(make_settings(tmp_path / "a", llm, **jwt_overrides())) as app:
        missing = await app.client.get("/metrics")
        forged = await app.client.get("/metrics", headers={"Authorization": "Bearer not-a-token"})
        allowed = await app.client.get("/metrics", headers=auth(token_for("prometheus")))
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert "missing Authorization header" in missing.json()["detail"]
    assert forged.status_code == 401
    assert allowed.status_code == 200 and "switchboard_" in allowed.text

    public = make_settings(tmp_path / "b", llm, server={"metrics_public": True}, **jwt_overrides())
    async with running_app(public) as app:
        open_metrics = await app.client.get("/metrics")
    assert open_metrics.status_code == 200 and "switchboard_" in open_metrics.text
