"""Which configured agents a GitHub event fires, and why the others did not.

Defaults (used when a binding has no ``triggers``; a listed event falls back to these per field):

    issues                       opened                no mention needed
    issue_comment                created               mention required
    pull_request                 opened                no mention needed (synchronize only if configured)
    pull_request_review          submitted             mention required
    pull_request_review_comment  created               mention required

An agent never fires on its own events (sender ``bot_login`` or ``bot_login[bot]``), so its comments
cannot start a loop; other bots do fire it unless ``allow_authors`` leaves them out (whether their
event then runs is their trust level's question: webhooks/trust.py).

A comment that decides an approval request (``/approve ID``, ``/deny ID``, or either after a mention of
the agent) fires it without the mention: it is answered as that command, never as a turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from config.channels.github import GitHubAgent, GitHubBinding, GitHubTrigger
from webhooks.events import GitHubEvent


@dataclass(frozen=True, slots=True)
class EffectiveTrigger:
    actions: tuple[str, ...]
    require_mention: bool
    mention_login: str
    allow_authors: frozenset[str] | None


DEFAULT_TRIGGERS: dict[str, tuple[tuple[str, ...], bool]] = {
    "issues": (("opened",), False),
    "issue_comment": (("created",), True),
    "pull_request": (("opened",), False),
    "pull_request_review": (("submitted",), True),
    "pull_request_review_comment": (("created",), True),
}

#: Events whose text is a comment someone wrote in the conversation (where a decision is typed).
COMMENT_EVENTS = frozenset({"issue_comment", "pull_request_review_comment"})
_DECISION = re.compile(
    r"\A\s*(?:@(?P<login>[A-Za-z0-9][A-Za-z0-9-]*(?:\[bot\])?)[\s,:]+)?/(?P<verb>approve|deny)(?P<rest>\s.*)?\Z",
    re.DOTALL | re.IGNORECASE,
)
_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]*`", re.DOTALL)


@lru_cache(maxsize=256)
def _mention_pattern(login: str) -> re.Pattern[str]:
    # Whole logins only: not preceded by a word char/@/./- (so not an e-mail address), not followed by
    # a login character or a ".word" (so not @login-extra, not @login.com).
    return re.compile(rf"(?<![\w@./-])@{re.escape(login)}(?![\w-]|\.\w)", re.IGNORECASE)


def mentions(text: str, login: str) -> bool:
    """True when ``text`` @-mentions ``login`` outside code (GitHub does not notify for code spans)."""
    if "@" not in text:  # most comments mention nobody: skip the code-stripping pass
        return False
    login = login.removesuffix("[bot]")
    return bool(_mention_pattern(login).search(_CODE.sub(" ", text)))


def decision_command(event: GitHubEvent, logins: tuple[str, ...]) -> str | None:
    """``/approve ID …`` or ``/deny ID …`` when the comment is one (bare, or after an @-mention of one of
    ``logins``), as the chat command it stands for; None for any other text."""
    if event.name not in COMMENT_EVENTS or "/" not in event.text:
        return None
    match = _DECISION.match(event.text)
    if match is None:
        return None
    login = match.group("login")
    if login is not None:
        wanted = {name.lower().removesuffix("[bot]") for name in logins}
        if login.lower().removesuffix("[bot]") not in wanted:
            return None  # addressed to somebody else
    return f"/{match.group('verb').lower()}{match.group('rest') or ''}"


#: A binding without ``triggers``: every field falls back to the event's default (built once, read only).
_UNCONFIGURED = GitHubTrigger()


def effective_trigger(agent: GitHubAgent, binding: GitHubBinding, event_name: str) -> EffectiveTrigger | None:
    """The trigger for ``event_name`` on this binding, or None when the event does not trigger it."""
    default = DEFAULT_TRIGGERS.get(event_name)
    if default is None:
        return None
    if binding.triggers is None:
        configured = _UNCONFIGURED
    elif event_name in binding.triggers:
        configured = binding.triggers[event_name]
    else:
        return None
    actions, mention = default
    return EffectiveTrigger(
        actions=tuple(configured.actions) if configured.actions is not None else actions,
        require_mention=mention if configured.require_mention is None else configured.require_mention,
        mention_login=configured.mention_login or agent.bot_login,
        allow_authors=(
            frozenset(a.lower() for a in configured.allow_authors)
            if configured.allow_authors is not None
            else None
        ),
    )


def binding_for(agent: GitHubAgent, repo: str) -> GitHubBinding | None:
    repo = repo.lower()
    return next((b for b in agent.bindings if b.repo.lower() == repo), None)


def is_own_event(agent: GitHubAgent, login: str) -> bool:
    login = login.lower()
    me = agent.bot_login.lower().removesuffix("[bot]")
    return login in (me, f"{me}[bot]")


def evaluate(agent: GitHubAgent, event: GitHubEvent) -> tuple[bool, str | None]:
    """(fires, reason it does not). Checks run cheapest and most explanatory first."""
    binding = binding_for(agent, event.repo)
    if binding is None:
        return False, f"not bound to {event.repo}"
    trigger = effective_trigger(agent, binding, event.name)
    if trigger is None:
        return False, f"{event.name} is not a trigger for this binding"
    if event.action not in trigger.actions:
        return False, f"{event.name}.{event.action} is not a trigger (actions: {', '.join(trigger.actions)})"
    if is_own_event(agent, event.sender_login) or is_own_event(agent, event.author_login):
        return False, "own event"
    if trigger.allow_authors is not None and event.author_login.lower() not in trigger.allow_authors:
        return False, f"author @{event.author_login} is not in allow_authors"
    if (
        trigger.require_mention
        and not mentions(event.text, trigger.mention_login)
        and decision_command(event, (trigger.mention_login, agent.bot_login)) is None
    ):
        return False, f"@{trigger.mention_login.removesuffix('[bot]')} not mentioned"
    return True, None
