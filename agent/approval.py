"""Which ``bash`` commands need a person's approval before they run (``sandbox.approval``).

The sandbox already keeps a command away from the host and other people's data; approval is about the
person's own work the agent *can* reach — their workspace, their repositories through a token, a remote
server through the network. A model that misread a request should not ``git push --force`` or ``rm -rf``
the workspace without someone saying yes. The check is a list of regular expressions, on purpose: it is
predictable, the same for everyone, and a team can read and extend it (``sandbox.risky_patterns``).
It is not a security boundary (a determined model can obfuscate a command); the sandbox is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

#: (pattern, what makes it risky) — searched case-insensitively anywhere in the command line.
BUILT_IN_RISKY: tuple[tuple[str, str], ...] = (
    (r"\brm\s+(-[a-z]*[rf][a-z]*\s+|--recursive\b|--force\b)", "deletes files recursively or by force"),
    (r"\bgit\s+push\b", "pushes to a remote repository"),
    (r"\bgit\s+(reset\s+--hard|clean\s+-[a-z]*f)", "throws away work in a repository"),
    (r"\b(curl|wget)\b[^|;&]*\|\s*(sudo\s+)?(ba|z|da|k)?sh\b", "runs a downloaded script"),
    (
        r"\b(pip3?|uv\s+pip|npm|pnpm|yarn|gem|cargo|go|apt(-get)?|apk|dnf|yum|brew)\s+(install|add|i)\b",
        "installs packages",
    ),
    (
        r"\bcurl\b.*(\s-X\s*(POST|PUT|PATCH|DELETE)\b|\s(-d|--data[a-z-]*|-F|--form|-T|--upload-file)\b)",
        "sends data over the network",
    ),
    (r"\b(wget)\b.*--post-(data|file)\b", "sends data over the network"),
    (r"\b(scp|rsync|sftp|ssh)\s", "connects to another machine"),
    (r"\b(sudo|su|doas|chown|chmod\s+-R)\b", "changes privileges or ownership"),
    (r"\b(mkfs|dd\s+if=|shred|truncate\s+-s\s*0)\b", "overwrites data"),
    (
        r"\b(kubectl|helm|terraform|aws|gcloud|az)\s+(apply|delete|destroy|rm|deploy|create)\b",
        "changes cloud or cluster resources",
    ),
    (
        r"\bgh\s+(pr\s+(merge|close)|issue\s+close|release\s+create|repo\s+delete)\b",
        "changes a GitHub repository",
    ),
)

Mode = Literal["never", "risky", "always"]


class RiskPolicy:
    """Says why a command needs approval, or None when it may run at once."""

    def __init__(self, mode: Mode = "risky", patterns: Sequence[str] = ()) -> None:
        self.mode = mode
        rules = [(p, "matches a pattern this bot's operator marked risky") for p in patterns] or list(
            BUILT_IN_RISKY
        )
        self._rules = [(re.compile(p, re.IGNORECASE), why) for p, why in rules]

    def with_mode(self, mode: Mode) -> RiskPolicy:
        """The same rules under another mode (a chat's own ``/approval`` setting)."""
        policy = RiskPolicy.__new__(RiskPolicy)
        policy.mode, policy._rules = mode, self._rules
        return policy

    def reason(self, command: str) -> str | None:
        if self.mode == "never":
            return None
        if self.mode == "always":
            return "every command needs approval on this bot"
        for pattern, why in self._rules:
            if pattern.search(command):
                return why
        return None
