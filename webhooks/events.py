"""Turn a webhook payload into the few facts the bindings and the prompt need.

Parsing is lenient on purpose: GitHub adds fields over time and older GHES versions lack some, so every
lookup tolerates absence, and only the handful of fields we truly need (repository, number) decide
whether an event is usable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Events that can trigger an agent; everything else is acknowledged with ``handled: false``.
SUPPORTED_EVENTS = frozenset(
    {"issues", "issue_comment", "pull_request", "pull_request_review", "pull_request_review_comment"}
)
MAX_BODY_CHARS = 20_000


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
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


def parse_event(name: str, payload: dict[str, Any]) -> GitHubEvent | None:
    """The event's facts, or None when it is not one we handle (or lacks repository/number)."""
    if name not in SUPPORTED_EVENTS:
        return None
    repo = _get(payload, "repository", "full_name")
    sender_login = str(_get(payload, "sender", "login") or "")
    installation = _get(payload, "installation", "id")
    action = payload.get("action")
    # Keyword arguments for GitHubEvent, filled per event kind below.
    common: dict[str, Any] = {
        "name": name,
        "action": action if isinstance(action, str) else None,
        "sender_login": sender_login,
        "installation_id": int(installation) if isinstance(installation, int) else None,
    }

    def user(obj: Any) -> dict[str, Any]:
        login = str(_get(obj, "login") or sender_login)
        uid = _get(obj, "id")
        return {
            "author_login": login,
            "author_id": str(uid) if uid is not None else login,
            "author_is_bot": _get(obj, "type") == "Bot" or login.endswith("[bot]"),
        }

    if name in ("issues", "issue_comment"):
        issue = payload.get("issue")
        number = _get(issue, "number")
        kind = "pull_request" if _get(issue, "pull_request") else "issue"
        fields: dict[str, Any]
        if name == "issues":
            fields = {
                "text": _join(_get(issue, "title"), _get(issue, "body")),
                "url": _get(issue, "html_url"),
            }
            who = user(_get(issue, "user"))
        else:
            comment = payload.get("comment")
            fields = {"text": str(_get(comment, "body") or ""), "url": _get(comment, "html_url")}
            who = user(_get(comment, "user"))
        title, issue_body = _get(issue, "title"), _get(issue, "body")
    else:
        pr = payload.get("pull_request")
        number = _get(pr, "number") or payload.get("number")
        kind = "pull_request"
        title, issue_body = _get(pr, "title"), _get(pr, "body")
        head, base = _get(pr, "head", "ref"), _get(pr, "base", "ref")
        common["extra"] = f"{head} → {base}" if head and base else ""
        if name == "pull_request":
            fields = {"text": _join(title, issue_body), "url": _get(pr, "html_url")}
            who = user(_get(pr, "user"))
        elif name == "pull_request_review":
            review = payload.get("review")
            state = _get(review, "state")
            fields = {"text": str(_get(review, "body") or ""), "url": _get(review, "html_url")}
            common["extra"] = f"review state: {state}" if state else ""
            who = user(_get(review, "user"))
        else:
            comment = payload.get("comment")
            path, line = _get(comment, "path"), _get(comment, "line") or _get(comment, "original_line")
            fields = {"text": str(_get(comment, "body") or ""), "url": _get(comment, "html_url")}
            common["extra"] = f"on {path}" + (f" line {line}" if line else "") if path else ""
            who = user(_get(comment, "user"))
    if not isinstance(repo, str) or not isinstance(number, int):
        return None
    return GitHubEvent(
        repo=repo,
        number=number,
        kind=kind,
        title=str(title or ""),
        issue_body=str(issue_body or ""),
        **fields,
        **who,
        **common,
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
