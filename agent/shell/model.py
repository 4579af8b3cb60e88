"""The shapes a command line is read into: words, redirections, simple commands, the script."""

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


@dataclass(slots=True)
class Token:
    kind: str  # word | op | redirect
    value: str = ""
    word: Word | None = None
    redirect: Redirect | None = None
