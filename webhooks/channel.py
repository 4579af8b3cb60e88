"""GitHub as a :class:`channels.base.Channel`: inbound arrives over HTTP, replies are issue comments.

``start`` only stores the sink — the webhook route (``webhooks.route``) feeds it. A reply is one comment:
"working on it…" first, then edited in place as the agent streams (edits do not notify watchers, so a
long answer costs people one notification), with the final text last. Edits are paced per issue/PR by the
shared :class:`~channels.reply.ReplyStream` at ``edit_interval_seconds``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

from channels.base import Channel, InboundSink
from channels.errors import Forbidden
from channels.reply import ReplyTransport
from channels.types import Action, InboundMessage, ReplyLimits
from config.channels.github import GitHubAgent, GitHubConfig
from webhooks.errors import map_github_error
from webhooks.tokens import (
    RUN_MIN_VALIDITY,
    SharedTransport,
    TokenProvider,
    github_client,
    load_private_key,
)

log = logging.getLogger(__name__)

COMMENT_LIMIT = 65536  # GitHub's maximum comment body, in characters
WORKING_TEXT = "⏳ Working on it…"
DEFAULT_SYSTEM_PROMPT = (
    "You are {name}, an assistant that works on GitHub issues and pull requests in {repo}. "
    "Your answer is posted as a comment on {where}: write GitHub-flavoured Markdown, be concrete, "
    "and keep it focused on what was asked."
)


class GitHubTransport(ReplyTransport):
    """Creates and edits one issue comment. ``ref`` is the comment id."""

    def __init__(self, channel: GitHubChannel, message: InboundMessage) -> None:
        self.channel = channel
        context = message.context
        self.repo: str = context["repo"]
        self.number: int = int(context["number"])
        self.installation_id: int | None = context.get("installation_id")

    @staticmethod
    def _render(text: str) -> str:
        # The manager's generic placeholder becomes words people understand on GitHub.
        return WORKING_TEXT if text.strip() in ("", "…") else text

    async def _headers(self) -> dict[str, str]:
        tokens = self.channel.tokens
        if tokens is None:
            raise Forbidden("GitHub App credentials (app_id, private_key_path) are not configured")
        if self.installation_id is None:
            raise Forbidden(f"no installation id for {self.repo}: install the App or set installation_id")
        return {"Authorization": f"token {await tokens.token(self.installation_id)}"}

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        owner, name = self.repo.split("/", 1)
        headers = await self._headers()
        try:
            response = await self.channel.github.rest.issues.async_create_comment(
                owner, name, self.number, body=self._render(text), headers=headers
            )
            return str(response.json()["id"])
        except Exception as exc:
            self._forget_token_on_401(exc)
            raise map_github_error(exc) from None

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        owner, name = self.repo.split("/", 1)
        headers = await self._headers()
        try:
            await self.channel.github.rest.issues.async_update_comment(
                owner, name, int(ref), body=self._render(text), headers=headers
            )
        except Exception as exc:
            self._forget_token_on_401(exc)
            raise map_github_error(exc, editing=True) from None

    def _forget_token_on_401(self, exc: BaseException) -> None:
        """A revoked token (App re-installed, key rotated) must not be reused until it expires."""
        response = getattr(exc, "response", None)
        tokens = self.channel.tokens
        if getattr(response, "status_code", None) == 401 and tokens is not None and self.installation_id:
            tokens.forget(self.installation_id)


class GitHubChannel(Channel):
    provider: ClassVar[str] = "github"
    limits: ClassVar[ReplyLimits] = ReplyLimits(text_limit=COMMENT_LIMIT, min_edit_interval=2.0)

    def __init__(self, config: GitHubConfig, *, settings: Any = None) -> None:
        self.config = config
        self.settings = settings
        self.limits = ReplyLimits(  # type: ignore[misc]
            text_limit=COMMENT_LIMIT, min_edit_interval=config.edit_interval_seconds
        )
        super().__init__()
        self.admins = frozenset(config.admins)
        self._transport = SharedTransport()
        self.github = github_client(config.api_base_url, self._transport)
        self.tokens: TokenProvider | None = None
        if config.app_id and (config.private_key or config.private_key_path):
            key = config.private_key or load_private_key(config.private_key_path or "")
            self.tokens = TokenProvider(config.app_id, key, self.github)
        self._agents = {agent.name: agent for agent in config.agents}

    @property
    def sink(self) -> InboundSink | None:
        """The bus publish function, once started (the webhook route hands messages to it)."""
        return self._sink

    def agent(self, name: str | None) -> GitHubAgent | None:
        return self._agents.get(name or "")

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        if self.tokens is None:
            self.status.set("connected", "webhooks only: no App credentials, replies are disabled")
        else:
            self.status.set("connected", "receiving webhooks")

    async def stop(self) -> None:
        # Only stop taking deliveries: turns still draining must be able to post their replies.
        self._sink = None
        self.status.set("stopped")

    async def close(self) -> None:
        """Release the connection pool, after the manager has drained (called by the feature's stop)."""
        await self._transport.shutdown()

    def reply_transport(self, message: InboundMessage) -> ReplyTransport:
        return GitHubTransport(self, message)

    def is_admin(self, message: InboundMessage) -> bool:
        """The channel's ``admins`` (numeric user ids) or the agent's ``admins`` (logins): the intake
        decided it from the event (``trust``), for the agent the message is addressed to."""
        return message.trust == "admin" or super().is_admin(message)

    def is_approver(self, message: InboundMessage) -> bool:
        """On GitHub the people who may decide an approval are the repository's collaborators (OWNER,
        MEMBER, COLLABORATOR: ``member`` at the edge) and the admins; never a guest."""
        return message.trust in ("admin", "member")

    def system_prompt(self, message: InboundMessage) -> str | None:
        agent = self.agent(message.topic)
        if agent is None:
            return None
        repo = message.context.get("repo", message.workspace)
        if agent.system_prompt:
            return agent.system_prompt
        noun = "pull request" if message.context.get("kind") == "pull_request" else "issue"
        return DEFAULT_SYSTEM_PROMPT.format(name=agent.name, repo=repo, where=f"{noun} {repo}#{message.chat}")

    async def run_secrets(self, message: InboundMessage) -> dict[str, str]:
        """``GH_TOKEN`` for this run only, valid long enough for the run's ``gh``/``git`` commands; none for
        a guest's run (the runtime withholds secrets from its profile too: two locks, not one)."""
        installation_id = message.context.get("installation_id")
        if self.tokens is None or installation_id is None or message.trust == "guest":
            return {}  # a guest's run never gets the repository's token (docs/security.md)
        try:
            token = await self.tokens.token(int(installation_id), min_validity=RUN_MIN_VALIDITY)
        except Exception as exc:
            log.warning("no GH_TOKEN for this run: %s", map_github_error(exc))
            return {}
        return {"GH_TOKEN": token}

    async def check(self) -> str | None:
        """For ``switchboard doctor``: can we sign in as the App?"""
        if self.tokens is None:
            return "no GitHub App credentials (app_id, private_key_path): replies are disabled"
        try:
            await self.github.rest.apps.async_get_authenticated(
                headers={"Authorization": f"Bearer {self.tokens.app_jwt()}"}
            )
        except Exception as exc:
            return f"GitHub App sign-in failed: {map_github_error(exc)}"
        return None
