"""The few fields of a GitHub webhook payload that Switchboard reads, decoded without the rest.

A delivery is 5–25 KB of JSON, of which :func:`webhooks.events.parse_event` reads about a dozen fields.
Decoding all of it into dictionaries (orjson: some 400 objects for a typical ``issue_comment``) was the
largest single cost of a delivery's acknowledgement after the HTTP stack, larger than the HMAC. msgspec
decodes into the Structs below instead: it still checks the whole document's syntax, but builds objects
only for the declared fields (docs/PERFORMANCE.md).

Every field is optional, as in ``parse_event``: GitHub adds fields over time and older GitHub Enterprise
Server versions lack some. A payload whose declared fields have other types (or anything else this
decoder will not take) is decoded again by orjson into dictionaries, which ``parse_event`` reads the same
way, so such a payload is handled exactly as before and orjson stays the judge of what is not JSON.

msgspec is slightly more permissive than orjson inside the fields it skips (a number beyond a double's
range such as ``1e400`` is accepted there, where orjson answers "not JSON"), so such a payload is read
rather than refused with a 400; for a payload whose HMAC proves it came from GitHub that is harmless.

Keep these in step with ``parse_event``: a field it reads that is not declared here reads as absent.
``tests/github/test_payload.py`` compares both decodings on every stored payload.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson


class User(msgspec.Struct):
    login: str | None = None
    id: int | None = None
    type: str | None = None


class Repository(msgspec.Struct):
    full_name: str | None = None


class Installation(msgspec.Struct):
    id: int | None = None


class Ref(msgspec.Struct):
    ref: str | None = None
    sha: str | None = None


class Label(msgspec.Struct):
    name: str | None = None


class Authored(msgspec.Struct):
    """What an issue, a pull request, a comment and a review all are: something a GitHub user wrote.

    ``parse_event`` reads these fields of whichever one an event is about alike (its author, the
    author's association, its id for the event's identity, its link and text), so they are declared once.
    """

    id: int | None = None
    author_association: str | None = None
    body: str | None = None
    html_url: str | None = None
    user: User | None = None


class Issue(Authored):
    number: int | None = None
    updated_at: str | None = None
    title: str | None = None
    #: Only its presence is read (an issue that is a pull request); its contents are a few links.
    pull_request: Any = None


class Comment(Authored):
    updated_at: str | None = None
    path: str | None = None
    line: int | None = None
    original_line: int | None = None


class PullRequest(Authored):
    number: int | None = None
    updated_at: str | None = None
    title: str | None = None
    head: Ref | None = None
    base: Ref | None = None


class Review(Authored):
    submitted_at: str | None = None
    state: str | None = None


class Payload(msgspec.Struct):
    action: str | None = None
    number: int | None = None
    repository: Repository | None = None
    sender: User | None = None
    installation: Installation | None = None
    issue: Issue | None = None
    comment: Comment | None = None
    pull_request: PullRequest | None = None
    review: Review | None = None
    label: Label | None = None
    assignee: User | None = None


_decoder = msgspec.json.Decoder(Payload)


def decode_payload(body: bytes) -> Payload | Any:
    """The payload as a :class:`Payload`, or as orjson decodes it when it does not fit one.

    Raises ``ValueError`` (orjson's ``JSONDecodeError``) when the body is not JSON. The result is a
    ``Payload`` or a ``dict`` for a JSON object, anything else for other JSON values.
    """
    try:
        return _decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return orjson.loads(body)
