"""GitHub settings: the webhook secret, the App credentials, and which agents answer on which repos.

Each agent is one GitHub App identity (``bot_login``) bound to repositories, with per-event triggers.
Omitted triggers fall back to the defaults in :mod:`webhooks.triggers` (documented in docs/github.md).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from config.base import ChannelSection, Section, from_env

#: Event kinds an agent can be triggered by; anything else in ``triggers`` is a typo worth failing on.
TRIGGER_EVENTS = frozenset(
    {"issues", "issue_comment", "pull_request", "pull_request_review", "pull_request_review_comment"}
)
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
#: A user login (letters, digits, hyphens) or an App's bot login (``name[bot]``).
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$")


class GitHubTrigger(Section):
    """When one event kind fires an agent. ``None`` fields fall back to the event's default."""

    actions: list[str] | None = None
    require_mention: bool | None = None
    mention_login: str | None = None
    allow_authors: list[str] | None = None


class GitHubBinding(Section):
    repo: str
    triggers: dict[str, GitHubTrigger] | None = None

    @field_validator("repo")
    @classmethod
    def _repo_shape(cls, value: str) -> str:
        if not _REPO.match(value):
            raise ValueError(f"repo must look like owner/name, got {value!r}")
        return value

    @field_validator("triggers")
    @classmethod
    def _known_events(cls, value: dict[str, GitHubTrigger] | None) -> dict[str, GitHubTrigger] | None:
        unknown = sorted(set(value or {}) - TRIGGER_EVENTS)
        if unknown:
            raise ValueError(
                f"unknown trigger event(s) {', '.join(unknown)}; use {', '.join(sorted(TRIGGER_EVENTS))}"
            )
        return value


class GitHubAgent(Section):
    name: str = Field(min_length=1, max_length=100)
    bot_login: str = Field(min_length=1)
    installation_id: int | None = None
    system_prompt: str | None = None
    model: str | None = None
    #: A named agent (``agents[].name``) that answers for this App: its prompt, model, tools and policies
    #: (docs/agents.md); ``system_prompt`` and ``model`` here still win when set.
    agent: str | None = None
    #: Whose space (files, memory) the agent works in; default ``github:<name>``.
    owner: str | None = None
    bindings: list[GitHubBinding] = Field(default_factory=list)
    #: GitHub logins (case-insensitive) who are this agent's admins: they may approve any of its commands.
    admins: list[str] = Field(default_factory=list)
    #: Logins trusted as members whatever their ``author_association`` (a CI bot, a known outside contributor).
    members: list[str] = Field(default_factory=list)
    #: What an author who is not the repository's OWNER/MEMBER/COLLABORATOR gets: ``ignore`` (no run; the
    #: delivery log says why) or ``chat_only`` (an answer, with no shell, no file writes and no GH_TOKEN).
    guests: Literal["ignore", "chat_only"] = "ignore"

    @field_validator("admins", "members")
    @classmethod
    def _logins(cls, value: list[str]) -> list[str]:
        bad = [login for login in value if not _LOGIN.match(login)]
        if bad:
            raise ValueError(f"not GitHub logins: {', '.join(map(repr, bad))} (write them without the @)")
        return value

    @property
    def owner_id(self) -> str:
        return self.owner or f"github:{self.name}"


class GitHubConfig(ChannelSection):
    webhook_secret: str | None = from_env("GITHUB_WEBHOOK_SECRET")
    app_id: str | None = from_env("GITHUB_APP_ID")
    #: The App's PEM key: as text (``private_key``, e.g. from ``private_key_file``) or as a path.
    private_key: str | None = from_env("GITHUB_APP_PRIVATE_KEY")
    private_key_path: str | None = from_env("GITHUB_APP_PRIVATE_KEY_PATH")
    api_base_url: str = "https://api.github.com"
    allow_unsigned_webhooks: bool = False
    max_body_bytes: int = Field(25 * 1024 * 1024, gt=0)
    #: Spacing of comment edits per issue/PR (GitHub's secondary limits punish bursts of edits).
    edit_interval_seconds: float = Field(2.0, ge=0)
    #: How often the service looks for deliveries queued by ``switchboard webhooks retry``.
    retry_poll_seconds: float = Field(2.0, gt=0)
    agents: list[GitHubAgent] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> GitHubConfig:
        if self.private_key and self.private_key_path:
            raise ValueError("set either private_key (the PEM text) or private_key_path, not both")
        if bool(self.app_id) != bool(self.private_key or self.private_key_path):
            raise ValueError(
                "app_id and private_key (or private_key_path) must be set together (the GitHub App credentials)"
            )
        if self.private_key and "PRIVATE KEY" not in self.private_key:
            raise ValueError(
                "private_key does not look like a PEM private key (-----BEGIN … PRIVATE KEY-----)"
            )
        names = [a.name for a in self.agents]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"GitHub agent names must be unique; repeated: {', '.join(dupes)}")
        return self

    def required_secrets(self) -> dict[str, str | None]:
        if self.allow_unsigned_webhooks:
            return {}
        return {"webhook_secret": self.webhook_secret}
