"""What a reply has made visible so far, small enough to store with its inbox entry at every change.

Why: a turn that dies mid-answer (kill -9, a lost machine) runs again at the next start, and its reply must
continue in the messages already in the chat — every one of them, not only the first — and close what
is still live there (a streaming card, a Stop button, a card reading "processing"). So each time a reply
creates a message or a card, or its platform part changes what it would need to continue (a card id, a
reserved sequence number, a flow status), the reply hands a new :class:`ReplyState` to whoever stores it,
before it shows anything more. One small write per new message, never one per streamed chunk.

The state is platform-neutral: an ordered list of the messages (:class:`ShownPart`) and one opaque
string (``platform``) that only the channel's transport reads back (see
:meth:`channels.reply.ReplyTransport.resume_state`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import orjson

FORMAT_VERSION = 1


def digest(text: str) -> str:
    """A short fingerprint of a message's text: enough to tell "this chunk is what the chat shows"."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class ShownPart:
    """One message (or card) of a reply, as it was when the state was last stored.

    ``length`` and ``digest`` describe the text it held then; ``buttons`` whether it carried buttons (a
    live Stop). A message edited after the last store may show more — the resumed reply only trusts the
    fingerprint of a message that was already followed by another one.
    """

    ref: str
    length: int
    digest: str
    buttons: bool

    @classmethod
    def of(cls, ref: str, text: str, buttons: bool) -> ShownPart:
        return cls(ref, len(text), digest(text), buttons)


@dataclass(frozen=True, slots=True)
class ReplyState:
    """Every message of one reply, in order, plus its transport's own resume data (opaque)."""

    parts: tuple[ShownPart, ...] = ()
    platform: str = ""

    @classmethod
    def first_only(cls, ref: str) -> ReplyState:
        """A reply known only by its first message (stored by an older version, or a queued notice)."""
        return cls((ShownPart(ref, 0, "", True),))

    @property
    def first_ref(self) -> str | None:
        return self.parts[0].ref if self.parts else None

    @property
    def visible_length(self) -> int:
        """Characters of the answer the chat showed when the state was stored."""
        return sum(p.length for p in self.parts)

    def to_json(self) -> str:
        """The stored form (orjson: written at every new message of every reply, a fraction of json's cost)."""
        parts = [[p.ref, p.length, p.digest, p.buttons] for p in self.parts]
        return orjson.dumps({"v": FORMAT_VERSION, "parts": parts, "platform": self.platform}).decode()

    @classmethod
    def from_json(cls, raw: str) -> ReplyState:
        """Parse a stored state; a ValueError names what is wrong (the caller falls back to the first ref)."""
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"reply state is not JSON: {exc}") from None
        if not isinstance(value, dict) or value.get("v") != FORMAT_VERSION:
            raise ValueError(f"reply state has no known format version (expected v={FORMAT_VERSION})")
        rows, platform = value.get("parts"), value.get("platform", "")
        if not isinstance(rows, list) or not isinstance(platform, str):
            raise ValueError("reply state needs a list of parts and a platform string")
        parts = []
        for row in rows:
            if not (
                isinstance(row, list)
                and len(row) == 4
                and isinstance(row[0], str)
                and row[0]
                and isinstance(row[1], int)
                and isinstance(row[2], str)
                and isinstance(row[3], bool)
            ):
                raise ValueError(f"reply state part is malformed: {row!r}")
            parts.append(ShownPart(row[0], row[1], row[2], row[3]))
        return cls(tuple(parts), platform)
