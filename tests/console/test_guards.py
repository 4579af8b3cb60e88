"""What holds for every console route, found by walking the app's routes (a new route is covered without
editing a list): non-admins are refused, and no response carries a secret the service knows."""

from __future__ import annotations

import pytest

from config.secrets import known_secrets
from tests.connections.conftest import auth, token_for
from tests.console.kit import admin_token, console_routes, console_settings, fill_every_list, running_console
from tests.console.test_api import RISKY, RISKY_TURN
from tests.github.conftest import app_key, github  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow  # the fake GitHub and model servers, the service's lifespan

#: Not configuration, but a secret all the same: the environment's model key (config may name it as $VAR).
ENV_KEY = "sk-from-the-environment-0123456789"


async def test_every_console_route_refuses_non_admins_and_signed_out_callers(tmp_path, llm, github):  # noqa: F811
    async with running_console(console_settings(tmp_path, llm, github)) as console:
        routes = console_routes(console.app)
        assert ("POST", "/api/admin/people/{person}/connections/{connection_id}/unlink") in routes
        assert ("GET", "/admin") in routes
        for method, path in routes:
            url = path.replace("{decision}", "approve").replace("{", "").replace("}", "")
            refused = await console.client.request(method, url, headers=auth(token_for("alice")))
            assert refused.status_code == 403, (method, path, refused.text)
            assert "alice is not an operator" in refused.json()["detail"]
            if path != "/admin":  # a browser's first load of the page brings no token: it asks for one
                anonymous = await console.client.request(method, url)
                assert anonymous.status_code == 401, (method, path)
        # The page's script and stylesheet are public: they hold no data.
        script = await console.client.get("/admin/assets/admin.js")
        assert script.status_code == 200 and "/api/admin/" in script.text
        assert (await console.client.get("/admin/assets/admin.html")).status_code == 404


async def test_no_console_response_carries_a_configured_or_environment_secret(
    tmp_path,
    llm,
    github,  # noqa: F811
    monkeypatch,
):
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    settings = console_settings(tmp_path, llm, github)
    # The configuration's secrets and the key this test puts in the environment (the rest of the test
    # run's environment is not this service's business).
    secrets = known_secrets(settings, {"OPENAI_API_KEY": ENV_KEY})
    # The secrets the issue names are all among those the service knows, so the scan looks for them.
    for value in (
        settings.auth.jwt_secret,
        settings.models[0].api_key,
        settings.channels.github.webhook_secret,
    ):
        assert value in secrets
    assert ENV_KEY in secrets

    async with running_console(settings) as console:
        # An error message that quotes a key, as a library's might: it must reach the console masked.
        leaky = f"401 from the model: key {settings.models[0].api_key} (env {ENV_KEY}) was refused"
        await fill_every_list(console, leaky)
        llm.script(*RISKY_TURN)
        await console.telegram.say("clean up the build", sender_name="Ada")
        await console.telegram.wait_for_text("Approval needed", timeout=30)
        [approval] = await console.get("/api/admin/approvals")
        assert approval["command"] == RISKY
        ids = {**console.ids, "approval_id": approval["id"], "decision": "deny"}

        bodies: dict[str, str] = {}
        routes = console_routes(console.app)
        for method, path in sorted(routes, key=lambda r: r[0]):  # every GET before any action changes things
            url = path
            for name, value in ids.items():
                url = url.replace("{" + name + "}", value)
            assert "{" not in url, f"{path}: the test does not know an id for this route's parameter"
            response = await console.client.request(method, url, headers=auth(admin_token()))
            assert response.status_code < 500, (method, path, response.text)
            bodies[f"{method} {path}"] = response.text + " " + str(dict(response.headers))
        for asset in ("admin.js", "admin.css"):
            bodies[asset] = (await console.client.get(f"/admin/assets/{asset}")).text
        assert {m for m, _ in routes} == {"GET", "POST"}
        await console.idle()

    [dead] = [b for k, b in bodies.items() if k == "GET /api/admin/dead-letters"]
    assert "401 from the model: key *** (env ***) was refused" in dead
    for where, body in bodies.items():
        for secret in secrets:
            assert secret not in body, f"{where} shows a secret"
