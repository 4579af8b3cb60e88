"""``web_fetch``: read a web page as markdown, without letting the agent reach inside our network.

The fetch runs in the service process, so it could reach what the sandbox cannot: the service's own
HTTP port, a database on localhost, a cloud metadata endpoint. The guard (:func:`check_address`) refuses
every address that is not globally routable — loopback, private ranges, link-local (169.254.169.254),
carrier-grade NAT, multicast, reserved, and IPv6 forms of those (:mod:`agent.netguard`, the same rule the
sandbox's egress proxy applies) — unless ``web.allow_private`` is on or the host is listed in
``web.allow_hosts``. It is applied to the *resolved* addresses (a public-looking name that resolves to
127.0.0.1 is refused) and again on every redirect, and the connection is made to the address that was
checked (pinned, with the original name for ``Host`` and TLS), so DNS cannot answer differently between
the check and the connect.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from agent.netguard import refused_range
from config.schema import WebConfig

MAX_REDIRECTS = 5
TEXT_TYPES = ("text/plain", "text/markdown", "application/json", "text/csv", "application/xml", "text/xml")


class FetchRefused(Exception):
    """The URL may not be fetched, or the fetch failed; the message is the tool result, in plain words."""


@dataclass(frozen=True, slots=True)
class Page:
    url: str
    content_type: str
    text: str
    truncated: bool


def check_address(address: str, host: str, config: WebConfig) -> None:
    """Refuse an address that is not public, unless the operator allowed private ones or this host."""
    ip = ipaddress.ip_address(address)
    if refused_range(ip) is None:
        return
    if config.allow_private or host.lower() in {h.lower() for h in config.allow_hosts}:
        return
    raise FetchRefused(
        f"{host} resolves to {ip}, a private, loopback or link-local address; fetching it is not allowed"
    )


async def resolve(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FetchRefused(f"cannot resolve {host}: {exc.strerror or exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _target(url: str) -> tuple[str, int]:
    """Host and port of an http(s) URL; anything else is refused in plain words."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise FetchRefused(f"only http and https URLs can be fetched, not {parts.scheme or 'this'}: {url}")
    if not parts.hostname:
        raise FetchRefused(f"no host in {url}")
    if parts.username or parts.password:
        raise FetchRefused("URLs with a user name or password are not fetched")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname, port


def _pinned(url: str, address: str) -> str:
    """``url`` with its host replaced by the checked ``address`` (bracketed for IPv6)."""
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


def readable(body: str, content_type: str, url: str) -> str:
    """Markdown of an HTML page's main content (trafilatura), or the text itself for text types."""
    if "html" not in content_type:
        return body
    import trafilatura  # imported on first use: it pulls in lxml

    extracted = trafilatura.extract(body, output_format="markdown", include_links=True, url=url)
    if extracted:
        return str(extracted)
    # No main content found (a tiny or unusual page): fall back to the page's plain text.
    fallback = trafilatura.html2txt(body)
    return str(fallback or "")


@dataclass(frozen=True, slots=True)
class SearchResult:
    title: str
    url: str
    snippet: str


class WebSearcher:
    """``web_search`` through the operator's SearXNG instance (its JSON API, ``format=json``).

    The instance is the operator's choice — often on the local network — so it is not put behind the
    SSRF guard; the result URLs it returns are only text until ``web_fetch`` (guarded) opens one.
    """

    def __init__(self, config: WebConfig) -> None:
        assert config.search_url is not None
        self.config = config
        self.endpoint = config.search_url.rstrip("/") + "/search"

    async def search(self, query: str) -> list[SearchResult]:
        params = {"q": query, "format": "json"}
        headers = {"User-Agent": self.config.user_agent, "Accept": "application/json"}
        try:
            async with httpx.AsyncClient(timeout=self.config.timeout_seconds, trust_env=False) as client:
                response = await client.get(self.endpoint, params=params, headers=headers)
        except httpx.HTTPError as exc:
            raise FetchRefused(f"the search service did not answer ({type(exc).__name__})") from None
        if response.status_code != 200:
            raise FetchRefused(f"the search service answered HTTP {response.status_code}")
        try:
            results = response.json().get("results", [])
        except ValueError:
            raise FetchRefused(
                "the search service did not answer with JSON (is format=json enabled?)"
            ) from None
        found = []
        for item in results[: self.config.search_results]:
            if isinstance(item, dict) and item.get("url"):
                found.append(
                    SearchResult(
                        title=" ".join(str(item.get("title") or "").split())[:200],
                        url=str(item["url"]),
                        snippet=" ".join(str(item.get("content") or "").split())[:400],
                    )
                )
        return found


class WebFetcher:
    """Fetches pages for the ``web_fetch`` tool under the SSRF guard, the size bound and the timeout."""

    def __init__(self, config: WebConfig) -> None:
        self.config = config

    async def fetch(self, url: str) -> Page:
        try:
            return await asyncio.wait_for(self._fetch(url.strip()), self.config.timeout_seconds)
        except TimeoutError:
            raise FetchRefused(f"{url} did not answer within {self.config.timeout_seconds:g} s") from None

    async def _fetch(self, url: str) -> Page:
        async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:
            for _ in range(MAX_REDIRECTS + 1):
                host, port = _target(url)
                addresses = await resolve(host, port)
                for address in addresses:  # every address the name has must pass, not just the first
                    check_address(address, host, self.config)
                response = await self._get(client, url, host, addresses[0])
                if response.is_redirect:
                    location = response.headers.get("location", "")
                    await response.aclose()
                    if not location:
                        raise FetchRefused(f"{url} redirected without saying where")
                    url = urljoin(url, location)
                    continue
                return await self._read(response, url)
        raise FetchRefused(f"more than {MAX_REDIRECTS} redirects; stopped at {url}")

    async def _get(self, client: httpx.AsyncClient, url: str, host: str, address: str) -> httpx.Response:
        parts = urlsplit(url)
        host_header = host if not parts.port else f"{host}:{parts.port}"
        request = client.build_request(
            "GET",
            _pinned(url, address),
            headers={"Host": host_header, "User-Agent": self.config.user_agent, "Accept": "text/html,*/*"},
            extensions={"sni_hostname": host},
        )
        try:
            return await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise FetchRefused(f"fetching {url} failed: {type(exc).__name__}") from None

    async def _read(self, response: httpx.Response, url: str) -> Page:
        try:
            if response.status_code >= 400:
                raise FetchRefused(f"{url} answered HTTP {response.status_code}")
            content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if "html" not in content_type and not content_type.startswith(TEXT_TYPES):
                raise FetchRefused(f"{url} is {content_type or 'of an unknown type'}, not a page or text")
            chunks: list[bytes] = []
            size = 0
            truncated = False
            async for chunk in response.aiter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size >= self.config.max_bytes:
                    truncated = True
                    break
        finally:
            await response.aclose()
        body = b"".join(chunks)[: self.config.max_bytes].decode(
            response.encoding or "utf-8", errors="replace"
        )
        text = await asyncio.to_thread(readable, body, content_type, url)
        return Page(url=url, content_type=content_type, text=text, truncated=truncated)
