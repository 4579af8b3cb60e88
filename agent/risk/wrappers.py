"""Programs that run other programs (sudo, env, timeout, xargs, …): strip them and judge what they run."""

from __future__ import annotations

from agent.risk.core import JudgeCore
from agent.risk.vocabulary import PRIVILEGE, base_name, options
from agent.shell import Simple, Word


class WrapperRules(JudgeCore):
    def unwrap(self, cmd: Simple, words: list[Word]) -> tuple[list[Word], bool] | None:
        """Strip sudo/env/timeout/nice/nohup/xargs/… and judge the program they run."""
        via_xargs = False
        while words:
            prog = base_name(words[0].text)
            rest = words[1:]
            if words[0].dynamic:
                return words, via_xargs
            if prog in PRIVILEGE:
                self.add(prog, f"runs as another user ({prog})")
                if prog == "su":
                    code = options(rest, "cgsl", ("--command", "--shell", "--group")).values(
                        "-c", "--command"
                    )
                    for text in code:
                        self.nested_text(text, None)
                    return None
                opts_letters = "ugpCDhrtTU" if prog == "sudo" else "uC"
                words = self.after_options(rest, opts_letters, ("--user", "--group", "--chdir", "--prompt"))
            elif prog == "env":
                i = 0
                split: str | None = None
                while i < len(rest):
                    t = rest[i].text
                    if t in ("-u", "--unset", "-C", "--chdir"):
                        i += 2
                    elif t in ("-S", "--split-string"):
                        split = rest[i + 1].text if i + 1 < len(rest) else ""
                        i += 2
                        break
                    elif t.startswith("--split-string=") or (t.startswith("-S") and len(t) > 2):
                        split = t.split("=", 1)[1] if t.startswith("--") else t[2:]
                        i += 1
                        break
                    elif t.startswith("-") or "=" in t:
                        self.code_variable(t)
                        i += 1
                    else:
                        break
                if split is not None:
                    self.nested_text(" ".join([split, *(w.text for w in rest[i:])]), None)
                    return None
                if i >= len(rest):
                    return (
                        [],
                        via_xargs,
                    )  # env alone prints the environment (checked by the caller's pipe rule)
                words = rest[i:]
            elif prog in (
                "nohup",
                "setsid",
                "command",
                "builtin",
                "exec",
                "unbuffer",
                "chronic",
                "caffeinate",
            ):
                if prog == "command" and rest and rest[0].text in ("-v", "-V"):
                    return None
                words = self.after_options(rest, "a" if prog == "exec" else "", ())
            elif prog == "timeout":
                words = self.after_options(rest, "sk", ("--signal", "--kill-after"))[1:]
            elif prog == "nice":
                words = self.after_options(rest, "n", ("--adjustment",))
            elif prog == "ionice":
                words = self.after_options(rest, "cnp", ("--class", "--classdata", "--pid"))
            elif prog == "stdbuf":
                words = self.after_options(rest, "ioe", ("--input", "--output", "--error"))
            elif prog == "time":
                words = self.after_options(rest, "fo", ("--format", "--output"))
            elif prog == "watch":
                remaining = self.after_options(rest, "nd", ("--interval", "--differences"))
                self.nested_text(" ".join(w.text for w in remaining), None)
                return None
            elif prog == "xargs":
                words = self.after_options(
                    rest, "aEeIiLlnPsd", ("--arg-file", "--eof", "--replace", "--max-lines", "--max-args",
                                          "--max-procs", "--max-chars", "--delimiter", "--process-slot-var"),
                )  # fmt: skip
                via_xargs = True
                if not words:
                    return None  # xargs alone runs echo
                words = [*words, Word("{xargs input}", dynamic=True)]  # its arguments come from stdin
            elif prog == "flock":
                words = self.after_options(rest, "wEc", ("--timeout", "--conflict-exit-code", "--command"))[
                    1:
                ]
            else:
                return words, via_xargs
        return words, via_xargs

    @staticmethod
    def after_options(words: list[Word], short_values: str, long_values: tuple[str, ...]) -> list[Word]:
        """The words after a wrapper's own options (which stop at the first non-option word)."""
        i = 0
        while i < len(words):
            t = words[i].text
            if t == "--":
                return words[i + 1 :]
            if t.startswith("--"):
                i += 2 if t in long_values else 1
            elif t.startswith("-") and len(t) > 1:
                i += 2 if t[-1] in short_values and len(t) == 2 else 1
            else:
                return words[i:]
        return []
