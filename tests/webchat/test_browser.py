"""The web chat in a real headless Chromium against the real app served by uvicorn.

A person signs in, sees an answer stream in, reloads mid-answer and sees it continue, stops it, and finds
the conversation in the list, at a phone's and a desktop's size with everything the flow needs on screen;
another person uploads a file and downloads the one the agent made from it.
"""

from __future__ import annotations

import re

import pytest

from bot.app import create_app
from bot.manager import STOPPED_NOTE
from tests.conftest import make_settings
from tests.connections.conftest import jwt_overrides, token_for
from tests.connections.test_browser import CHROMIUM, CHROMIUM_ARGS, DESKTOP, PHONE, TIMEOUT_MS
from tests.fakes.openai_server import Reply, ToolCall
from tests.serving import serving
from tests.webchat.conftest import web_channel

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

LIVE = 'li.msg.assistant[data-live="true"]'


async def on_screen(page, selector: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The element's box and the viewport, without scrolling: what the person sees as the page opens."""
    box: dict[str, float] = await page.evaluate(
        """(sel) => {
            const r = document.querySelector(sel).getBoundingClientRect();
            return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, w: r.width, h: r.height,
                    width: window.innerWidth, height: window.innerHeight,
                    scrollWidth: document.documentElement.scrollWidth};
        }""",
        selector,
    )
    visible = (
        box["w"] > 0
        and box["h"] > 0
        and box["left"] >= 0
        and box["top"] >= 0
        and box["right"] <= box["width"]
        and box["bottom"] <= box["height"]
        and box["scrollWidth"] <= box["width"]
    )
    assert visible, (selector, box)
    return box


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone-390x844", "desktop-1366x900"])
async def test_a_person_signs_in_watches_an_answer_stream_reloads_and_stops_it(tmp_path, llm, viewport):
    from playwright.async_api import async_playwright, expect

    llm.script(Reply(text=" ".join(f"word{i}" for i in range(600)), chunk_size=4, delay=0.05))
    settings = make_settings(tmp_path, llm, channels=web_channel(), **jwt_overrides())
    app = create_app(settings)

    async with serving(app) as base_url, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport=viewport)
            page.set_default_timeout(TIMEOUT_MS)
            await page.goto(f"{base_url}/chat")
            await expect(page.locator("#signin")).to_be_visible()
            await expect(page.locator("#app")).to_be_hidden()
            token = page.get_by_label("Access token")
            await token.fill(token_for("ada") + "x")  # not a valid sign-in: the server says why
            await token.press("Enter")
            await expect(page.locator("#signin-error")).to_contain_text("signature")
            await expect(page.locator("#app")).to_be_hidden()
            await token.fill(token_for("ada"))
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.locator("#app")).to_be_visible()
            assert await token.input_value() == ""  # the token is not left on the page
            assert token_for("ada").split(".")[2] not in await page.content()

            message = page.get_by_label("Message", exact=True)
            await expect(message).to_be_focused()
            await message.fill("write me a long story")
            await message.press("Enter")
            await expect(page.locator("li.msg.user")).to_have_text("write me a long story")
            live = page.locator(LIVE)
            await expect(live).to_contain_text("word3")  # partial text, while the answer is written
            await expect(live).not_to_contain_text("word599")
            await expect(page.locator("#stop")).to_be_enabled()

            shot = tmp_path / f"chat-{viewport['width']}x{viewport['height']}.png"
            await page.screenshot(path=str(shot))
            assert shot.stat().st_size > 1000
            for control in (
                "#message-input",
                "#send",
                "#stop",
                ".file-label",
                "#new-chat" if viewport is DESKTOP else "#toggle-list",
            ):
                await on_screen(page, control)

            # A reload in the middle of the answer: the conversation is back and the answer goes on.
            await page.reload()
            await expect(page.locator("li.msg.user")).to_have_text("write me a long story")
            shown = await live.inner_text()
            seen = max(int(n) for n in re.findall(r"word(\d+)", shown))
            later = f"word{seen + 10}"
            await expect(live).to_contain_text(later)

            await page.locator("#stop").focus()  # keyboard: Enter presses it
            await page.keyboard.press("Enter")
            answer = page.locator("li.msg.assistant").last
            await expect(answer).to_contain_text(STOPPED_NOTE)
            await expect(page.locator(LIVE)).to_have_count(0)
            await expect(page.locator("#stop")).to_be_disabled()
            await expect(page.locator("#status")).to_have_text("Stopped.")
            assert "word599" not in await answer.inner_text()

            if viewport is PHONE:  # the list is one button away, and then on screen
                await page.get_by_role("button", name="Conversations").click()
            item = page.locator("#conversations li button")
            await expect(item).to_have_text("write me a long story")
            await expect(item).to_have_attribute("aria-current", "true")
            await on_screen(page, "#conversations li button")
            await on_screen(page, "#new-chat")
            await page.screenshot(path=str(tmp_path / f"list-{viewport['width']}x{viewport['height']}.png"))
        finally:
            await browser.close()


async def test_a_person_uploads_a_file_and_downloads_the_one_the_agent_made(tmp_path, llm):
    from playwright.async_api import async_playwright, expect

    llm.script(
        Reply(
            tool_calls=[
                ToolCall(
                    "bash",
                    {
                        "command": "tr a-z A-Z < /mnt/user-data/uploads/notes.txt > /mnt/user-data/outputs/LOUD.txt"
                    },
                )
            ]
        ),
        Reply(tool_calls=[ToolCall("present_files", {"paths": ["/mnt/user-data/outputs/LOUD.txt"]})]),
        Reply(text="Here it is, louder."),
    )
    settings = make_settings(tmp_path, llm, channels=web_channel(), sandbox={"mode": "host"})
    app = create_app(settings)

    async with serving(app) as base_url, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport=DESKTOP, accept_downloads=True)
            page.set_default_timeout(TIMEOUT_MS)
            await page.goto(f"{base_url}/chat")  # auth.mode none: the one local person, no sign-in
            await expect(page.locator("#app")).to_be_visible()
            await page.get_by_label("Attach files").set_input_files(
                files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hello web chat\n"}]
            )
            await expect(page.locator("#attached")).to_contain_text("notes.txt")
            await page.get_by_label("Message", exact=True).fill("make this louder")
            await page.get_by_role("button", name="Send").click()
            await expect(page.locator("li.msg.user")).to_contain_text("notes.txt")
            await expect(
                page.locator("li.msg.assistant").filter(has_text="Here it is, louder.")
            ).to_be_visible()
            button = page.get_by_role("button", name="Download LOUD.txt")
            async with page.expect_download() as info:
                await button.click()
            download = await info.value
            assert download.suggested_filename == "LOUD.txt"
            assert (await download.path()).read_bytes() == b"HELLO WEB CHAT\n"
        finally:
            await browser.close()
