"""What every judgement shares: the findings, what the line downloaded or wrote, paths and redirects.

The rule mixins (files, vcs, network, shells, interpreters, data) call each other through the
methods declared here; :class:`agent.risk.judge.Judge` combines them."""

from __future__ import annotations

import re

from agent.risk.vocabulary import (
    CODE_FILES,
    CODE_VARIABLES,
    DATA_FILE,
    DEVICE,
    HARMLESS_DEVICE,
    OTHERS_ENVIRON,
    OWN_ENVIRON,
    Finding,
    base_name,
)
from agent.shell import (
    MAX_DEPTH,
    TRUNCATING_REDIRECTS,
    WRITE_REDIRECTS,
    Script,
    ShellSyntaxError,
    Simple,
    Word,
    parse,
)


class JudgeCore:
    def __init__(self, script: Script, depth: int = 0, *, xargs: bool = False) -> None:
        self.script = script
        self.depth = depth
        #: The whole line runs once per input line of ``xargs`` (``xargs sh -c '…'``): arguments are unknown.
        self.xargs = xargs
        self.findings: list[Finding] = []
        self.downloaded: set[str] = set()  # file names this line downloads (then running one is risky)
        #: file name → the text this line wrote into it (a here-document, echo/printf), None if unknown
        self.written: dict[str, str | None] = {}

    def add(self, key: str | None, why: str, *, blocked: bool = False) -> None:
        self.findings.append(Finding(key, why, blocked))

    def run(self) -> list[Finding]:
        self.fork_bombs()
        for cmd in self.script.commands:
            self.paths(cmd)
            self.redirects(cmd)
            for assignment in cmd.assignments:
                self.code_variable(assignment)
            if cmd.words:
                self.command(cmd, list(cmd.words), xargs=self.xargs)
        return self.findings

    def nested_text(self, text: str, key: str | None, *, xargs: bool = False) -> None:
        """A command string the line runs (``bash -c``, ``eval``, a here-document fed to a shell)."""
        if self.depth + 1 > MAX_DEPTH:
            self.add(None, "nests shells too deeply to be read reliably")
            return
        try:
            script = parse(text, depth=self.depth + 1)
        except ShellSyntaxError as exc:
            self.add(None, f"runs a shell command string that could not be read reliably ({exc})")
            return
        inner = type(self)(script, self.depth + 1, xargs=xargs or self.xargs)
        inner.downloaded, inner.written = self.downloaded, self.written
        self.findings.extend(inner.run())

    def code_variable(self, assignment: str) -> None:
        """``LD_PRELOAD=…``, ``GIT_SSH_COMMAND=…``: a variable that makes programs run other code."""
        name = re.split(r"\+?=|\[", assignment, maxsplit=1)[0]
        if "=" in assignment and name in CODE_VARIABLES:
            self.add(f"{name}=", f"sets {name}, which makes programs run other code")

    def fork_bombs(self) -> None:
        for name, indexes in self.script.functions.items():
            calls = [self.script.commands[n] for n in indexes]
            if any(
                c.words and c.words[0].text == name and (c.piped_in or c.piped_out or c.background)
                for c in calls
            ):
                self.add(
                    None, f"defines a fork bomb (the function {name} starts copies of itself)", blocked=True
                )

    def paths(self, cmd: Simple) -> None:
        """Paths anywhere in the command: other processes' environments, the machine's disks."""
        words = [*cmd.words, *(r.target for r in cmd.redirects if r.target is not None)]
        for w in words:
            if OTHERS_ENVIRON.search(w.text):
                self.add(None, "reads another process's environment (where the service keeps its secrets)", blocked=True)  # fmt: skip
            elif OWN_ENVIRON.search(w.text):
                self.add(
                    "/proc/self/environ", "reads the process environment, where this run's credentials are"
                )

    def redirects(self, cmd: Simple) -> None:
        prog = base_name(cmd.words[0].text) if cmd.words else ""
        for r in cmd.redirects:
            if r.target is None or r.op not in WRITE_REDIRECTS:
                continue
            target = r.target.text
            if HARMLESS_DEVICE.match(target) or r.op in (">&",):
                continue
            if DEVICE.match(target):
                self.add(None, f"writes straight onto the disk device {target}", blocked=True)
            elif CODE_FILES.search(target):
                self.add(
                    f"write {target}", f"writes to {target}, a file that runs code when something starts"
                )
            elif r.op in TRUNCATING_REDIRECTS and not cmd.compound and self.truncates_only(cmd):
                self.add(f"{prog or ''} > file".strip(), f"empties the file {target}")
            elif r.op in TRUNCATING_REDIRECTS and DATA_FILE.search(target):
                self.add(f"{prog} > {target}", f"overwrites the database file {target}")
            elif r.target.dynamic and r.op in TRUNCATING_REDIRECTS:
                self.add(
                    f"{prog} > file", f"overwrites a file whose name is only known when it runs ({target})"
                )
            if prog in ("curl", "wget") and r.op in (">", ">|", "&>"):
                self.downloaded.add(base_name(target))
            elif r.op in (">", ">|", "&>", ">>", "&>>"):
                self.wrote(base_name(target), self.output_text(cmd), append=r.op in (">>", "&>>"))

    def wrote(self, name: str, text: str | None, *, append: bool) -> None:
        before = self.written.get(name, "") if append else ""
        self.written[name] = None if text is None or before is None else before + text

    def output_text(self, cmd: Simple) -> str | None:
        """What a command writes to its standard output, when this line spells it out; None otherwise."""
        bodies = [r.body for r in cmd.redirects if r.body is not None]
        prog = base_name(cmd.words[0].text) if cmd.words else ""
        if prog == "cat" and len(cmd.words) == 1 and bodies:
            return bodies[-1]
        if prog in ("echo", "printf") and not any(w.dynamic for w in cmd.words):
            return " ".join(w.text for w in cmd.words[1:] if not w.text.startswith("-")) + "\n"
        if not cmd.words:
            return ""
        return None

    @staticmethod
    def truncates_only(cmd: Simple) -> bool:
        """``> f``, ``: > f``, ``true > f``, ``echo -n > f``, ``printf '' > f``, ``cat /dev/null > f``."""
        if not cmd.words:
            return True
        prog, args = base_name(cmd.words[0].text), [w.text for w in cmd.words[1:]]
        if prog in (":", "true", "false"):
            return True
        if prog == "echo":
            return all(a in ("", "-n", "-e", "-ne", "-en", "-E") for a in args)
        if prog == "printf":
            return all(a == "" for a in args)
        return prog == "cat" and args == ["/dev/null"]

    # --- defined by the rule mixins, declared here so each mixin can call the others ---------------
    def command(self, cmd: Simple, words: list[Word], *, xargs: bool) -> None:
        raise NotImplementedError  # agent.risk.judge.Judge

    def script_file(self, prog: str, script: Word, *, shell: bool) -> None:
        raise NotImplementedError  # ShellRules

    def stdin_code(self, cmd: Simple) -> tuple[str | None, bool]:
        raise NotImplementedError  # ShellRules

    def stdin_program(self, cmd: Simple, prog: str) -> None:
        raise NotImplementedError  # ShellRules

    def fed_by_literal(self, cmd: Simple) -> bool:
        raise NotImplementedError  # ShellRules

    def inline_code(self, prog: str, flag: str, code: str, dynamic: bool) -> None:
        raise NotImplementedError  # InterpreterRules

    def package(self, prog: str, args: list[Word]) -> None:
        raise NotImplementedError  # DataRules
