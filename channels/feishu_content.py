"""Feishu message content in and out: event content → plain text and file refs; reply text → card JSON.

Pure functions with no SDK import, so the shapes are easy to read in one place. Feishu puts every message
body in a JSON *string* (``content``) whose schema depends on ``message_type``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

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
        return ParsedContent("", [(key, "file", str(value.get("file_name") or default))])
    else:
        return None
    text = _replace_mentions(text, mentions, bot_open_id)
    # Removing "@bot " leaves stray spaces; trailing ones go, the line structure stays.
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return ParsedContent(text.strip(), files)


# --- outbound ---------------------------------------------------------------------------------------


def card_content(text: str) -> str:
    """An interactive card with one markdown element.

    ``update_multi`` makes it a shared card, the only kind the PATCH endpoint may update; it must be set
    on the card as sent and on every update. ``ensure_ascii=False`` keeps CJK text at 3 bytes a character
    instead of 6, which matters against the ~30 KB request-body cap.
    """
    card = {
        "config": {"update_multi": True, "wide_screen_mode": True},
        "elements": [{"tag": "markdown", "content": text}],
    }
    return json.dumps(card, ensure_ascii=False)


def text_content(text: str) -> str:
    return json.dumps({"text": text}, ensure_ascii=False)


def card_text(content: str) -> str:
    """The markdown text inside a card built by :func:`card_content` (used by the test fake's views)."""
    value = _loads(content)
    return "".join(str(e.get("content") or "") for e in value.get("elements") or [] if isinstance(e, dict))
