"""Which ``bash`` commands need a person's approval (``sandbox.approval``), and which nobody may allow.

The sandbox keeps a command away from the host and other people's data; approval is about what the
agent *can* reach — the person's workspace, repositories behind a token, servers on the network — and
about a hostile sender talking the model into using it. So the check reads the command the way bash
would (``agent/shell/``) and judges each program and its arguments (``agent/risk/``)
instead of matching regular expressions over the text, which missed more than half of a list of plainly
destructive commands. A command line that cannot be read reliably is risky.

A short **blocklist** is refused in every mode, whoever approves (:data:`BLOCKLIST`): those commands
have no legitimate use in a chat and one of them ends the machine or leaks the service's secrets.
``sandbox.risky_patterns`` adds an operator's own regular expressions on top of the built-in judgement.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agent.risk import Finding, judge
from agent.shell import Script, ShellSyntaxError, parse

Mode = Literal["never", "risky", "always"]
log = logging.getLogger(__name__)

#: What is refused whatever the mode and whoever approves (docs/sandbox.md lists the same).
BLOCKLIST: tuple[str, ...] = (
    "rm -r of /, /*, a top-level system directory (/usr, /etc, …) or a home directory (~, $HOME); "
    "rm --no-preserve-root",
    "fork bombs (a function that starts copies of itself in a pipe or the background, :(){ :|:& };:)",
    "mkfs, wipefs, fdisk and friends on a /dev device; dd of=/dev/…; any write to a disk device "
    "(/dev/sd*, /dev/nvme*, /dev/mem …) by redirection or by a writing program (cp, tee, shred …)",
    "chmod/chown/chgrp -R on / or a top-level system directory",
    "reading another process's environment (/proc/<pid>/environ, /proc/*/environ)",
    "shutdown, reboot, halt, poweroff, init 0/6, systemctl poweroff/reboot",
)

#: When a command cannot be parsed, these coarse checks still refuse the blocklist's worst cases.
_UNREADABLE_BLOCKS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), why)
    for p, why in (
        (r"\brm\b[^;&|\n]*\s-[a-zA-Z]*[rR][^;&|\n]*\s/\*?(\s|$|[;&|])", "deletes the whole system"),
        (r"/dev/(sd|hd|vd|xvd|nvme|mmcblk|mem\b|kmem\b)", "writes to or reads a disk device"),
        (r"/proc/[^/\s]*/environ", "reads a process's environment"),
        (r"\bmkfs|\bwipefs\b", "formats a disk"),
        (r":\s*\(\s*\)\s*\{", "looks like a fork bomb"),
    )
)

#: Programs whose first word after the options names what they do (``git push``, ``npm install``).
_SUBCOMMANDS = frozenset(
    {"git", "gh", "npm", "pnpm", "yarn", "bun", "pip", "pip3", "uv", "cargo", "go", "apt", "apt-get",
     "kubectl", "helm", "terraform", "docker", "podman", "aws", "gcloud", "az", "systemctl", "brew",
     "conda", "poetry", "gem", "deno", "pipx"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judgement of one command line."""

    #: Refused outright (the blocklist): completes "this command …".
    blocked: str | None = None
    #: Needs approval: completes "this command …"; None: runs at once.
    reason: str | None = None
    #: What "allow for this conversation" covers (each finding's program and subcommand); empty: it
    #: cannot be allowed for a conversation (unreadable, computed at run time …), only approved once.
    patterns: tuple[str, ...] = ()


def command_pattern(words: Sequence[str]) -> str:
    """``git push``, ``npm install``, ``rm``: a command's program and, for multi-command tools, its verb."""
    if not words:
        return ""
    prog = words[0].rsplit("/", 1)[-1]
    if prog not in _SUBCOMMANDS:
        return prog
    rest = list(words[1:])
    while rest and rest[0].startswith("-"):
        takes_value = rest[0] in ("-C", "-c", "-R", "--repo", "--git-dir", "--work-tree", "-n", "--namespace")
        rest = rest[2:] if takes_value else rest[1:]
    return f"{prog} {rest[0]}" if rest else prog


def _summary(findings: Sequence[Finding]) -> str:
    whys = list(dict.fromkeys(f.why for f in findings))
    text = "; ".join(whys[:3]) + ("; and more" if len(whys) > 3 else "")
    return text if len(text) <= 190 else text[:189] + "…"


class RiskPolicy:
    """Judges commands under one approval mode, with an operator's extra patterns."""

    def __init__(self, mode: Mode = "risky", patterns: Sequence[str] = ()) -> None:
        self.mode = mode
        self._extra = [(p, re.compile(p, re.IGNORECASE)) for p in patterns]

    def with_mode(self, mode: Mode) -> RiskPolicy:
        """The same rules under another mode (a chat's own ``/approval`` setting)."""
        policy = RiskPolicy.__new__(RiskPolicy)
        policy.mode, policy._extra = mode, self._extra
        return policy

    @staticmethod
    def _unreadable(command: str, detail: str) -> list[Finding]:
        blocked = [
            Finding(None, why, blocked=True) for pattern, why in _UNREADABLE_BLOCKS if pattern.search(command)
        ]
        return [*blocked, Finding(None, f"could not be read reliably ({detail}), so it cannot be judged")]

    def judge(self, command: str) -> Verdict:
        script: Script | None
        try:
            script = parse(command)
            findings = judge(script)
        except (ShellSyntaxError, RecursionError) as exc:
            script, findings = None, self._unreadable(command, str(exc) or "nested too deeply")
        except Exception:  # a bug in the reader must fail closed (ask), never let a command through
            log.exception("the approval check could not judge a command; treating it as unreadable")
            script, findings = None, self._unreadable(command, "the check failed")
        blocked = [f for f in findings if f.blocked]
        if blocked:
            return Verdict(blocked=blocked[0].why)
        if self.mode == "never":
            return Verdict()
        findings += [
            Finding(f"pattern {raw}", "matches a pattern this bot's operator marked risky")
            for raw, pattern in self._extra
            if pattern.search(command)
        ]
        if self.mode == "always":
            keys: tuple[str, ...] = ()
            if script is not None and all(f.key is not None for f in findings):
                programs = {command_pattern(c.argv) for c in script.commands if c.words}
                keys = tuple(sorted(programs | {f.key for f in findings if f.key is not None}))
            return Verdict(reason="needs approval because every command does on this bot", patterns=keys)
        if not findings:
            return Verdict()
        keys = tuple(sorted({f.key for f in findings if f.key is not None}))
        return Verdict(
            reason=_summary(findings), patterns=keys if all(f.key is not None for f in findings) else ()
        )
