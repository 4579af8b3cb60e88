"""The operator console in a real headless Chromium against the real app served by uvicorn.

An operator sees a running turn and stops it, cancels a schedule, retries a dead-lettered message,
approves or denies a waiting command, retries a failed GitHub delivery and unlinks a person's connection, at a
phone's and a desktop's size with the controls on screen; a non-admin token is refused on the page.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.app import create_app
from bot.inbox import DEAD
from bot.manager import STOPPED_NOTE
from channels.memory import MemoryChannel
from tests.conftest import make_settings
from tests.connections.conftest import jwt_overrides, token_for
from tests.connections.test_browser import CHROMIUM, CHROMIUM_ARGS, DESKTOP, PHONE, TIMEOUT_MS
from tests.console.kit import console_app, console_settings, signed_delivery
from tests.fakes.openai_server import Reply
from tests.github.conftest import BOT, REPO, app_key, comment_payload, github  # noqa: F401  (fixtures)
from tests.serving import serving

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]


async def _box(page, selector: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The element's box after scrolling it into view, with the viewport and the page's width."""
    await page.locator(selector).scroll_into_view_if_needed()
    return await page.evaluate(  # type: ignore[no-any-return]
        """(sel) => {
            const r = document.querySelector(sel).getBoundingClientRect();
            return {top: r.top, bottom: r.bottom, left: r.left, right: r.right,
                    width: window.innerWidth, height: window.innerHeight,
                    scrollWidth: document.documentElement.scrollWidth};
        }""",
        selector,
    )


#: Resolves when the page next redraws the list with this id (its poll replaces the list's children).
REDRAWN = """(id) => new Promise((done) => new MutationObserver((_, seen) => { seen.disconnect(); done(); })
    .observe(document.getElementById(id), {childList: true}))"""


@asynccontextmanager
async def console_page(pw: Any, base_url: str, viewport: dict[str, int]) -> AsyncIterator[Any]:
    """``/admin`` open in a fresh headless Chromium at this size; the browser closes after the block."""
    browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    try:
        page = await browser.new_page(viewport=viewport)
        page.set_default_timeout(TIMEOUT_MS)
        await page.goto(f"{base_url}/admin")
        yield page
    finally:
        await browser.close()


def _on_screen(box: dict[str, float]) -> bool:
    return (
        box["left"] >= 0
        and box["right"] <= box["width"]
        and box["top"] >= 0
        and box["bottom"] <= box["height"]
        and box["scrollWidth"] <= box["width"]
    )


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone-390x844", "desktop-1366x900"])
async def test_an_operator_stops_a_running_turn_and_retries_a_dead_letter(tmp_path, llm, viewport):
    from playwright.async_api import async_playwright, expect

    llm.script(Reply(text=" ".join(f"word{i}" for i in range(600)), chunk_size=4, delay=0.05))
    settings = make_settings(tmp_path, llm, bus={"max_attempts": 1})
    telegram = MemoryChannel("telegram")
    app = create_app(settings, channels={"telegram": telegram})

    async with serving(app) as base_url, async_playwright() as pw:
        inbox = app.state.service.inbox
        dead = await inbox.accept(telegram.make_message("are you there?", chat="chat-2", message_id="d1"))
        assert await inbox.mark_failed(dead.id, "the model was down") == DEAD
        await telegram.say("/schedule every day 09:00 water the plants", chat="chat-3")
        await telegram.wait_for_text("Scheduled", chat="chat-3")
        await telegram.say("write me a long story", sender_name="Ada")

        async with console_page(pw, base_url, viewport) as page:
            await expect(page.get_by_role("heading", name="Operator console")).to_be_visible()
            await expect(page.locator('#channels li[data-channel="telegram"]')).to_contain_text("connected")

            running = page.locator('#turns li[data-state="running"]')
            await expect(running).to_contain_text("write me a long story")
            await expect(running).to_contain_text("Ada")
            letter = page.locator(f'#dead li[data-entry="{dead.id}"]')
            await expect(letter).to_contain_text("the model was down")
            planned = page.locator("#schedules li")
            await expect(planned).to_contain_text("water the plants")

            shot = tmp_path / f"admin-{viewport['width']}x{viewport['height']}.png"
            await page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 1000
            for control in (
                '#turns li[data-state="running"] button',
                "#schedules li button",
                f'#dead li[data-entry="{dead.id}"] button',
            ):
                box = await _box(page, control)
                assert _on_screen(box), (control, box)

            await running.get_by_role("button", name="Stop").focus()  # keyboard: Enter presses it
            # The lists are redrawn on every poll; the keyboard's focus stays on the same button.
            await page.evaluate(REDRAWN, "turns")
            assert (
                await page.evaluate("document.activeElement.getAttribute('aria-label')") == "Stop Ada's turn"
            )
            await page.keyboard.press("Enter")
            await telegram.wait_for_text(STOPPED_NOTE)
            await expect(page.locator("#no-turns")).to_be_visible()
            await expect(page.locator("#status")).to_contain_text("Stopping Ada")

            await planned.get_by_role("button", name="Cancel").click()
            await expect(page.locator("#no-schedules")).to_be_visible()

            await letter.get_by_role("button", name="Retry").click()
            await telegram.wait_for_text("echo: are you there?", chat="chat-2")
            await expect(page.locator("#no-dead")).to_be_visible()


async def test_a_non_admin_token_is_refused_by_the_console(tmp_path, llm):
    from playwright.async_api import async_playwright, expect

    settings = make_settings(tmp_path, llm, **jwt_overrides())
    app = create_app(settings, channels={"telegram": MemoryChannel("telegram")})

    async with (
        serving(app) as base_url,
        async_playwright() as pw,
        console_page(pw, base_url, PHONE) as page,
    ):
        await expect(page.locator("#signin")).to_be_visible()
        await page.get_by_label("Operator token").fill(token_for("alice"))
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.locator("#signin-error")).to_contain_text("alice is not an operator")
        await expect(page.locator("#app")).to_be_hidden()

        response = await page.request.get(
            f"{base_url}/admin", headers={"Authorization": f"Bearer {token_for('alice')}"}
        )
        assert response.status == 403


@pytest.mark.parametrize("decision", ["Approve", "Deny"])
async def test_an_operator_decides_a_waiting_command_from_the_console(tmp_path, llm, decision):
    from playwright.async_api import async_playwright, expect

    from tests.console.test_api import RISKY, RISKY_TURN

    llm.script(*RISKY_TURN)
    settings = make_settings(tmp_path, llm, sandbox={"mode": "host"})
    telegram = MemoryChannel("telegram")
    app = create_app(settings, channels={"telegram": telegram})

    async with serving(app) as base_url, async_playwright() as pw:
        await telegram.say("clean up the build", sender_name="Ada")
        await telegram.wait_for_text("Approval needed", timeout=30)
        async with console_page(pw, base_url, PHONE) as page:
            waiting = page.locator("#approvals li")
            await expect(waiting).to_have_count(1)
            await expect(waiting).to_contain_text(RISKY)
            button = waiting.get_by_role("button", name=decision)
            place = "first-child" if decision == "Approve" else "last-child"
            box = await _box(page, f"#approvals li .buttons button:{place}")
            assert _on_screen(box), box
            await button.click()
            said = "Approved" if decision == "Approve" else "Denied"
            await expect(page.locator("#status")).to_contain_text(said)
            await telegram.wait_for_text(f"{said} by default (console)")
            await telegram.wait_for_text("done with the build directory", timeout=30)
            await expect(page.locator("#no-approvals")).to_be_visible()
        [workspace] = Path(settings.data_dir).glob("users/*/threads/*/user-data/workspace")
        # Approved: the command ran and the directory is gone; denied: nothing was removed.
        assert (workspace / "build" / "out").exists() is (decision == "Deny")


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone-390x844", "desktop-1366x900"])
async def test_an_operator_retries_a_github_delivery_and_unlinks_a_connection(
    tmp_path,
    llm,
    github,  # noqa: F811
    viewport,
):
    from playwright.async_api import async_playwright, expect

    llm.script(Reply(text="counted", prompt_tokens=1234, completion_tokens=56))
    settings = console_settings(tmp_path, llm, github, jwt_auth=False, queue_size=1)
    app, telegram = console_app(settings)
    github.pause("create_comment")  # the first turn holds the only slot, so the second delivery fails

    async with (
        serving(app) as base_url,
        async_playwright() as pw,
        httpx.AsyncClient(base_url=base_url) as http,
    ):
        code = (await http.post("/api/channels/telegram/connect")).json()["code"]
        await telegram.say(f"/start {code}", sender="tg-default", sender_name="Grace")
        await app.state.service.manager.wait_idle()  # one message at a time: the inbox holds one
        await telegram.say("count the stars", sender="tg-default")
        await telegram.wait_for_text("counted")
        await app.state.service.manager.wait_idle()
        for number, delivery in ((1, "ok-1"), (2, "fail-1")):
            body, headers = signed_delivery(
                "issue_comment", comment_payload(f"@{BOT} #{number}", number=number), delivery
            )
            await http.post("/api/webhooks/github", content=body, headers=headers)
        github.resume("create_comment")
        await app.state.service.manager.wait_idle()

        async with console_page(pw, base_url, viewport) as page:
            failed = page.locator('#deliveries li[data-delivery="fail-1"]')
            await expect(failed).to_contain_text("issue_comment.created")
            await expect(failed).to_contain_text("failed")
            await expect(page.locator('#deliveries li[data-delivery="ok-1"] button')).to_have_count(0)
            await expect(page.locator('#usage li[data-owner="default"]')).to_contain_text(
                "1,234 tokens in / 56 out"
            )
            person = page.locator('#people li[data-person="default"]')
            await expect(person).to_contain_text("telegram · Grace")

            shot = tmp_path / f"admin-more-{viewport['width']}x{viewport['height']}.png"
            await page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 1000
            for control in (
                '#deliveries li[data-delivery="fail-1"] button',
                "#people li[data-connection] button",
            ):
                box = await _box(page, control)
                assert _on_screen(box), (control, box)

            await failed.get_by_role("button", name="Retry").focus()  # keyboard: Enter presses it
            await page.keyboard.press("Enter")
            await expect(page.locator("#status")).to_contain_text("Queued delivery fail-1")
            await github.wait_for(lambda: github.comments_on(REPO, 2) or None)
            await expect(failed).to_contain_text("done")
            await expect(failed.get_by_role("button")).to_have_count(0)

            await person.get_by_role("button", name="Unlink default's telegram account").click()
            await expect(page.locator("#status")).to_contain_text("Unlinked default's telegram account")
            await expect(person).to_contain_text("no connected account")
            assert (await http.get("/api/channels/connections")).json() == []
