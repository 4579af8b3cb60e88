"""The flat parser: tokens to simple commands, with pipes, background jobs, bodies and functions."""

from __future__ import annotations

from agent.shell.model import ASSIGNMENT, SKIP_WORDS, Script, ShellSyntaxError, Simple, Token


class Parser:
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

    def run(self, tokens: list[Token]) -> None:
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

    def operator(self, op: str, tokens: list[Token], i: int) -> None:
        if op == "(":
            cmd = self.current
            if len(cmd.words) == 1 and not cmd.assignments and i < len(tokens) and tokens[i].value == ")":
                self.function_pending = cmd.words[0].text  # name() { …; }
                self.current = Simple()
                tokens[i] = Token("op", "")  # the ")" of the header
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

    def close(self, opener: str | None, tokens: list[Token], i: int) -> None:
        """The end of a compound command; what follows it may be its redirections."""
        if opener is not None:
            if not self.stack or self.stack[-1][0] != opener:
                raise ShellSyntaxError(f"unbalanced '{')' if opener == '(' else '}'}'")
            _, name, first = self.stack.pop()
            if name is not None:
                self.script.functions[name] = list(range(first, len(self.script.commands)))
        if i < len(tokens) and tokens[i].kind == "redirect":
            self.current.compound = True
