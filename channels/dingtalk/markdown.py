"""Adapt the agent's Markdown to the subset DingTalk renders.

DingTalk markdown messages render headings, bold/italic, links, images, lists and quotes, but collapse
single line breaks into one paragraph and show tables as raw pipes. So, outside code fences:

* a single newline becomes a Markdown hard break (two trailing spaces), keeping lists and short lines
  on their own lines;
* a table becomes one line per row, cells joined with " · ", its ``|---|`` separator row dropped.

Code fences are kept verbatim (the splitter guarantees each chunk's fences are balanced; AI cards and
current clients render them, older clients still show the code on its own lines).
"""

from __future__ import annotations

import re

FENCE = re.compile(r"^\s*(```+|~~~+)")
TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
MARKUP = re.compile(r"[*_`#>~\[\]]|\(http[^)]*\)")
TITLE_LIMIT = 30


def to_dingtalk_markdown(text: str) -> str:
    out: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        match = FENCE.match(line)
        if fence is not None:
            out.append(line)
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
            continue
        if match:
            fence = match.group(1)
            out.append(line)
            continue
        if TABLE_SEPARATOR.match(line) and "-" in line and "|" in line:
            continue
        if TABLE_ROW.match(line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            line = " · ".join(c for c in cells if c)
        out.append(line)
    # Hard breaks: a line followed by another non-blank line outside a fence ends with two spaces.
    result: list[str] = []
    fence = None
    for index, line in enumerate(out):
        match = FENCE.match(line)
        inside = fence is not None
        if match:
            if fence is None:
                fence = match.group(1)
            elif match.group(1)[0] == fence[0]:
                fence = None
            result.append(line)
            continue
        nxt = out[index + 1] if index + 1 < len(out) else ""
        if not inside and line.strip() and nxt.strip() and not FENCE.match(nxt) and not line.endswith("  "):
            line += "  "
        result.append(line)
    return "\n".join(result)


def title_for(text: str) -> str:
    """The markdown message title DingTalk shows in notifications: the first words, without markup."""
    for line in text.splitlines():
        plain = MARKUP.sub("", line).strip()
        if plain:
            return plain[:TITLE_LIMIT]
    return "Reply"
