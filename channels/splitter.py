"""Split long text into platform-sized messages without breaking code fences.

Cuts prefer, in order: a blank line, a line end, a space, and only then a hard cut. When a cut has to fall
inside a fenced code block, the chunk closes the fence and the next chunk reopens it with the same info
string, so every message renders as valid Markdown on its own.
"""

from __future__ import annotations

import re

FENCE = re.compile(r"^\s*(```+|~~~+)(.*)$")


def _open_fence_after(text: str, state: tuple[str, str] | None) -> tuple[str, str] | None:
    """Track fence state line by line; returns (marker, info) of the fence still open at the end."""
    for line in text.split("\n"):
        m = FENCE.match(line)
        if not m:
            continue
        marker, info = m.group(1), m.group(2).strip()
        if state is None:
            state = (marker, info)
        elif marker.startswith(state[0][0]) and len(marker) >= len(state[0]) and not info:
            state = None
    return state


def _best_cut(text: str, limit: int) -> int:
    window = text[:limit]
    for sep in ("\n\n", "\n", " "):
        idx = window.rfind(sep)
        if idx > limit // 4:
            return idx + len(sep)
    return limit


def split_text(text: str, limit: int) -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` characters (``limit`` must leave room for fences)."""
    if limit < 32:
        raise ValueError("limit too small to split safely")
    if len(text) <= limit:
        return [text]
    chunks: list[str] = []
    fence: tuple[str, str] | None = None
    rest = text
    while rest:
        prefix = f"{fence[0]}{fence[1]}\n" if fence else ""
        budget = limit - len(prefix)
        if len(rest) <= budget:
            chunks.append(prefix + rest)
            break
        # Reserve room to close a fence that may be open at the cut.
        reserve = 8
        cut = _best_cut(rest, budget - reserve)
        piece = rest[:cut]
        state = _open_fence_after(piece, fence)
        body = prefix + piece
        if state is not None:
            body = body.rstrip("\n") + "\n" + state[0]
        chunks.append(body.rstrip() if state is None else body)
        fence = state
        rest = rest[cut:]
        if state is None:
            rest = rest.lstrip("\n")
    return [c for c in chunks if c.strip()]
