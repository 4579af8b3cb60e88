"""Reading a ``bash`` command line into the simple commands it would run, for the approval check.

Why a reader of our own: judging a command by regular expressions over its text misses most of what
matters (``find . -delete``, ``"r""m" -rf x``, ``base64 -d | sh``, ``$(…)`` inside a URL), and the one
bash parser on PyPI (``bashlex``) stops at ``[[ … ]]``, ``$(( … ))``, ``case`` and ``time``, which models
write all the time. This module is a careful lexer plus a flat parser: it removes quotes the way bash
does (``'…'``, ``"…"``, ``$'…'``, backslashes), follows ``;`` ``&&`` ``||`` ``|`` ``&`` and newlines,
descends into ``$(…)``, backticks, ``<(…)``/``>(…)``, subshells, braces, ``if``/``for``/``while``/``case``
bodies and function bodies, and keeps redirections (with here-document bodies) beside each command.

It does not expand anything: a word built from ``$VAR`` or ``$(…)`` is marked ``dynamic`` (its value is
only known when it runs), and the judge treats that as unknown, never as harmless. Anything it cannot
read with confidence raises :class:`ShellSyntaxError`; the caller treats that as risky.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_DEPTH = 6  # nested $(…) / bash -c levels; deeper is refused as unreadable
MAX_LENGTH = 20_000  # characters; a longer command line is refused as unreadable

#: Reserved words that only open or close a compound command; the command after them is read normally.
SKIP_WORDS = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}"})
SKIP_WORDS |= {"time", "coproc", "esac"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
SEPARATORS = frozenset({";", "&", "&&", "||", "|", "|&", "\n", ";;", ";&", ";;&"})
REDIRECTS = ("&>>", "<<<", "<<-", "&>", ">>", ">|", ">&", "<&", "<>", "<<", ">", "<")
WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
TRUNCATING_REDIRECTS = frozenset({">", ">|", "&>"})


class ShellSyntaxError(ValueError):
    """The command line could not be read reliably (unbalanced quotes, an unknown construct …)."""


@dataclass(slots=True)
class Word:
    """One word after quote removal. Expansions are kept as written (``$HOME``, ``$(…)``)."""

    text: str
    #: Its value is only known at run time ($VAR, ${…}, $(…), `…`, $((…))).
    dynamic: bool = False
    #: It contains a command substitution ($(…), `…`, <(…), >(…)).
    substituted: bool = False
    #: It contains an unquoted *, ? or [ (a pattern the shell expands into file names).
    glob: bool = False
    #: Names of the variables it expands.
    variables: list[str] = field(default_factory=list)
    #: A process substitution ``<(…)`` / ``>(…)`` and nothing else.
    process: bool = False


@dataclass(slots=True)
class Redirect:
    op: str
    target: Word | None = None
    #: A here-document's or here-string's text (what the command reads on its standard input).
    body: str | None = None


@dataclass(slots=True)
class Simple:
    """One simple command: its words (program first), assignments and redirections."""

    words: list[Word] = field(default_factory=list)
    assignments: list[str] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    #: Its standard input is the previous command's output (``a | b``: set on b).
    piped_in: bool = False
    piped_out: bool = False
    background: bool = False
    #: Redirections of a whole compound command (``{ …; } > f``, ``done < f``), not of one program.
    compound: bool = False
    #: Runs inside a command substitution or process substitution of another command.
    nested: bool = False
    #: Index (in :attr:`Script.commands`) of the command whose stdin pipe feeds this one, if any.
    fed_by: int | None = None

    @property
    def argv(self) -> list[str]:
        return [w.text for w in self.words]


@dataclass(slots=True)
class Script:
    """Every simple command a command line would run, in reading order, nested ones included."""

    commands: list[Simple] = field(default_factory=list)
    #: Function name → the indexes of the commands of its body.
    functions: dict[str, list[int]] = field(default_factory=dict)


# --- lexing ----------------------------------------------------------------------------------------
@dataclass(slots=True)
class _Token:
    kind: str  # word | op | redirect
    value: str = ""
    word: Word | None = None
    redirect: Redirect | None = None


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


class _Lexer:
    def __init__(self, text: str, depth: int, sink: Script) -> None:
        self.s = text
        self.i = 0
        self.depth = depth
        self.sink = sink  # where commands of nested substitutions go
        self.heredocs: list[tuple[Redirect, str, bool, bool]] = []  # (redirect, delimiter, strip, quoted)

    def error(self, what: str) -> ShellSyntaxError:
        return ShellSyntaxError(f"{what} at character {self.i + 1}")

    # Substitutions are parsed as scripts of their own; their commands join the sink, marked nested.
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
        inner = _Lexer(text, self.depth, self.sink)
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

    def dollar(self, word: Word, out: list[str]) -> None:
        """An expansion starting at ``$``: appended as written, the word marked dynamic."""
        s, i = self.s, self.i
        if s.startswith("$((", i):
            self.i += 3
            level = 2
            start = self.i
            while self.i < len(s) and level:
                level += {"(": 1, ")": -1}.get(s[self.i], 0)
                self.i += 1
            if level:
                raise self.error("unterminated $((")
            body = s[start : self.i - 2]
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

    def tokens(self) -> list[_Token]:
        s = self.s
        out: list[_Token] = []
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
                out.append(_Token("op", "\n"))
                self.read_heredocs()
            elif s.startswith("((", self.i) and (
                not out or out[-1].kind == "op" or (out[-1].word is not None and out[-1].word.text == "for")
            ):
                self.i += 2  # an arithmetic command: data, but it may hide a $(…)
                level = 2
                start = self.i
                while self.i < len(s) and level:
                    level += {"(": 1, ")": -1}.get(s[self.i], 0)
                    self.i += 1
                if level:
                    raise self.error("unterminated ((")
                self.scan_substitutions(s[start : self.i - 2])
                out.append(_Token("word", word=Word("((…))", dynamic=True)))
            elif ch in "<>" and s.startswith("(", self.i + 1):
                out.append(_Token("word", word=self.word()))
            elif ch in "<>" or (ch == "&" and s.startswith(">", self.i + 1)):
                out.append(self.redirect(None))
            elif ch in ";&|()":
                for op in (";;&", ";;", ";&", "&&", "||", "|&", ";", "&", "|", "(", ")"):
                    if s.startswith(op, self.i):
                        self.i += len(op)
                        out.append(_Token("op", op))
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
                    out.append(_Token("word", word=word))
        if self.heredocs:
            raise self.error("here-document without its body")
        return out

    def redirect(self, fd: str | None) -> _Token:
        s = self.s
        op = next(o for o in REDIRECTS if s.startswith(o, self.i))
        self.i += len(op)
        while self.i < len(s) and s[self.i] in " \t":
            self.i += 1
        if self.i >= len(s) or s[self.i] in "\n;&|()<>":
            if op in (">&", "<&") and s.startswith("-", self.i):
                self.i += 1
                return _Token("redirect", redirect=Redirect(op, Word("-")))
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
        return _Token("redirect", redirect=redirect)


# --- parsing ---------------------------------------------------------------------------------------
def parse(text: str, *, depth: int = 0) -> Script:
    """Every simple command ``text`` would run; raises :class:`ShellSyntaxError` when unsure."""
    if len(text) > MAX_LENGTH:
        raise ShellSyntaxError(f"longer than {MAX_LENGTH} characters")
    if "\x00" in text:
        raise ShellSyntaxError("contains a NUL character")
    script = Script()
    tokens = _Lexer(text, depth, script).tokens()
    _Parser(script).run(tokens)
    return script


class _Parser:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.current = Simple()
        self.pipe_from: int | None = None  # index of the command piping into the next one
        self.stack: list[tuple[str, str | None, int]] = []  # (opener, function name, first index)
        self.skip_until: str | None = None  # inside [[ … ]] or a for/select/case header
        self.case_patterns = 0  # >0: reading case patterns up to ")"
        self.function_pending: str | None = None

    def at_command_start(self) -> bool:
        return not self.current.words and not self.current.assignments and not self.current.redirects

    def finish(self, op: str | None) -> None:
        cmd = self.current
        if cmd.words or cmd.assignments or cmd.redirects:
            if self.pipe_from is not None:
                cmd.piped_in, cmd.fed_by = True, self.pipe_from
            self.script.commands.append(cmd)
            index = len(self.script.commands) - 1
            cmd.piped_out = op in ("|", "|&")
            cmd.background = op == "&"
            self.pipe_from = index if cmd.piped_out else None
        elif op not in ("|", "|&"):
            self.pipe_from = None
        self.current = Simple()

    def run(self, tokens: list[_Token]) -> None:
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            i += 1
            if self.skip_until is not None:
                text = tok.word.text if tok.kind == "word" and tok.word is not None else None
                if self.skip_until == ";" and tok.kind == "op" and tok.value in (";", "\n"):
                    self.skip_until = None
                elif text == self.skip_until == "in":
                    self.skip_until = None
                    self.case_patterns += 1
                elif text == self.skip_until == "]]":
                    self.skip_until = None
                continue
            if self.case_patterns and self.at_command_start():
                if tok.kind == "op" and tok.value == ")":
                    self.case_patterns -= 1
                    self.stack.append(("case", None, len(self.script.commands)))
                    continue
                if tok.kind == "word" and tok.word and tok.word.text == "esac":
                    self.case_patterns -= 1
                    continue
                continue  # the pattern's words, | alternatives, newlines
            if tok.kind == "redirect":
                assert tok.redirect is not None
                self.current.redirects.append(tok.redirect)
                continue
            if tok.kind == "op":
                self.operator(tok.value, tokens, i)
                continue
            word = tok.word
            assert word is not None
            if self.at_command_start():
                if word.text in SKIP_WORDS and not word.dynamic:
                    if word.text == "{":
                        self.stack.append(("{", self.function_pending, len(self.script.commands)))
                        self.function_pending = None
                    elif word.text in ("}", "fi", "done"):
                        self.close("{" if word.text == "}" else None, tokens, i)
                    elif word.text == "esac":
                        if not self.stack or self.stack[-1][0] != "case":
                            raise ShellSyntaxError("'esac' without its case")
                        self.stack.pop()
                        self.close(None, tokens, i)
                    continue
                if word.text == "[[":
                    self.skip_until = "]]"
                    continue
                if word.text in ("for", "select"):
                    self.skip_until = ";"
                    # for x in a b; do … / for ((…)); do … — the header runs nothing but its $(…)
                    continue
                if word.text == "case":
                    self.skip_until = "in"
                    continue
                name = tokens[i].word if word.text == "function" and i < len(tokens) else None
                if name is not None:
                    self.function_pending = name.text
                    i += 1
                    if i + 1 < len(tokens) and tokens[i].value == "(" and tokens[i + 1].value == ")":
                        i += 2
                    continue
                if word.text == "((…))":
                    continue
            if not self.current.words and ASSIGNMENT.match(word.text) and not word.process:
                self.current.assignments.append(word.text)
                continue
            self.current.words.append(word)
        self.finish(None)
        if self.stack or self.skip_until is not None or self.case_patterns or self.function_pending:
            raise ShellSyntaxError("a compound command (braces, parentheses, case, [[ or for) is not closed")

    def operator(self, op: str, tokens: list[_Token], i: int) -> None:
        if op == "(":
            cmd = self.current
            if len(cmd.words) == 1 and not cmd.assignments and i < len(tokens) and tokens[i].value == ")":
                self.function_pending = cmd.words[0].text  # name() { …; }
                self.current = Simple()
                tokens[i] = _Token("op", "")  # the ")" of the header
                return
            if not self.at_command_start():
                raise ShellSyntaxError("unexpected '(' after a command's words")
            self.stack.append(("(", self.function_pending, len(self.script.commands)))
            self.function_pending = None
            return
        if op == "":
            return
        if op == ")":
            self.finish(None)
            self.close("(", tokens, i)
            return
        if op in (";;", ";&", ";;&"):
            self.finish(op)
            if not self.stack or self.stack[-1][0] != "case":
                raise ShellSyntaxError(f"'{op}' outside a case statement")
            self.stack.pop()
            self.case_patterns += 1
            return
        self.finish(op)

    def close(self, opener: str | None, tokens: list[_Token], i: int) -> None:
        """The end of a compound command; what follows it may be its redirections."""
        if opener is not None:
            if not self.stack or self.stack[-1][0] != opener:
                raise ShellSyntaxError(f"unbalanced '{')' if opener == '(' else '}'}'")
            _, name, first = self.stack.pop()
            if name is not None:
                self.script.functions[name] = list(range(first, len(self.script.commands)))
        if i < len(tokens) and tokens[i].kind == "redirect":
            self.current.compound = True
