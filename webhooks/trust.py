"""How far a GitHub event's author is trusted, decided at the edge from the payload (docs/security.md).

Anyone with an account can open an issue or comment on a public repository, so "the event is signed by
GitHub" says nothing about who wrote it. GitHub says how the author relates to the repository in
``author_association``; that, and the agent's own lists, decide:

    admin   the agent's ``admins`` logins, or the channel's ``admins`` (numeric user ids)
    member  OWNER, MEMBER, COLLABORATOR, or the agent's ``members`` logins
    guest   everyone else: NONE, FIRST_TIMER, FIRST_TIME_CONTRIBUTOR, CONTRIBUTOR, MANNEQUIN, or no
            association at all (an old GitHub Enterprise Server): never more than it can prove

The level is that of the person who wrote the text the turn acts on (the comment's, the issue's, the
pull request's or the review's author), since that text becomes the agent's prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

from channels.types import Trust
from config.channels.github import GitHubAgent
from webhooks.events import GitHubEvent

#: Associations GitHub gives people with write access or organisation membership.
MEMBER_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})


@dataclass(frozen=True, slots=True)
class Standing:
    """A level and the reason for it, as the delivery log shows it."""

    level: Trust
    why: str


def standing(agent: GitHubAgent, event: GitHubEvent, channel_admins: frozenset[str]) -> Standing:
    """The event author's trust level for this agent."""
    login = event.author_login.lower()
    if login in {a.lower() for a in agent.admins} or event.author_id in channel_admins:
        return Standing("admin", f"@{event.author_login} is an admin of {agent.name}")
    association = event.association or "missing"
    if event.association in MEMBER_ASSOCIATIONS:
        return Standing("member", f"author_association {association}")
    if login in {m.lower() for m in agent.members}:
        return Standing("member", f"@{event.author_login} is in the members of {agent.name}")
    return Standing("guest", f"author_association {association}")
