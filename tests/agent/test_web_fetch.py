"""Issue 18 (web fetch): the agent reads a page as markdown; the SSRF guard refuses our own network."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from tests.agent.helpers import agent_settings, all_tool_results, everything_shown
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.server import ThreadedServer
from tests.harness import Harness

ARTICLE = """<html><head><title>Release notes</title></head><body>
<nav>Home | Blog | Login</nav>
<article><h1>Release 2.0</h1>
<p>Version 2 streams every answer natively on each platform, which teams asked for all year.</p>
<p>It also adds approvals for risky commands, so nobody runs rm -rf by accident from a chat.</p>
</article><footer>© Example Corp</footer></body></html>"""


class Site(ThreadedServer):
    """A small web site on loopback: an article, a redirect, a binary file and a big page."""

    def __init__(self, redirect_to: str = "") -> None:
        super().__init__()
        self.redirect_to = redirect_to

    def setup_routes(self, app: web.Application) -> None:
        async def article(request: web.Request) -> web.Response:
            self.record({"path": request.path, "host": request.headers.get("Host")})
            return web.Response(text=ARTICLE, content_type="text/html")

        async def moved(request: web.Request) -> web.Response:
            self.record({"path": request.path})
            raise web.HTTPFound(self.redirect_to)

        async def binary(request: web.Request) -> web.Response:
            return web.Response(body=b"\x89PNG....", content_type="image/png")

        async def big(request: web.Request) -> web.Response:
            return web.Response(text="word " * 400_000, content_type="text/plain")

        app.router.add_get("/article", article)
        app.router.add_get("/moved", moved)
        app.router.add_get("/logo.png", binary)
        app.router.add_get("/big.txt", big)


@pytest.fixture
def site() -> Iterator[Site]:
    server = Site().start()
    yield server  # type: ignore[misc]
    server.stop()


def fetch_settings(tmp_path: Any, llm: FakeOpenAI, **web: Any):  # type: ignore[no-untyped-def]
    return agent_settings(tmp_path, llm, web=web)


async def fetch(h: Harness, llm: FakeOpenAI, *urls: str) -> list[str]:
    llm.script(Reply(tool_calls=[ToolCall("web_fetch", {"url": url}) for url in urls]), Reply(text="Read."))
    await h.ask("read these")
    return all_tool_results(llm)[-len(urls) :]


async def test_a_page_comes_back_as_its_main_text_in_markdown(tmp_path, llm, site):
    settings = fetch_settings(tmp_path, llm, allow_hosts=["127.0.0.1"])
    async with Harness.running(settings) as h:
        [result] = await fetch(h, llm, f"{site.url}/article")
    assert result.startswith(f"{site.url}/article (text/html)")
    assert "# Release 2.0" in result
    assert "streams every answer natively" in result
    assert "Home | Blog | Login" not in result  # navigation is not the content
    shown = "\n".join(everything_shown(h.chat))
    assert "⏳ reading http://127.0.0.1" in shown


async def test_loopback_metadata_and_names_that_resolve_to_loopback_are_refused_by_default(
    tmp_path, llm, site
):
    async with Harness.running(fetch_settings(tmp_path, llm)) as h:
        results = await fetch(
            h,
            llm,
            f"{site.url}/article",
            "http://169.254.169.254/latest/meta-data/",
            f"http://localhost:{site.port}/article",
            f"http://[::1]:{site.port}/article",
            "http://10.0.0.1/",
        )
    assert results[0] == (
        "Error: 127.0.0.1 resolves to 127.0.0.1, a private, loopback or link-local address; "
        "fetching it is not allowed"
    )
    assert "169.254.169.254, a private, loopback or link-local address" in results[1]
    assert results[2].startswith("Error: localhost resolves to ")
    assert "::1, a private" in results[3]
    assert "10.0.0.1, a private" in results[4]
    assert site.requests == []  # nothing was even sent


async def test_a_redirect_into_the_private_network_is_refused(tmp_path, llm):
    target = Site().start()
    hop = Site(redirect_to=f"http://localhost:{target.port}/article").start()
    try:
        # Only 127.0.0.1 is allowed by name; the redirect points at "localhost", which is not.
        async with Harness.running(fetch_settings(tmp_path, llm, allow_hosts=["127.0.0.1"])) as h:
            [result] = await fetch(h, llm, f"{hop.url}/moved")
    finally:
        hop.stop()
        target.stop()
    assert result.startswith("Error: localhost resolves to ")
    assert [r["path"] for r in hop.requests] == ["/moved"]
    assert target.requests == []


async def test_other_schemes_binary_content_and_huge_pages_get_clear_results(tmp_path, llm, site):
    settings = fetch_settings(tmp_path, llm, allow_hosts=["127.0.0.1"], max_bytes=10_000)
    async with Harness.running(settings) as h:
        results = await fetch(h, llm, "file:///etc/passwd", f"{site.url}/logo.png", f"{site.url}/big.txt")
    assert results[0] == "Error: only http and https URLs can be fetched, not file: file:///etc/passwd"
    assert results[1] == f"Error: {site.url}/logo.png is image/png, not a page or text"
    assert results[2].endswith("… [page cut here]")
    assert len(results[2]) < 11_000


async def test_web_fetch_can_be_turned_off(tmp_path, llm):
    async with Harness.running(fetch_settings(tmp_path, llm, fetch=False)) as h:
        await h.ask("hello")
    offered = [t["function"]["name"] for t in llm.completions[0]["tools"]]
    assert "web_fetch" not in offered and "bash" in offered


class SearXNG(ThreadedServer):
    """SearXNG's JSON search API as its docs describe it: GET /search?q=…&format=json → results[]."""

    def setup_routes(self, app: web.Application) -> None:
        async def search(request: web.Request) -> web.Response:
            self.record({"q": request.query.get("q"), "format": request.query.get("format")})
            if request.query.get("format") != "json":
                return web.Response(status=403, text="format not allowed")  # SearXNG's default for non-html
            results = [
                {
                    "title": f"Result {n} for {request.query['q']}",
                    "url": f"https://example.org/{n}",
                    "content": f"snippet {n}",
                }
                for n in range(1, 13)
            ]
            return web.json_response({"query": request.query["q"], "results": results})

        app.router.add_get("/search", search)


async def test_web_search_is_off_by_default_and_uses_the_configured_searxng(tmp_path, llm):
    async with Harness.running(fetch_settings(tmp_path / "off", llm)) as h:
        await h.ask("hello")
    assert "web_search" not in [t["function"]["name"] for t in llm.completions[0]["tools"]]
    with SearXNG() as searx:
        settings = fetch_settings(tmp_path / "on", llm, search_url=searx.url, search_results=3)
        llm.script(
            Reply(tool_calls=[ToolCall("web_search", {"query": "bubblewrap sandbox"})]), Reply(text="Found.")
        )
        async with Harness.running(settings) as h:
            await h.ask("search for it")
    [result] = all_tool_results(llm)[-1:]
    assert result.startswith("1. Result 1 for bubblewrap sandbox\nhttps://example.org/1\nsnippet 1")
    assert "3. Result 3" in result and "4. Result 4" not in result
    assert searx.requests == [{"q": "bubblewrap sandbox", "format": "json"}]
