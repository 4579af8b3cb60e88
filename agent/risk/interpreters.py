"""Rules for language interpreters (python, node, perl, …) and text tools that run code (awk, sed)."""

from __future__ import annotations

import re

from agent.risk.core import JudgeCore
from agent.risk.vocabulary import CODE_DANGER, STDIN_PATHS, options
from agent.shell import Simple, Word


class InterpreterRules(JudgeCore):
    def python(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        i = 0
        while i < len(args):
            t = args[i].text
            if t == "-c" or (t.startswith("-c") and not t.startswith("--")):
                code = t[2:] or (args[i + 1].text if i + 1 < len(args) else "")
                dynamic = args[i + 1].dynamic if not t[2:] and i + 1 < len(args) else args[i].dynamic
                self.inline_code(prog, "-c", code, dynamic)
                return
            if t == "-m" or (t.startswith("-m") and not t.startswith("--")):
                module = t[2:] or (args[i + 1].text if i + 1 < len(args) else "")
                rest = args[i + 2 :] if not t[2:] else args[i + 1 :]
                if module == "pip":
                    self.package("pip", rest)
                elif module in ("http.server", "smtpd", "ftplib"):
                    self.add(f"{prog} -m {module}", f"serves or sends files over the network ({module})")
                return
            if t in ("-W", "-X", "--check-hash-based-pycs", "-Q"):
                i += 2
                continue
            if t == "-" or not t.startswith("-"):
                break
            i += 1
        script = args[i] if i < len(args) else None
        if script is not None and script.text not in STDIN_PATHS:
            self.script_file(prog, script, shell=False)
            return
        self.stdin_program(cmd, prog)

    def interpreter(self, cmd: Simple, prog: str, args: list[Word], flags: tuple[str, ...]) -> None:
        texts = [w.text for w in args]
        if prog == "deno":
            if texts[:1] == ["eval"]:
                self.inline_code(prog, "eval", " ".join(texts[1:]), any(w.dynamic for w in args[1:]))
            elif texts[:1] in (["run"], ["install"]) and any(t.startswith(("http:", "https:", "npm:", "jsr:")) for t in texts):  # fmt: skip
                self.add(f"deno {texts[0]}", "downloads and runs code from the internet")
            return
        for n, t in enumerate(texts):
            for flag in flags:
                if t == flag and n + 1 < len(texts):
                    self.inline_code(prog, flag, texts[n + 1], args[n + 1].dynamic)
                    return
                if (
                    t.startswith(flag)
                    and len(t) > len(flag)
                    and flag in ("-e", "-E", "-r")
                    and not t.startswith("--")
                ):
                    self.inline_code(prog, flag, t[len(flag) :], args[n].dynamic)
                    return
            if prog == "perl" and re.fullmatch(r"-[a-zA-Z]*[eE]", t) and n + 1 < len(texts):
                self.inline_code(prog, "-e", texts[n + 1], args[n + 1].dynamic)
                return
        positional = [w for w in args if not w.text.startswith("-")]
        if prog in ("bun", "R", "Rscript") and not positional:
            return
        if positional and positional[0].text not in STDIN_PATHS:
            self.script_file(prog, positional[0], shell=False)
            return
        self.stdin_program(cmd, prog)

    def inline_code(self, prog: str, flag: str, code: str, dynamic: bool) -> None:
        if dynamic:
            self.add(None, f"runs {prog} code that is only known when it runs")
            return
        found = CODE_DANGER.search(code)
        if found:
            self.add(f"{prog} {flag}", f"runs inline {prog} code that can delete files, run programs, read credentials or reach the network ({found.group().strip()})")  # fmt: skip

    def awk(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        program = next((w.text for w in options(args, "fvF", ()).args), "")
        if re.search(r"\bsystem\s*\(|\|\s*\"|\"\s*\|&?|getline|ENVIRON", program):
            self.add(prog, f"runs commands or reads the environment from inside an {prog} program")

    def sed(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        program = " ".join(w.text for w in args if not w.text.startswith("-"))
        if re.search(r"(^|[;}\s/])e(\s|$|;)|/e\b|\bw\s+/", program) and prog == "sed":
            self.add("sed e", "runs commands or writes files from a sed script")
