"""Feishu message content in and out: event content → plain text and file refs; reply text → card JSON.

Pure functions with no SDK import, so the shapes are easy to read in one place. Feishu puts every message
body in a JSON *string* (``content``) whose schema depends on ``message_type``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from channels.types import Action

#: Message types whose content carries a downloadable resource, and the ``type`` the resource API wants.
FILE_MESSAGE_TYPES = {"image": "image", "file": "file", "media": "file", "audio": "file"}


@dataclass(slots=True)
class Mention:
    key: str  # the placeholder in the text, e.g. "@_user_1"
    open_id: str | None
    name: str | None


@dataclass(slots=True)
class ParsedContent:
    text: str
    files: list[tuple[str, str, str]] = field(default_factory=list)  # (key, resource type, display name)
    #: An ``audio`` message (a voice message, Ogg/Opus): its one file is audio for the service to
    #: transcribe, ``audio_seconds`` long (Feishu gives ``duration`` in milliseconds).
    audio: bool = False
    audio_seconds: float | None = None


def _loads(content: str | None) -> dict[str, Any]:
    if not content:
        return {}
    try:
        value = json.loads(content)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _replace_mentions(text: str, mentions: list[Mention], bot_open_id: str | None) -> str:
    """The bot's own placeholder disappears; other people's become ``@Name`` so the model sees who."""
    for mention in sorted(mentions, key=lambda m: len(m.key), reverse=True):
        if not mention.key:
            continue
        replacement = (
            "" if bot_open_id and mention.open_id == bot_open_id else f"@{mention.name or 'someone'}"
        )
        text = text.replace(mention.key, replacement)
    return text


def _post_body(value: dict[str, Any]) -> dict[str, Any]:
    """Received posts are ``{title, content}``; sent ones may be wrapped per locale (``{zh_cn: {...}}``)."""
    if "content" in value:
        return value
    for inner in value.values():
        if isinstance(inner, dict) and "content" in inner:
            return inner
    return {}


def _post_to_text(body: dict[str, Any], files: list[tuple[str, str, str]]) -> str:
    """Rich text → plain text: one line per paragraph, links as ``text (url)``, images collected as files."""
    lines: list[str] = []
    title = str(body.get("title") or "").strip()
    if title:
        lines.append(title)
    for paragraph in body.get("content") or []:
        parts: list[str] = []
        for node in paragraph if isinstance(paragraph, list) else []:
            if not isinstance(node, dict):
                continue
            tag = node.get("tag")
            if tag in ("text", "md"):
                parts.append(str(node.get("text") or ""))
            elif tag == "a":
                label, href = str(node.get("text") or ""), str(node.get("href") or "")
                parts.append(f"{label} ({href})" if label and href and label != href else label or href)
            elif tag == "at":
                # Kept as the placeholder so mention replacement treats posts and text alike.
                parts.append(str(node.get("user_id") or ""))
            elif tag == "code_block":
                parts.append(f"\n```{node.get('language') or ''}\n{node.get('text') or ''}\n```\n")
            elif tag == "emotion":
                parts.append(f":{node.get('emoji_type') or ''}:")
            elif tag == "img" and node.get("image_key"):
                key = str(node["image_key"])
                files.append((key, "image", f"{key}.png"))
            elif tag == "media" and node.get("file_key"):
                key = str(node["file_key"])
                files.append((key, "file", f"{key}.mp4"))
        lines.append("".join(parts))
    return "\n".join(lines)


def parse_content(
    message_type: str, content: str | None, mentions: list[Mention], bot_open_id: str | None
) -> ParsedContent | None:
    """Normalise one message body; None for types we do not handle (stickers, cards, system messages)."""
    value = _loads(content)
    files: list[tuple[str, str, str]] = []
    if message_type == "text":
        text = str(value.get("text") or "")
    elif message_type == "post":
        text = _post_to_text(_post_body(value), files)
    elif message_type == "image" and value.get("image_key"):
        key = str(value["image_key"])
        return ParsedContent("", [(key, "image", f"{key}.png")])
    elif message_type in FILE_MESSAGE_TYPES and value.get("file_key"):
        key = str(value["file_key"])
        default = {"audio": f"{key}.opus", "media": f"{key}.mp4"}.get(message_type, key)
        files = [(key, "file", str(value.get("file_name") or default))]
        if message_type == "audio":
            duration = value.get("duration")
            seconds = duration / 1000 if isinstance(duration, int | float) else None
            return ParsedContent("", files, audio=True, audio_seconds=seconds)
        return ParsedContent("", files)
    else:
        return None
    text = _replace_mentions(text, mentions, bot_open_id)
    # Removing "@bot " leaves stray spaces; trailing ones go, the line structure stays.
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return ParsedContent(text.strip(), files)


# --- outbound ---------------------------------------------------------------------------------------

#: The ``element_id`` of the one markdown element every reply card has: CardKit streams into it by id.
ANSWER_ELEMENT = "answer"
#: ``<at …>`` / ``</at>`` anywhere in model text: in a card's markdown it is a real @mention (``<at
#: id=all></at>`` pings the whole group), so the model must never be able to produce one.
_AT_TAG = re.compile(r"<(/?)(at)(?=[\s>/])", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")


def _escape_line(line: str) -> str:
    """Escape ``<at`` outside inline code spans (inside them the markdown renders text as typed)."""
    out, last = [], 0
    for match in _INLINE_CODE.finditer(line):
        out.append(_AT_TAG.sub(r"&lt;\1\2", line[last : match.start()]))
        out.append(match.group(0))
        last = match.end()
    out.append(_AT_TAG.sub(r"&lt;\1\2", line[last:]))
    return "".join(out)


def escape_mentions(text: str) -> str:
    """Model text → card markdown that cannot @mention anyone.

    JSON 2.0 card markdown accepts HTML entities, so ``&lt;at`` shows the characters ``<at`` instead of
    pinging. Code blocks and inline code are left alone: Feishu shows their content literally, where
    an entity would show up as ``&lt;``.
    """
    lines = text.split("\n")
    fenced = False
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines[index] = _escape_line(line)
    return "\n".join(lines)


#: Button ``element_id`` prefix: CardKit deletes a reply's live buttons by id when its stream closes.
BUTTON_PREFIX = "action_"
#: What a press must carry back besides the command: the conversation the card answers (a callback
#: only names the chat and the card, not the thread or whether it is a 1:1 chat).
ButtonScope = dict[str, Any]


def button_ids(actions: Sequence[Action]) -> list[str]:
    return [f"{BUTTON_PREFIX}{index}" for index in range(len(actions))]


def _buttons(actions: Sequence[Action], scope: ButtonScope) -> list[dict[str, Any]]:
    """JSON 2.0 ``button`` elements whose ``callback`` value is the command plus the card's scope.

    The value must be an object (the SDKs only read object values); Feishu hands it back verbatim in
    ``card.action.trigger``, so the press needs no table that a restart would lose.
    """
    return [
        {
            "tag": "button",
            "element_id": element_id,
            "text": {"tag": "plain_text", "content": action.label},
            "type": action.style or "default",
            "behaviors": [{"type": "callback", "value": {"command": action.command, **scope}}],
        }
        for element_id, action in zip(button_ids(actions), actions, strict=True)
    ]


def _card(
    text: str, config: dict[str, Any], actions: Sequence[Action] = (), scope: ButtonScope | None = None
) -> dict[str, Any]:
    """A JSON 2.0 card (``schema: "2.0"``) with one markdown element and the reply's buttons under it.

    2.0 is what renders headings, quotes and tables in the markdown element (1.0 cards show them as
    plain text), and the only schema CardKit accepts. ``update_multi`` makes it a shared card, the
    only kind the PATCH endpoint and CardKit may update; 2.0 only allows ``true``.
    """
    elements: list[dict[str, Any]] = [
        {"tag": "markdown", "element_id": ANSWER_ELEMENT, "content": escape_mentions(text)}
    ]
    elements += _buttons(actions, scope or {})
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "width_mode": "fill", **config},
        "body": {"elements": elements},
    }


def card_content(text: str, actions: Sequence[Action] = (), scope: ButtonScope | None = None) -> str:
    """The whole card as message ``content`` (send and PATCH); no ``actions`` = no buttons.

    ``ensure_ascii=False`` keeps CJK text at 3 bytes a character instead of 6, which matters against the
    ~30 KB request-body cap.
    """
    return json.dumps(_card(text, {}, actions, scope), ensure_ascii=False)


def streaming_card(text: str, actions: Sequence[Action] = (), scope: ButtonScope | None = None) -> str:
    """The card JSON for a CardKit card entity in streaming mode, showing ``text`` (and the live buttons).

    ``streaming_mode`` lets the element's content be replaced many times a second with Feishu typing
    the new part out. No ``summary``: while streaming the chat list shows Feishu's own "generating"
    text, and once streaming is closed the card's content — a fixed summary would stay there for good.
    Buttons work while the card streams (Feishu only cannot apply a card *from the callback answer*
    then, which we never send), so the Stop button lives in the entity and is deleted when it closes.
    """
    return json.dumps(_card(text, {"streaming_mode": True}, actions, scope), ensure_ascii=False)


def closed_settings() -> str:
    """The ``settings`` JSON string that ends streaming mode (the chat list then shows the answer)."""
    return json.dumps({"config": {"streaming_mode": False}})


def reopen_settings() -> str:
    """Streaming mode on again, after Feishu closed it (it does, 10 minutes after it was opened)."""
    return json.dumps({"config": {"streaming_mode": True}})


def card_entity_content(card_id: str) -> str:
    """Message ``content`` that sends a CardKit card entity (msg_type ``interactive``)."""
    return json.dumps({"type": "card", "data": {"card_id": card_id}})


def text_content(text: str) -> str:
    return json.dumps({"text": text}, ensure_ascii=False)


def card_text(content: str) -> str:
    """The markdown text inside a card built by :func:`card_content` (used by the test fake's views)."""
    value = _loads(content)
    elements = value.get("elements") or (value.get("body") or {}).get("elements") or []
    return "".join(str(e.get("content") or "") for e in elements if isinstance(e, dict))
