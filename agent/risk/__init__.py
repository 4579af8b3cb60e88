"""What each program in a command line does that a person should approve, or that nobody may allow.

Input is a :class:`~agent.shell.Script` (every simple command a line would run); output is a list
of :class:`Finding` — a sentence for the approval request ("deletes files recursively or by force"),
the *pattern* an "allow for this conversation" answer covers (``git push``, ``rm``), and whether it is
on the hard blocklist. Rules look at the program and its arguments after unwrapping ``sudo``/``env``/
``timeout``/``xargs``…; shell strings (``bash -c``, ``eval``, here-documents fed to a shell) are read
again as commands. Unknown is never harmless: a program whose name is computed at run time, a shell
fed by a pipe, SQL the check cannot see, all ask.

The rules are deliberately broad rather than clever: a question too many costs a tap, a question too
few can cost a repository.

The package: :mod:`agent.risk.judge` walks the line and sends each program to its rule; the rules live
by family in :mod:`~agent.risk.files`, :mod:`~agent.risk.vcs`, :mod:`~agent.risk.network`,
:mod:`~agent.risk.shells`, :mod:`~agent.risk.interpreters` and :mod:`~agent.risk.data`, over the
vocabulary in :mod:`~agent.risk.vocabulary`.
"""

from agent.risk.judge import judge
from agent.risk.vocabulary import Finding

__all__ = ["Finding", "judge"]
