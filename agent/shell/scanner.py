"""Moving through a command line: balanced parentheses, backticks, braces and double quotes."""

from __future__ import annotations

from agent.shell.model import Redirect, Script, ShellSyntaxError


class Scanner:
    """Position in the text and the balanced pieces (parentheses, backticks, braces) inside it."""

    def __init__(self, text: str, depth: int, sink: Script) -> None:
        self.s = text
        self.i = 0
        self.depth = depth
        self.sink = sink  # where commands of nested substitutions go
        self.heredocs: list[tuple[Redirect, str, bool, bool]] = []  # (redirect, delimiter, strip, quoted)

    def error(self, what: str) -> ShellSyntaxError:
        return ShellSyntaxError(f"{what} at character {self.i + 1}")

    def balanced_parens(self) -> str:
        """Text up to the ``)`` closing an already opened ``(``, respecting quotes and nesting."""
        start, level = self.i, 1
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch == "\\":
                self.i += 2
                continue
            if ch == "'":
                end = self.s.find("'", self.i + 1)
                if end < 0:
                    raise self.error("unterminated single quote")
                self.i = end + 1
                continue
            if ch == '"':
                self.skip_double_quoted()
                continue
            if ch == "`":
                self.i += 1
                self.backtick()
                continue
            if ch == "#" and (self.i == start or self.s[self.i - 1] in " \t\n;&|("):
                end = self.s.find("\n", self.i)
                self.i = len(self.s) if end < 0 else end
                continue
            if ch == "(":
                level += 1
            elif ch == ")":
                level -= 1
                if level == 0:
                    self.i += 1
                    return self.s[start : self.i - 1]
            self.i += 1
        raise self.error("unbalanced parenthesis")

    def arithmetic(self, opening: str) -> str:
        """The body of an arithmetic ``((…))`` or ``$((…))`` whose ``opening`` was just read: data, but it
        may hide a ``$(…)``, so the caller scans it. Only parentheses count: ``((`` opened two levels."""
        level = 2
        start = self.i
        while self.i < len(self.s) and level:
            level += {"(": 1, ")": -1}.get(self.s[self.i], 0)
            self.i += 1
        if level:
            raise self.error(f"unterminated {opening}")
        return self.s[start : self.i - 2]

    def skip_double_quoted(self) -> None:
        self.i += 1
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch == "\\":
                self.i += 2
            elif ch == '"':
                self.i += 1
                return
            elif self.s.startswith("$(", self.i):
                self.i += 2
                self.balanced_parens()
            elif ch == "`":
                self.i += 1
                self.backtick()
            else:
                self.i += 1
        raise self.error("unterminated double quote")

    def backtick(self) -> str:
        """The command inside an already opened backtick, with its backslash escapes removed."""
        out: list[str] = []
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch == "\\" and self.i + 1 < len(self.s):
                nxt = self.s[self.i + 1]
                out.append(nxt if nxt in "$`\\" else "\\" + nxt)
                self.i += 2
            elif ch == "`":
                self.i += 1
                return "".join(out)
            else:
                out.append(ch)
                self.i += 1
        raise self.error("unterminated backtick")

    def braced(self) -> str:
        """``${…}`` after its ``${``: the text up to the matching ``}``."""
        start, level = self.i, 1
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch == "\\":
                self.i += 2
                continue
            if ch == "{":
                level += 1
            elif ch == "}":
                level -= 1
                if level == 0:
                    self.i += 1
                    return self.s[start : self.i - 1]
            self.i += 1
        raise self.error("unterminated ${")

    # --- defined by the lexer, declared here so the scanning helpers can call it ------------------
    def nested(self, inner: str) -> None:
        raise NotImplementedError  # Lexer

    def scan_substitutions(self, text: str) -> None:
        raise NotImplementedError  # Lexer
