"""Rules for shells and shell builtins that run text as commands (``bash -c``, ``eval``, ``source``)."""

from __future__ import annotations

from agent.risk.core import JudgeCore
from agent.risk.vocabulary import STDIN_PATHS, base_name
from agent.shell import Simple, Word


class ShellRules(JudgeCore):
    def fed_by_literal(self, cmd: Simple) -> bool:
        """The pipe into ``cmd`` comes from ``echo``/``printf`` with words known now."""
        if cmd.fed_by is None:
            return False
        source = self.script.commands[cmd.fed_by]
        return (
            bool(source.words)
            and base_name(source.words[0].text) in ("echo", "printf")
            and not any(w.dynamic for w in source.words)
        )

    def eval_(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        if xargs or any(w.dynamic for w in args):
            self.add(None, "runs a command string that is only known when it runs (eval)")
        else:
            self.nested_text(" ".join(w.text for w in args), None)

    def source(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        if not args or args[0].text in STDIN_PATHS:
            if cmd.piped_in:
                self.add(
                    f"| {prog}", f"runs whatever the command before it prints, as shell commands ({prog})"
                )
        elif args[0].dynamic and not (args[0].process or args[0].substituted):
            self.add(None, f"runs a file whose name is only known when it runs ({prog} {args[0].text})")
        else:
            self.script_file(prog, args[0], shell=True)

    def trap(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        if args and not args[0].text.startswith("-"):
            self.nested_text(args[0].text, None)

    def stdin_code(self, cmd: Simple) -> tuple[str | None, bool]:
        """(here-document or here-string text, whether stdin is another command's output)."""
        bodies = [r.body for r in cmd.redirects if r.body is not None]
        return (bodies[-1] if bodies else None), cmd.piped_in

    def shell(self, cmd: Simple, prog: str, args: list[Word], xargs: bool = False) -> None:
        if prog == "busybox":
            if args:
                self.command(cmd, args, xargs=False)
            return
        i = 0
        command_string = False
        reads_stdin = False
        while i < len(args) and args[i].text.startswith(("-", "+")) and args[i].text not in ("-", "--"):
            t = args[i].text
            if t in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                i += 2
                continue
            if not t.startswith("--") and "c" in t[1:]:
                command_string = True
            if not t.startswith("--") and "s" in t[1:]:
                reads_stdin = True
            i += 1
        if i < len(args) and args[i].text == "--":
            i += 1
        rest = args[i:]
        if command_string:
            if not rest:
                self.add(None, f"runs an empty {prog} -c")
            elif rest[0].dynamic:
                self.add(None, f"runs a command string that is only known when it runs ({prog} -c)")
            else:
                self.nested_text(rest[0].text, None, xargs=xargs)
            return
        if rest and not reads_stdin and rest[0].text not in STDIN_PATHS:
            self.script_file(prog, rest[0], shell=True)
            return
        body, piped = self.stdin_code(cmd)
        if body is not None:
            self.nested_text(body, None)
        elif piped:
            self.add(f"| {prog}", f"runs whatever the command before it prints, as {prog} commands")

    def stdin_program(self, cmd: Simple, prog: str) -> None:
        body, piped = self.stdin_code(cmd)
        if body is not None:
            self.inline_code(prog, "stdin", body, False)
        elif piped:
            self.add(f"| {prog}", f"runs whatever the command before it prints, as {prog} code")

    def script_file(self, prog: str, script: Word, *, shell: bool) -> None:
        """A script a shell or interpreter runs: judged by its text when this very line wrote it."""
        name = base_name(script.text)
        if script.process or script.substituted:
            self.add(f"{prog} <(…)", "runs code that another command produces")
        elif name in self.downloaded:
            self.add(None, f"runs {script.text}, a file it just downloaded")
        elif name in self.written:
            text = self.written[name]
            if text is None:
                self.add(None, f"runs {script.text}, a file another command just wrote")
            elif shell:
                self.nested_text(text, None)
            else:
                self.inline_code(prog, script.text, text, False)
