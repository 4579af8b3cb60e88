"""Rules for git and the GitHub CLI: pushes, history rewrites, settings that run code, API writes."""

from __future__ import annotations

import re

from agent.risk.core import JudgeCore
from agent.risk.vocabulary import GLOBAL_VALUES, options
from agent.shell import Simple, Word


class VcsRules(JudgeCore):
    def git(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        short, long = GLOBAL_VALUES["git"]
        i = 0
        while i < len(args) and args[i].text.startswith("-"):
            t = args[i].text
            if t == "-c" and i + 1 < len(args):
                self.git_config(args[i + 1].text.partition("=")[0], "git -c")
            i += 2 if (t in long or (len(t) == 2 and t[1] in short)) else 1
        if i >= len(args):
            return
        sub, rest = args[i].text, args[i + 1 :]
        texts = [w.text for w in rest]
        flags = {t for t in texts if t.startswith("-")}
        if sub == "push":
            force = flags & {"-f", "--force", "--force-with-lease", "--mirror", "--delete", "-d", "--prune"}
            force = force or {f for f in flags if f.startswith("--force")} or {t for t in texts if t.startswith((":", "+"))}  # fmt: skip
            self.add(
                "git push",
                "force-pushes or deletes on a remote repository, which can destroy other people's work"
                if force
                else "pushes to a remote repository",
            )
        elif sub == "reset" and flags & {"--hard", "--merge", "--keep"}:
            self.add("git reset --hard", "throws away uncommitted work (git reset --hard)")
        elif sub == "clean" and (
            any(re.fullmatch(r"-[a-zA-Z]*f[a-zA-Z]*", f) for f in flags) or "--force" in flags
        ):
            if not flags & {"-n", "--dry-run"}:
                self.add("git clean", "deletes untracked files (git clean -f)")
        elif sub in ("checkout", "switch") and (
            flags & {"-f", "--force", "--discard-changes"} or "." in texts
        ):
            self.add(f"git {sub}", "discards uncommitted changes")
        elif sub == "restore" and not (flags & {"--staged", "-S"} and not flags & {"--worktree", "-W"}):
            self.add("git restore", "discards uncommitted changes (git restore)")
        elif sub == "stash" and texts[:1] in (["drop"], ["clear"]):
            self.add("git stash drop", "throws away stashed work")
        elif sub == "branch" and flags & {"-D", "--delete", "-d"} and (flags & {"-D", "-f", "--force"}):
            self.add("git branch -D", "deletes a branch that may not be merged")
        elif sub in ("filter-branch", "filter-repo", "replace") or (sub == "reflog" and texts[:1] in (["expire"], ["delete"])):  # fmt: skip
            self.add(f"git {sub}", "rewrites or drops repository history")
        elif sub == "update-ref" and "-d" in flags:
            self.add("git update-ref", "deletes a reference")
        elif sub == "rm" and flags & {"-r", "-f", "--force", "-rf", "-fr"}:
            self.add("git rm", "deletes files recursively or by force")
        elif sub == "config":
            keys = [t for t in texts if not t.startswith("-")]
            if keys:
                self.git_config(keys[0], "git config")
        elif sub == "send-email":
            self.add("git send-email", "sends mail")
        elif sub in ("submodule", "bisect") and texts[:1] in (["foreach"], ["run"]):
            self.nested_text(" ".join(t for t in texts[1:] if not t.startswith("--")), None)
        for w in rest:
            if w.substituted and sub in ("push", "clone", "fetch", "pull", "remote", "ls-remote"):
                self.add(
                    f"git {sub}",
                    "puts another command's output into a remote address (a way to send data out)",
                )
                break

    def git_config(self, key: str, where: str) -> None:
        key = key.lower()
        if key.startswith(("alias.", "filter.", "diff.", "credential")) or key in (
            "core.hookspath", "core.fsmonitor", "core.sshcommand", "core.pager", "core.editor",
            "core.gitproxy", "core.askpass", "sequence.editor", "gpg.program", "uploadpack.packobjectshook",
        ):  # fmt: skip
            self.add(where, f"sets the git option {key}, which makes git run a program")

    def gh(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        long = GLOBAL_VALUES["gh"][1]
        words = list(args)
        positional: list[str] = []
        i = 0
        while i < len(words):
            t = words[i].text
            if t.startswith("-"):
                i += 2 if (t in long or t in ("-R",)) else 1
                continue
            positional.append(t)
            if len(positional) == 2:
                break
            i += 1
        if not positional:
            return
        group = positional[0]
        verb = positional[1] if len(positional) > 1 else ""
        if any(w.substituted for w in args):
            self.add(
                f"gh {group} $(…)",
                "puts another command's output into a GitHub request (a way to send data out)",
            )
        if group == "api":
            self.gh_api(args)
            return
        if group == "auth":
            if verb == "token" or any(w.text in ("-t", "--show-token") for w in args):
                self.add("gh auth token", "prints the GitHub token")
            elif verb not in ("status", ""):
                self.add(f"gh auth {verb}", "changes how gh signs in to GitHub")
            return
        if group in (
            "search",
            "status",
            "browse",
            "help",
            "version",
            "completion",
            "--version",
            "config",
        ) and not (group == "config" and verb == "set"):
            return
        read = {"view", "list", "ls", "status", "diff", "checks", "watch", "download", "clone", "checkout", "browse",
                "help", "--help", "-h", "", "get"}  # fmt: skip
        if verb not in read:
            what = {
                ("pr", "merge"): "merges a pull request",
                ("repo", "delete"): "deletes a GitHub repository",
                ("release", "delete"): "deletes a release",
            }.get((group, verb), f"changes things on GitHub (gh {group} {verb})")
            self.add(f"gh {group} {verb}", what)

    def gh_api(self, args: list[Word]) -> None:
        opts = options(args, "XfFHpqt", ("--method", "--field", "--raw-field", "--input", "--header", "--jq",
                                        "--template", "--hostname", "--preview", "--cache"))  # fmt: skip
        methods = [m.upper() for m in opts.values("-X", "--method")]
        fields = opts.values("-f", "-F", "--field", "--raw-field")
        sends = bool(fields) or opts.has("--input")
        method = methods[-1] if methods else ("POST" if sends else "GET")
        endpoint = next((w.text for w in opts.args if w.text != "api"), "")
        if endpoint == "graphql" and method == "POST" and not methods:
            if any("mutation" in f for f in fields) or opts.has("--input"):
                self.add("gh api graphql", "changes things on GitHub through the GraphQL API (a mutation)")
            return
        if method not in ("GET", "HEAD"):
            self.add(f"gh api -X {method}", f"changes things on GitHub through the API ({method} {endpoint})")
