"""Markdown (as models write it) → the small HTML subset Telegram's ``parse_mode=HTML`` accepts.

Why HTML and not MarkdownV2: MarkdownV2 demands escaping of a dozen punctuation characters and rejects
the whole message when one is missed, which happens constantly with model output. HTML needs only
``<``, ``>`` and ``&`` escaped. The converter is deliberately conservative:

* it only emits ``b``, ``i``, ``s``, ``code``, ``pre``, ``a`` and ``blockquote`` and always nests them
  properly (consecutive ``> quoted`` lines become one ``<blockquote>``);
* an unclosed code fence (common while a reply is still streaming) is closed in the HTML;
* anything it does not recognise stays literal text, escaped.

If Telegram still refuses the markup, the transport resends the original text without a parse mode.
"""

from __future__ import annotations

import html
import re

_FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+#.\-]*)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(?=\S)")
_HRULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_QUOTE = re.compile(r"^\s{0,3}>\s?")

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"\[([^\]\n]+)\]\(((?:https?|tg|mailto):[^\s)]+)\)")
_BOLD = re.compile(r"(?<![\w*])\*\*(?=\S)([^<>]+?)(?<=\S)\*\*(?![\w*])")  # not __x__: it eats __init__
_ITALIC = re.compile(
    r"(?<![\w*])\*(?=[^\s*])([^<>*]+?)(?<=[^\s*])\*(?![\w*])|(?<!\w)_(?=[^\s_])([^<>_]+?)(?<=[^\s_])_(?!\w)"
)
_STRIKE = re.compile(r"~~(?=\S)([^<>]+?)(?<=\S)~~")
_SLOT = re.compile("\x00(\\d+)\x00")


def _inline(text: str) -> str:
    """One line (or paragraph) of inline Markdown → HTML. Code spans and links are protected first."""
    slots: list[str] = []

    def keep(rendered: str) -> str:
        slots.append(rendered)
        return f"\x00{len(slots) - 1}\x00"

    text = text.replace("\x00", "")
    text = _CODE_SPAN.sub(
        lambda m: keep(f"<code>{html.escape(m.group(2).strip(), quote=False)}</code>"), text
    )
    text = _LINK.sub(
        lambda m: keep(
            f'<a href="{html.escape(m.group(2), quote=True)}">{html.escape(m.group(1), quote=False)}</a>'
        ),
        text,
    )
    text = html.escape(text, quote=False)
    text = _BOLD.sub(lambda m: f"<b>{m.group(1)}</b>", text)
    text = _STRIKE.sub(lambda m: f"<s>{m.group(1)}</s>", text)
    text = _ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", text)
    return _SLOT.sub(lambda m: slots[int(m.group(1))], text)


def markdown_to_html(text: str) -> str:
    """Render ``text`` for ``parse_mode=HTML``. Always returns well-formed markup."""
    out: list[str] = []
    quote: list[str] | None = None  # rendered lines of the open blockquote
    code: list[str] | None = None  # lines of the open fenced block
    fence_marker = ""
    language = ""
    for line in text.split("\n"):
        if code is not None:
            stripped = line.strip()
            if stripped.startswith(fence_marker) and stripped.strip(fence_marker[0]) == "":
                out.append(_pre(code, language))
                code = None
            else:
                code.append(line)
            continue
        quoted = _QUOTE.match(line)
        if quoted:
            if quote is None:
                quote = []
            quote.append(_inline(line[quoted.end() :]))
            continue
        if quote is not None:
            out.append(_blockquote(quote))
            quote = None
        fence = _FENCE.match(line)
        if fence:
            code, fence_marker, language = [], fence.group(1), fence.group(2)
            continue
        heading = _HEADING.match(line)
        if heading:
            out.append(f"<b>{_inline(heading.group(1))}</b>")
            continue
        if _HRULE.match(line):
            out.append("──────")
            continue
        bullet = _BULLET.match(line)
        if bullet:
            line = f"{bullet.group(1)}• {line[bullet.end() :]}"
        out.append(_inline(line))
    if quote is not None:
        out.append(_blockquote(quote))
    if code is not None:  # still streaming inside a fence: show it as code anyway
        out.append(_pre(code, language))
    return "\n".join(out)


def _blockquote(lines: list[str]) -> str:
    return "<blockquote>" + "\n".join(lines) + "</blockquote>"


def _pre(lines: list[str], language: str) -> str:
    body = html.escape("\n".join(lines), quote=False)
    if language:
        return f'<pre><code class="language-{html.escape(language, quote=True)}">{body}</code></pre>'
    return f"<pre>{body}</pre>"
