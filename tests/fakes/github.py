"""A fake GitHub REST API for the App endpoints Switchboard uses, served on 127.0.0.1.

githubkit is pointed at it with ``api_base_url``. It verifies App JWTs (RS256) against the test's public
key, mints installation tokens with a configurable lifetime, and keeps every issue comment with its edit
history, so a test can assert what people on the issue saw. Every call is recorded (without secrets);
``fail_next`` injects failures and ``pause``/``resume`` hold a kind of call to create back-pressure.

Kinds: ``token`` (POST /app/installations/{id}/access_tokens), ``app`` (GET /app), ``create_comment``,
``edit_comment``, ``get_comment``, ``list_comments``.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jwt
from aiohttp import web

from tests.fakes.server import ThreadedServer


@dataclass
class FakeComment:
    id: int
    repo: str
    number: int
    user: str
    history: list[str] = field(default_factory=list)
    token: str = ""

    @property
    def body(self) -> str:
        return self.history[-1] if self.history else ""


@dataclass
class _Failure:
    kind: str
    status: int
    headers: dict[str, str]
    message: str
    times: int


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeGitHub(ThreadedServer):
    def __init__(
        self,
        *,
        app_id: str,
        public_key_pem: bytes | str,
        token_ttl: float = 3600.0,
        bot_login: str = "switchboard-bot[bot]",
    ) -> None:
        super().__init__()
        self.app_id = str(app_id)
        self.public_key = public_key_pem
        self.token_ttl = token_ttl
        self.bot_login = bot_login
        self.comments: dict[int, FakeComment] = {}
        self.tokens: dict[str, tuple[int, float]] = {}  # token -> (installation, expires_at)
        self.minted: list[dict[str, Any]] = []  # {installation, expires_at, claims}
        self._ids = itertools.count(1_000_001)
        self._failures: list[_Failure] = []
        self._paused: set[str] = set()
        self._state_lock = threading.Lock()

    # --- test API ----------------------------------------------------------------------------------
    def fail_next(
        self,
        kind: str,
        status: int = 500,
        *,
        headers: dict[str, str] | None = None,
        message: str = "fake failure",
        times: int = 1,
    ) -> None:
        with self._state_lock:
            self._failures.append(_Failure(kind, status, dict(headers or {}), message, times))

    def pause(self, kind: str) -> None:
        """Hold calls of ``kind`` (they wait) until :meth:`resume`."""
        with self._state_lock:
            self._paused.add(kind)

    def resume(self, kind: str) -> None:
        with self._state_lock:
            self._paused.discard(kind)

    def comments_on(self, repo: str, number: int) -> list[FakeComment]:
        with self._state_lock:
            return [c for c in self.comments.values() if c.repo == repo and c.number == number]

    def calls(self, kind: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if kind is None or r["kind"] == kind]

    async def wait_for(self, predicate: Any, timeout: float = 20.0) -> Any:
        """Poll ``predicate()`` until it returns something truthy; return that value."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s; calls: {self.summary()}")
            await asyncio.sleep(0.02)

    def summary(self) -> list[str]:
        return [f"{r['method']} {r['path']} -> {r['status']}" for r in self.calls()]

    # --- server ------------------------------------------------------------------------------------
    def setup_routes(self, app: web.Application) -> None:
        app.router.add_post("/app/installations/{installation}/access_tokens", self._token)
        app.router.add_get("/app", self._app)
        app.router.add_post("/repos/{owner}/{repo}/issues/{number}/comments", self._create_comment)
        app.router.add_get("/repos/{owner}/{repo}/issues/{number}/comments", self._list_comments)
        app.router.add_patch("/repos/{owner}/{repo}/issues/comments/{comment_id}", self._edit_comment)
        app.router.add_get("/repos/{owner}/{repo}/issues/comments/{comment_id}", self._get_comment)

    async def _gate(self, kind: str, request: web.Request, body: Any) -> web.Response | None:
        while kind in self._paused:
            await asyncio.sleep(0.01)
        with self._state_lock:
            failure = next((f for f in self._failures if f.kind == kind), None)
            if failure is not None:
                failure.times -= 1
                if failure.times <= 0:
                    self._failures.remove(failure)
        if failure is None:
            return None
        self._record(kind, request, body, failure.status)
        return web.json_response(
            {"message": failure.message, "documentation_url": "https://docs.github.com/rest"},
            status=failure.status,
            headers=failure.headers,
        )

    def _record(self, kind: str, request: web.Request, body: Any, status: int, **extra: Any) -> None:
        self.record(
            {
                "kind": kind,
                "method": request.method,
                "path": request.path,
                "body": body,
                "status": status,
                "accept": request.headers.get("Accept"),
                "user_agent": request.headers.get("User-Agent"),
                **extra,
            }
        )

    def _jwt_problem(self, request: web.Request) -> str | None:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return "A JSON web token could not be decoded"
        try:
            claims = jwt.decode(
                auth[7:],
                self.public_key,
                algorithms=["RS256"],
                options={"require": ["iat", "exp", "iss"]},
            )
        except jwt.PyJWTError as exc:
            return f"'Expiration time' claim ('exp') is invalid or JWT bad: {type(exc).__name__}"
        now = time.time()
        if str(claims["iss"]) != self.app_id:
            return "Integration not found"
        if claims["exp"] - now > 600 + 5 or claims["iat"] > now + 5:
            return "'Expiration time' claim ('exp') is too far in the future"
        return None

    def _token_owner(self, request: web.Request) -> str | None:
        auth = request.headers.get("Authorization", "")
        token = auth.split(" ", 1)[1] if " " in auth else ""
        entry = self.tokens.get(token)
        if auth.split(" ", 1)[0].lower() not in ("token", "bearer") or entry is None:
            return None
        return token if entry[1] > time.time() else None

    async def _token(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        if (failed := await self._gate("token", request, body)) is not None:
            return failed
        problem = self._jwt_problem(request)
        if problem:
            self._record("token", request, body, 401)
            return web.json_response({"message": problem}, status=401)
        installation = int(request.match_info["installation"])
        token = "ghs_" + secrets.token_urlsafe(27)
        expires_at = int(time.time() + self.token_ttl)
        with self._state_lock:
            self.tokens[token] = (installation, expires_at)
            self.minted.append({"installation": installation, "expires_at": expires_at})
        self._record("token", request, body, 201, installation=installation)
        return web.json_response(
            {
                "token": token,
                "expires_at": _iso(expires_at),
                "permissions": {"issues": "write", "pull_requests": "write", "metadata": "read"},
                "repository_selection": "all",
            },
            status=201,
        )

    async def _app(self, request: web.Request) -> web.Response:
        if (failed := await self._gate("app", request, None)) is not None:
            return failed
        problem = self._jwt_problem(request)
        self._record("app", request, None, 401 if problem else 200)
        if problem:
            return web.json_response({"message": problem}, status=401)
        slug = self.bot_login.removesuffix("[bot]")
        return web.json_response({"id": int(self.app_id), "slug": slug, "name": slug, "events": []})

    def _comment_json(self, request: web.Request, comment: FakeComment) -> dict[str, Any]:
        base = f"{self.url}/repos/{comment.repo}"
        now = _iso(time.time())
        return {
            "id": comment.id,
            "node_id": f"IC_{comment.id}",
            "url": f"{base}/issues/comments/{comment.id}",
            "html_url": f"https://github.com/{comment.repo}/issues/{comment.number}#issuecomment-{comment.id}",
            "issue_url": f"{base}/issues/{comment.number}",
            "body": comment.body,
            "user": {"login": comment.user, "id": 9_000_001, "type": "Bot", "node_id": "BOT_1"},
            "created_at": now,
            "updated_at": now,
            "author_association": "NONE",
        }

    async def _authorized(self, kind: str, request: web.Request, body: Any) -> web.Response | str:
        if (failed := await self._gate(kind, request, body)) is not None:
            return failed
        token = self._token_owner(request)
        if token is None:
            self._record(kind, request, body, 401)
            return web.json_response({"message": "Bad credentials"}, status=401)
        return token

    async def _create_comment(self, request: web.Request) -> web.Response:
        body = await request.json()
        auth = await self._authorized("create_comment", request, body)
        if isinstance(auth, web.Response):
            return auth
        repo = f"{request.match_info['owner']}/{request.match_info['repo']}"
        text = body.get("body") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text or len(text) > 65536:
            self._record("create_comment", request, body, 422)
            return web.json_response({"message": "Validation Failed"}, status=422)
        with self._state_lock:
            comment = FakeComment(next(self._ids), repo, int(request.match_info["number"]), self.bot_login)
            comment.history.append(text)
            comment.token = auth
            self.comments[comment.id] = comment
        self._record("create_comment", request, body, 201, comment_id=comment.id)
        return web.json_response(self._comment_json(request, comment), status=201)

    async def _edit_comment(self, request: web.Request) -> web.Response:
        body = await request.json()
        auth = await self._authorized("edit_comment", request, body)
        if isinstance(auth, web.Response):
            return auth
        comment = self.comments.get(int(request.match_info["comment_id"]))
        if comment is None:
            self._record("edit_comment", request, body, 404)
            return web.json_response({"message": "Not Found"}, status=404)
        text = body.get("body") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text or len(text) > 65536:
            self._record("edit_comment", request, body, 422)
            return web.json_response({"message": "Validation Failed"}, status=422)
        with self._state_lock:
            comment.history.append(text)
            comment.token = auth
        self._record("edit_comment", request, body, 200, comment_id=comment.id)
        return web.json_response(self._comment_json(request, comment))

    async def _get_comment(self, request: web.Request) -> web.Response:
        auth = await self._authorized("get_comment", request, None)
        if isinstance(auth, web.Response):
            return auth
        comment = self.comments.get(int(request.match_info["comment_id"]))
        self._record("get_comment", request, None, 200 if comment else 404)
        if comment is None:
            return web.json_response({"message": "Not Found"}, status=404)
        return web.json_response(self._comment_json(request, comment))

    async def _list_comments(self, request: web.Request) -> web.Response:
        auth = await self._authorized("list_comments", request, None)
        if isinstance(auth, web.Response):
            return auth
        repo = f"{request.match_info['owner']}/{request.match_info['repo']}"
        found = self.comments_on(repo, int(request.match_info["number"]))
        self._record("list_comments", request, None, 200)
        return web.json_response([self._comment_json(request, c) for c in found])
