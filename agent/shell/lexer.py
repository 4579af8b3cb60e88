"""Tokens of a command line, and :func:`parse`, which turns them into a :class:`Script`."""

from __future__ import annotations

import re

from agent.shell.grammar import Parser
from agent.shell.model import (
    MAX_DEPTH,
    MAX_LENGTH,
    REDIRECTS,
    Redirect,
    Script,
    ShellSyntaxError,
    Token,
    Word,
)
from agent.shell.words import WordReader


class Lexer(WordReader):
    """The tokens of a command line (words, operators, redirections with here-document bodies)."""

    def nested(self, inner: str) -> None:
        if self.depth + 1 > MAX_DEPTH:
            raise self.error("command substitutions nested too deeply")
        sub = parse(inner, depth=self.depth + 1)
        offset = len(self.sink.commands)
        for cmd in sub.commands:
            cmd.nested = True
            if cmd.fed_by is not None:
                cmd.fed_by += offset
            self.sink.commands.append(cmd)
        for name, indexes in sub.functions.items():
            self.sink.functions[name] = [offset + n for n in indexes]

    def scan_substitutions(self, text: str) -> None:
        """Run the ``$(…)`` and backticks inside text that is otherwise data (here-docs, $((…)), ${…})."""
        inner = Lexer(text, self.depth, self.sink)
        while inner.i < len(text):
            ch = text[inner.i]
            if ch == "\\":
                inner.i += 2
            elif text.startswith("$(", inner.i) and not text.startswith("$((", inner.i):
                inner.i += 2
                inner.nested(inner.balanced_parens())
            elif ch == "`":
                inner.i += 1
                inner.nested(inner.backtick())
            else:
                inner.i += 1

    def read_heredocs(self) -> None:
        """After a newline: the bodies of the here-documents opened on the line just ended."""
        for redirect, delimiter, strip, quoted in self.heredocs:
            lines: list[str] = []
            while True:
                if self.i >= len(self.s):
                    raise self.error(f"here-document not closed by {delimiter!r}")
                end = self.s.find("\n", self.i)
                line = self.s[self.i :] if end < 0 else self.s[self.i : end]
                self.i = len(self.s) if end < 0 else end + 1
                if strip:
                    line = line.lstrip("\t")
                if line == delimiter:
                    break
                lines.append(line)
            redirect.body = "\n".join(lines) + "\n"
            if not quoted:
                self.scan_substitutions(redirect.body)
        self.heredocs = []

    def tokens(self) -> list[Token]:
        s = self.s
        out: list[Token] = []
        while self.i < len(s):
            ch = s[self.i]
            if ch in " \t":
                self.i += 1
            elif ch == "\\" and s.startswith("\\\n", self.i):
                self.i += 2
            elif ch == "#":
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            elif ch == "\n":
                self.i += 1
                out.append(Token("op", "\n"))
                self.read_heredocs()
            elif s.startswith("((", self.i) and (
                not out or out[-1].kind == "op" or (out[-1].word is not None and out[-1].word.text == "for")
            ):
                self.i += 2  # an arithmetic command: data, but it may hide a $(…)
                self.scan_substitutions(self.arithmetic("(("))
                out.append(Token("word", word=Word("((…))", dynamic=True)))
            elif ch in "<>" and s.startswith("(", self.i + 1):
                out.append(Token("word", word=self.word()))
            elif ch in "<>" or (ch == "&" and s.startswith(">", self.i + 1)):
                out.append(self.redirect(None))
            elif ch in ";&|()":
                for op in (";;&", ";;", ";&", "&&", "||", "|&", ";", "&", "|", "(", ")"):
                    if s.startswith(op, self.i):
                        self.i += len(op)
                        out.append(Token("op", op))
                        break
            else:
                word = self.word()
                if (
                    self.i < len(s)
                    and s[self.i] in "<>"
                    and re.fullmatch(r"[0-9]+|\{[A-Za-z_]\w*\}", word.text)
                ):
                    out.append(self.redirect(word.text))  # 2>err.log, {fd}>file
                else:
                    out.append(Token("word", word=word))
        if self.heredocs:
            raise self.error("here-document without its body")
        return out

    def redirect(self, fd: str | None) -> Token:
        s = self.s
        op = next(o for o in REDIRECTS if s.startswith(o, self.i))
        self.i += len(op)
        while self.i < len(s) and s[self.i] in " \t":
            self.i += 1
        if self.i >= len(s) or s[self.i] in "\n;&|()<>":
            if op in (">&", "<&") and s.startswith("-", self.i):
                self.i += 1
                return Token("redirect", redirect=Redirect(op, Word("-")))
            raise self.error(f"redirection {op} without a target")
        redirect = Redirect(op)
        if op in ("<<", "<<-"):
            raw_start = self.i
            target = self.word()
            quoted = any(q in s[raw_start : self.i] for q in "'\"\\")
            redirect.target = target
            self.heredocs.append((redirect, target.text, op == "<<-", quoted))
        elif op == "<<<":
            redirect.target = self.word()
            redirect.body = redirect.target.text + "\n"
        else:
            redirect.target = self.word()
        return Token("redirect", redirect=redirect)


def parse(text: str, *, depth: int = 0) -> Script:
    """Every simple command ``text`` would run; raises :class:`ShellSyntaxError` when unsure."""
    if len(text) > MAX_LENGTH:
        raise ShellSyntaxError(f"longer than {MAX_LENGTH} characters")
    if "\x00" in text:
        raise ShellSyntaxError("contains a NUL character")
    script = Script()
    tokens = Lexer(text, depth, script).tokens()
    Parser(script).run(tokens)
    return script
