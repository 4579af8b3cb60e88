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

The package: :mod:`~agent.shell.model` (the shapes), :mod:`~agent.shell.scanner` and
:mod:`~agent.shell.words` (reading words), :mod:`~agent.shell.lexer` (tokens and :func:`parse`),
:mod:`~agent.shell.grammar` (tokens to commands).
"""

from agent.shell.lexer import parse
from agent.shell.model import (
    MAX_DEPTH,
    TRUNCATING_REDIRECTS,
    WRITE_REDIRECTS,
    Redirect,
    Script,
    ShellSyntaxError,
    Simple,
    Word,
)

__all__ = [
    "MAX_DEPTH",
    "TRUNCATING_REDIRECTS",
    "WRITE_REDIRECTS",
    "Redirect",
    "Script",
    "ShellSyntaxError",
    "Simple",
    "Word",
    "parse",
]
