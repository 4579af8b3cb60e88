"""The /connect page in a real headless Chromium against the real app served by uvicorn.

A person creates a Telegram code and sees it with a countdown; the fake Telegram then delivers
``/start CODE`` from their account; the page (which polls) lists the connection; Disconnect removes it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.app import create_app
from channels.memory import MemoryChannel
from tests.conftest import make_settings
from tests.serving import serving

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]


async def test_a_person_connects_telegram_on_the_page_and_disconnects_it(tmp_path, llm):
    from playwright.async_api import async_playwright, expect

    settings = make_settings(tmp_path, llm, channels={"telegram": {"bot_username": "switchboard_bot"}})
    telegram = MemoryChannel("telegram")
    app = create_app(settings, channels={"telegram": telegram})

    async with serving(app) as base_url, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            await page.goto(f"{base_url}/connect")
            await expect(page.get_by_role("heading", name="Connect your chat accounts")).to_be_visible()

            telegram_row = page.locator('#providers li[data-provider="telegram"]')
            await expect(telegram_row).to_contain_text("not connected")
            await telegram_row.get_by_role("button", name="Get code").click()

            code_el = page.locator("#code")
            await expect(code_el).to_have_text(re.compile(r"^[A-Za-z0-9_-]{22,}$"))
            code = (await code_el.text_content() or "").strip()
            await expect(page.locator("#countdown")).to_have_text(re.compile(r"Expires in (10:00|9:\d\d)"))
            await expect(page.locator("#deeplink")).to_have_attribute(
                "href", f"https://t.me/switchboard_bot?start={code}"
            )
            await expect(page.locator("#instruction")).to_contain_text(f"/start {code}")
            await expect(page.locator("#copy")).to_be_visible()
            await expect(page.locator("#connections li")).to_have_count(0)

            # The person opens the deep link: Telegram sends /start CODE from their account.
            await telegram.say(f"/start {code}", sender="777001", sender_name="Ada Lovelace")
            await telegram.wait_for_text("Connected: this Telegram account now belongs to default.")

            connection = page.locator("#connections li")
            await expect(connection).to_have_count(1)  # appears through polling, no reload
            await expect(connection).to_contain_text("Ada Lovelace")
            await expect(page.locator("#status")).to_contain_text("Connected")
            await expect(page.locator("#code-panel")).to_be_hidden()
            await expect(telegram_row).to_contain_text("connected")

            await connection.get_by_role("button", name="Disconnect").click()
            await expect(page.locator("#connections li")).to_have_count(0)
            await expect(page.locator("#no-connections")).to_be_visible()
            await expect(telegram_row).to_contain_text("not connected")
        finally:
            await browser.close()


async def test_in_jwt_mode_the_page_asks_for_a_token_once_and_keeps_it_for_the_tab(tmp_path, llm):
    from playwright.async_api import async_playwright, expect

    from tests.connections.conftest import jwt_overrides, token_for

    settings = make_settings(tmp_path, llm, **jwt_overrides())
    app = create_app(settings, channels={"telegram": MemoryChannel("telegram")})

    async with serving(app) as base_url, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            await page.goto(f"{base_url}/connect")
            await expect(page.locator("#signin")).to_be_visible()

            await page.get_by_label("Access token").fill("not-a-token")
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.locator("#signin-error")).to_contain_text("malformed")

            await page.get_by_label("Access token").fill(token_for("alice"))
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.locator('#providers li[data-provider="telegram"]')).to_be_visible()
            await expect(page.locator("#signin")).to_be_hidden()

            await page.reload()
            await expect(page.locator('#providers li[data-provider="telegram"]')).to_be_visible()
            await expect(page.locator("#signin")).to_be_hidden()
        finally:
            await browser.close()


PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1366, "height": 900}


async def _in_view(page, selector: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The element's box in viewport coordinates, and the viewport itself."""
    return await page.evaluate(  # type: ignore[no-any-return]
        """(sel) => {
            const r = document.querySelector(sel).getBoundingClientRect();
            return {top: r.top, bottom: r.bottom, left: r.left, right: r.right,
                    width: window.innerWidth, height: window.innerHeight,
                    scrollWidth: document.documentElement.scrollWidth};
        }""",
        selector,
    )


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone-390x844", "desktop-1366x900"])
async def test_the_code_is_on_screen_with_instructions_true_for_each_platform(tmp_path, llm, viewport):
    from playwright.async_api import async_playwright, expect

    # Every chat platform runs here, so the list is as long as it gets (the code panel starts below a
    # phone's fold); Telegram's username is only what the running channel learnt (getMe), not configured.
    # GitHub (connected per repository by an operator) is never offered to a person.
    live = {name: MemoryChannel(name) for name in ("slack", "discord", "feishu", "dingtalk")}
    live["telegram"] = MemoryChannel("telegram", handle="switchboard_bot")
    settings = make_settings(tmp_path, llm)
    app = create_app(settings, channels=live)

    async with serving(app) as base_url, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport=viewport)
            page.set_default_timeout(TIMEOUT_MS)
            await page.goto(f"{base_url}/connect")
            rows = page.locator("#providers li")
            await expect(rows).to_have_count(5)
            await expect(page.locator('#providers li[data-provider="github"]')).to_have_count(0)
            assert "channels." not in (await page.locator("body").inner_text())  # no operator instructions

            await (
                page.locator('#providers li[data-provider="dingtalk"]')
                .get_by_role("button", name="Get code")
                .click()
            )
            await expect(page.locator("#code")).to_have_text(re.compile(r"^[A-Za-z0-9_-]{22,}$"))
            box = await _in_view(page, "#code")
            assert box["top"] >= 0 and box["bottom"] <= box["height"], (
                box
            )  # the code is on screen, no scrolling
            assert box["scrollWidth"] <= box["width"], box  # nothing runs off the side
            await expect(page.locator("#code-panel")).to_be_focused()

            await (
                page.locator('#providers li[data-provider="slack"]')
                .get_by_role("button", name="Get code")
                .click()
            )
            await expect(page.locator("#instruction")).to_contain_text("In Slack")  # the new code has arrived
            code = (await page.locator("#code").text_content() or "").strip()
            await expect(page.locator("#instruction")).to_contain_text(f"/switchboard connect {code}")
            await expect(page.locator("#deeplink")).to_be_hidden()

            await (
                page.locator('#providers li[data-provider="telegram"]')
                .get_by_role("button", name="Get code")
                .click()
            )
            await expect(page.locator("#instruction")).to_contain_text("in Telegram")
            code = (await page.locator("#code").text_content() or "").strip()
            await expect(page.locator("#deeplink")).to_have_attribute(
                "href", f"https://t.me/switchboard_bot?start={code}"
            )
            link = await _in_view(page, "#deeplink")
            assert link["top"] >= 0 and link["bottom"] <= link["height"], link
            shot = tmp_path / f"connect-{viewport['width']}x{viewport['height']}.png"
            await page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 1000
        finally:
            await browser.close()


async def test_a_server_with_no_connectable_platform_says_so_in_words_a_person_understands(tmp_path, llm):
    from playwright.async_api import async_playwright, expect

    settings = make_settings(tmp_path, llm)
    app = create_app(settings, channels={})

    async with serving(app) as base_url, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport=PHONE)
            page.set_default_timeout(TIMEOUT_MS)
            await page.goto(f"{base_url}/connect")
            await expect(page.locator("#no-providers")).to_be_visible()
            await expect(page.locator("#providers li")).to_have_count(0)
            assert "enabled: true" not in (await page.locator("body").inner_text())
        finally:
            await browser.close()
