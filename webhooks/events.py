"""Turn a webhook payload into the few facts the bindings and the prompt need.

Parsing is lenient on purpose: GitHub adds fields over time and older GHES versions lack some, so every
lookup tolerates absence, and only the handful of fields we truly need (repository, number) decide
whether an event is usable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from msgspec import Struct

from webhooks.payload import Payload

#: Events that can trigger an agent; everything else is acknowledged with ``handled: false``.
SUPPORTED_EVENTS = frozenset(
    {"issues", "issue_comment", "pull_request", "pull_request_review", "pull_request_review_comment"}
)
MAX_BODY_CHARS = 20_000


def _get(data: Any, *path: str) -> Any:
    """``data[path[0]][path[1]]…``, or None where a step is missing or not an object. ``data`` is the
    payload either as decoded into :mod:`webhooks.payload`'s Structs or as plain dictionaries."""
    for key in path:
        if isinstance(data, Struct):
            data = getattr(data, key, None)
        elif isinstance(data, dict):
            data = data.get(key)
        else:
            return None
    return data


@dataclass(frozen=True, slots=True)
class GitHubEvent:
    """One supported event, flattened. ``text`` is what a mention is looked for in."""

    name: str
    action: str | None
    repo: str
    number: int
    kind: str  # "issue" | "pull_request": what the number refers to
    title: str
    text: str
    url: str | None
    author_login: str
    author_id: str
    author_is_bot: bool
    sender_login: str
    installation_id: int | None
    issue_body: str = ""
    extra: str = ""

    @property
    def noun(self) -> str:
        return "pull request" if self.kind == "pull_request" else "issue"


def parse_event(name: str, payload: Payload | dict[str, Any]) -> GitHubEvent | None:
    """The event's facts, or None when it is not one we handle (or lacks repository/number).

    Written as straight-line lookups (no helper closures or keyword dictionaries): it runs for every
    delivery, before the acknowledgement GitHub waits for.
    """
    if name not in SUPPORTED_EVENTS:
        return None
    repo = _get(payload, "repository", "full_name")
    sender_login = str(_get(payload, "sender", "login") or "")
    installation = _get(payload, "installation", "id")
    action = _get(payload, "action")
    extra = ""
    if name == "issues" or name == "issue_comment":
        issue = _get(payload, "issue")
        number = _get(issue, "number")
        kind = "pull_request" if _get(issue, "pull_request") else "issue"
        title, issue_body = _get(issue, "title"), _get(issue, "body")
        if name == "issues":
            text, url, author = _join(title, issue_body), _get(issue, "html_url"), _get(issue, "user")
        else:
            comment = _get(payload, "comment")
            text = str(_get(comment, "body") or "")
            url, author = _get(comment, "html_url"), _get(comment, "user")
    else:
        pr = _get(payload, "pull_request")
        number = _get(pr, "number") or _get(payload, "number")
        kind = "pull_request"
        title, issue_body = _get(pr, "title"), _get(pr, "body")
        head, base = _get(pr, "head", "ref"), _get(pr, "base", "ref")
        extra = f"{head} → {base}" if head and base else ""
        if name == "pull_request":
            text, url, author = _join(title, issue_body), _get(pr, "html_url"), _get(pr, "user")
        elif name == "pull_request_review":
            review = _get(payload, "review")
            state = _get(review, "state")
            text = str(_get(review, "body") or "")
            url, author = _get(review, "html_url"), _get(review, "user")
            extra = f"review state: {state}" if state else ""
        else:
            comment = _get(payload, "comment")
            path, line = _get(comment, "path"), _get(comment, "line") or _get(comment, "original_line")
            text = str(_get(comment, "body") or "")
            url, author = _get(comment, "html_url"), _get(comment, "user")
            extra = f"on {path}" + (f" line {line}" if line else "") if path else ""
    if not isinstance(repo, str) or not isinstance(number, int):
        return None
    author_login = str(_get(author, "login") or sender_login)
    author_id = _get(author, "id")
    return GitHubEvent(
        name=name,
        action=action if isinstance(action, str) else None,
        repo=repo,
        number=number,
        kind=kind,
        title=str(title or ""),
        text=text,
        url=url,
        author_login=author_login,
        author_id=str(author_id) if author_id is not None else author_login,
        author_is_bot=_get(author, "type") == "Bot" or author_login.endswith("[bot]"),
        sender_login=sender_login,
        installation_id=int(installation) if isinstance(installation, int) else None,
        issue_body=str(issue_body or ""),
        extra=extra,
    )


def _join(*parts: Any) -> str:
    return "\n\n".join(str(p) for p in parts if p)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_BODY_CHARS else text[:MAX_BODY_CHARS] + "\n…(truncated)"


def build_prompt(event: GitHubEvent) -> str:
    """A compact, self-contained prompt: where, who, what was said, and the link. No secrets, no ids."""
    where = f"{event.repo}#{event.number}"
    title = f" “{event.title}”" if event.title else ""
    by = f"@{event.author_login}"
    if event.name == "issues":
        head = f"New issue {where}{title} opened by {by}."
        body = _clip(event.issue_body) or "(no description)"
    elif event.name == "pull_request":
        verb = "opened" if event.action == "opened" else f"{event.action or 'updated'}"
        branch = f" ({event.extra})" if event.extra else ""
        head = f"Pull request {where}{title}{branch} {verb} by {by}."
        body = _clip(event.issue_body) or "(no description)"
    elif event.name == "pull_request_review":
        head = f"{by} submitted a review on pull request {where}{title}" + (
            f" ({event.extra})." if event.extra else "."
        )
        body = _clip(event.text) or "(no review text)"
    elif event.name == "pull_request_review_comment":
        on = f" {event.extra}" if event.extra else ""
        head = f"{by} commented{on} in the review of pull request {where}{title}:"
        body = _clip(event.text)
    else:
        head = f"{by} commented on {event.noun} {where}{title}:"
        body = _clip(event.text)
    link = f"\n\nLink: {event.url}" if event.url else ""
    footer = (
        "\n\nYour reply will be posted as a comment on this "
        f"{event.noun}; `gh` and `git` can use $GH_TOKEN for this repository."
    )
    return f"{head}\n\n{body}{link}{footer}"
