"""Markdown (what the model writes) → Slack ``mrkdwn`` (what Slack renders).

Slack does not render CommonMark: bold is ``*x*``, italic ``_x_``, strike ``~x~``, links ``<url|label>``,
there are no headings, and ``&``, ``<``, ``>`` must be escaped everywhere or Slack reads them as markup
(a stray ``<!channel>`` in model output would otherwise ping a whole channel). Code is kept verbatim
apart from that escaping, and fences lose their language tag because Slack would print it as text.

The converter runs on each chunk *after* the shared splitter cut the Markdown, so every chunk it sees
has balanced fences.
"""

from __future__ import annotations

import re

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+#.\-]*)\s*$")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
BULLET = re.compile(r"^(\s*)[-*+]\s+(?=\S)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"\[([^\]\n]+)\]\((\S+?)(?:\s+\"[^\"]*\")?\)")
AUTOLINK = re.compile(r"&lt;((?:https?|mailto):[^\s&]+(?:&amp;[^\s&]+)*)&gt;")
BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
ITALIC_STAR = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")

# Private-use characters stand in for Slack's bold marker while italics are rewritten, so the ``*`` of a
# converted bold is not mistaken for a Markdown italic.
_BOLD_OPEN, _BOLD_CLOSE = "\ue000", "\ue001"


def escape(text: str) -> str:
    """Slack's three control characters; everything else is literal."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _inline(text: str) -> str:
    """Convert one run of non-code text."""
    text = escape(text)
    links: list[str] = []

    def keep_link(match: re.Match[str]) -> str:
        label, url = match.group(1).replace("|", "¦"), match.group(2)
        links.append(f"<{url}|{label}>")
        return f"\ue002{len(links) - 1}\ue003"

    def keep_autolink(match: re.Match[str]) -> str:
        links.append(f"<{match.group(1)}>")
        return f"\ue002{len(links) - 1}\ue003"

    text = LINK.sub(keep_link, text)
    text = AUTOLINK.sub(keep_autolink, text)
    text = BOLD.sub(lambda m: f"{_BOLD_OPEN}{m.group(2)}{_BOLD_CLOSE}", text)
    text = ITALIC_STAR.sub(r"_\1_", text)
    text = STRIKE.sub(r"~\1~", text)
    text = text.replace(_BOLD_OPEN, "*").replace(_BOLD_CLOSE, "*")
    return re.sub("\ue002(\\d+)\ue003", lambda m: links[int(m.group(1))], text)


def _line(line: str) -> str:
    heading = HEADING.match(line)
    if heading:
        title = BOLD.sub(r"\2", heading.group(1)).strip()
        return f"*{_convert_spans(title)}*" if title else ""
    bullet = BULLET.match(line)
    if bullet:
        line = f"{bullet.group(1)}• {line[bullet.end() :]}"
    return _convert_spans(line)


def _convert_spans(line: str) -> str:
    """Inline code stays literal (escaped only); the text between spans gets formatting."""
    out: list[str] = []
    pos = 0
    for match in INLINE_CODE.finditer(line):
        out.append(_inline(line[pos : match.start()]))
        out.append(f"`{escape(match.group(2))}`")
        pos = match.end()
    out.append(_inline(line[pos:]))
    return "".join(out)


def to_mrkdwn(markdown: str) -> str:
    """Render a Markdown chunk as Slack mrkdwn. Code fences and their content are preserved.

    Slack has no tables, so a Markdown table is shown as a code block: its columns stay aligned.
    """
    out: list[str] = []
    fence: str | None = None
    table = False
    for line in markdown.split("\n"):
        if fence is None and TABLE_ROW.match(line):
            if not table:
                out.append("```")
                table = True
            out.append(escape(line.strip()))
            continue
        if table:
            out.append("```")
            table = False
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(2)
            out.append(f"{match.group(1)}```")
            continue
        if fence is not None:
            if match and match.group(2).startswith(fence[0]) and len(match.group(2)) >= len(fence):
                fence = None
                out.append(f"{match.group(1)}```")
            else:
                out.append(escape(line))
            continue
        out.append(_line(line))
    if fence is not None or table:  # an unclosed fence (mid-stream): close it so nothing is swallowed
        out.append("```")
    return "\n".join(out)
