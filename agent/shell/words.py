"""Reading one word the way bash does: quotes removed, ``$'…'`` decoded, substitutions followed."""

from __future__ import annotations

import re

from agent.shell.model import ASSIGNMENT, Word
from agent.shell.scanner import Scanner

_ANSI_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b"}
_ANSI_ESCAPES |= {"f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _ansi_c(text: str) -> str:
    """The value of ``$'…'``: hex, octal and unicode escapes decoded (a favourite obfuscation)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt in _ANSI_ESCAPES:
            out.append(_ANSI_ESCAPES[nxt])
            i += 2
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            digits = re.match(f"[0-9a-fA-F]{{1,{width}}}", text[i + 2 :])
            if digits is None:
                out.append("\\" + nxt)
                i += 2
            else:
                out.append(chr(int(digits.group(), 16)))
                i += 2 + len(digits.group())
        elif nxt in "01234567":
            digits = re.match(r"[0-7]{1,3}", text[i + 1 :])
            assert digits is not None
            out.append(chr(int(digits.group(), 8) & 0xFF))
            i += 1 + len(digits.group())
        else:
            out.append("\\" + nxt)
            i += 2
    return "".join(out)


class WordReader(Scanner):
    """One shell word with its quotes removed; ``$…`` parts make it dynamic."""

    def dollar(self, word: Word, out: list[str]) -> None:
        """An expansion starting at ``$``: appended as written, the word marked dynamic."""
        s, i = self.s, self.i
        if s.startswith("$((", i):
            self.i += 3
            body = self.arithmetic("$((")
            self.scan_substitutions(body)
            out.append(f"$(({body}))")
            word.dynamic = True
        elif s.startswith("$(", i):
            self.i += 2
            inner = self.balanced_parens()
            self.nested(inner)
            out.append(f"$({inner})")
            word.dynamic = word.substituted = True
        elif s.startswith("${", i):
            self.i += 2
            inner = self.braced()
            self.scan_substitutions(inner)
            name = re.match(r"[!#]?([A-Za-z_][A-Za-z0-9_]*)", inner)
            if name:
                word.variables.append(name.group(1))
            if "$(" in inner or "`" in inner:
                word.substituted = True
            out.append("${" + inner + "}")
            word.dynamic = True
        else:
            name = re.match(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]", s[i + 1 :])
            if name is None:
                out.append("$")  # a literal dollar
                self.i += 1
                return
            word.variables.append(name.group())
            word.dynamic = True
            out.append("$" + name.group())
            self.i += 1 + len(name.group())

    def word(self) -> Word:
        """One word from the current position (which is not a blank and not an operator)."""
        word = Word("")
        out: list[str] = []
        s = self.s
        while self.i < len(s):
            ch = s[self.i]
            if ch in " \t\n;&|<>()" and not (ch in "<>" and s.startswith("(", self.i + 1) and not out):
                if ch == "(" and out and out[-1].endswith("=") and ASSIGNMENT.match("".join(out)):
                    self.i += 1  # an array assignment: a=(1 2 3)
                    inner = self.balanced_parens()
                    self.scan_substitutions(inner)
                    out.append(f"({inner})")
                    word.dynamic = True
                    continue
                break
            if ch in "<>":  # <(…) or >(…) at the start of a word: a process substitution
                self.i += 2
                inner = self.balanced_parens()
                self.nested(inner)
                out.append(f"{ch}({inner})")
                word.dynamic = word.substituted = word.process = True
                continue
            if ch == "\\":
                if self.i + 1 < len(s):
                    if s[self.i + 1] != "\n":  # backslash-newline continues the line
                        out.append(s[self.i + 1])
                    self.i += 2
                else:
                    self.i += 1
                continue
            if ch == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise self.error("unterminated single quote")
                out.append(s[self.i + 1 : end])
                self.i = end + 1
                continue
            if s.startswith("$'", self.i):
                end = self.i + 2
                while end < len(s) and s[end] != "'":
                    end += 2 if s[end] == "\\" else 1
                if end >= len(s):
                    raise self.error("unterminated $'")
                out.append(_ansi_c(s[self.i + 2 : end]))
                self.i = end + 1
                continue
            if s.startswith('$"', self.i):
                self.i += 1  # a translated string reads like a double-quoted one
                continue
            if ch == '"':
                self.double_quoted(word, out)
                continue
            if ch == "$":
                self.dollar(word, out)
                continue
            if ch == "`":
                self.i += 1
                inner = self.backtick()
                self.nested(inner)
                out.append(f"`{inner}`")
                word.dynamic = word.substituted = True
                continue
            if ch in "*?[":
                word.glob = True
            out.append(ch)
            self.i += 1
        word.text = "".join(out)
        return word

    def double_quoted(self, word: Word, out: list[str]) -> None:
        s = self.s
        self.i += 1
        while self.i < len(s):
            ch = s[self.i]
            if ch == '"':
                self.i += 1
                return
            if ch == "\\" and self.i + 1 < len(s):
                nxt = s[self.i + 1]
                if nxt == "\n":
                    pass
                elif nxt in '$`"\\':
                    out.append(nxt)
                else:
                    out.append("\\" + nxt)
                self.i += 2
            elif ch == "$":
                self.dollar(word, out)
            elif ch == "`":
                self.i += 1
                inner = self.backtick()
                self.nested(inner)
                out.append(f"`{inner}`")
                word.dynamic = word.substituted = True
            else:
                out.append(ch)
                self.i += 1
        raise self.error("unterminated double quote")
