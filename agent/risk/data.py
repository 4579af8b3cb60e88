"""Rules for databases, package managers and cloud CLIs: writes the check cannot see are asked about."""

from __future__ import annotations

import re

from agent.risk.core import JudgeCore
from agent.risk.vocabulary import GLOBAL_VALUES, MUTATING_VERBS, PACKAGES, READ_VERBS, SQL_WRITES, options
from agent.shell import Simple, Word


class DataRules(JudgeCore):
    def sql(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        if prog == "sqlite3":  # sqlite3 [-options] DB [SQL …]; -cmd SQL runs first
            texts = [w.text for w in args if not w.text.startswith("-")][1:]
            texts += [args[n + 1].text for n, w in enumerate(args[:-1]) if w.text == "-cmd"]
        elif prog in ("psql",):
            opts = options(args, "cfdhpUvo", ("--command", "--file", "--dbname", "--host", "--port",
                                             "--username", "--set", "--variable", "--output"))  # fmt: skip
            if opts.values("-f", "--file"):
                self.add(f"{prog} -f", "runs an SQL file this check cannot see")
            texts = opts.values("-c", "--command")
        elif prog in ("mysql", "mariadb"):
            opts = options(args, "ehuPpDS", ("--execute", "--host", "--user", "--port", "--database"))
            texts = opts.values("-e", "--execute")
        elif prog in ("mongo", "mongosh"):
            texts = options(args, "", ("--eval", "--file")).values("--eval")
            if any(re.search(r"\b(drop|remove|delete|update|insert|replace)", t, re.I) for t in texts):
                self.add(prog, "changes data in a database")
            return
        else:  # redis-cli
            positional = [w.text for w in options(args, "hpansu", ()).args]
            reads = {"get", "mget", "keys", "scan", "info", "ping", "ttl", "pttl", "type", "exists", "hget",
                     "hgetall", "hkeys", "lrange", "llen", "smembers", "scard", "zrange", "zcard", "dbsize",
                     "strlen", "memory", "client", "slowlog", "time", "echo"}  # fmt: skip
            if positional and positional[0].lower() not in reads:
                self.add(f"redis-cli {positional[0].lower()}", f"changes data in Redis ({positional[0]})")
            return
        bodies = [r.body for r in cmd.redirects if r.body is not None]
        texts = [*texts, *bodies]
        feeds_unseen = any(r.op == "<" for r in cmd.redirects) or (
            cmd.piped_in and not self.fed_by_literal(cmd)
        )
        if cmd.piped_in and self.fed_by_literal(cmd) and cmd.fed_by is not None:
            texts.append(" ".join(w.text for w in self.script.commands[cmd.fed_by].words[1:]))
        if any(SQL_WRITES.search(t) for t in texts):
            self.add(prog, "changes or deletes data in a database (DROP/DELETE/UPDATE/TRUNCATE/ALTER)")
        elif feeds_unseen:
            self.add(prog, "runs SQL from a file or another command, which this check cannot see")

    def dropdb(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        self.add(prog, f"deletes a database or account ({prog})")

    def package(self, prog: str, args: list[Word]) -> None:
        short, long = GLOBAL_VALUES.get(prog, ("", ()))
        words = [w.text for w in args]
        i = 0
        while (
            i < len(words)
            and words[i].startswith("-")
            and not (prog == "nix-env" and words[i] in PACKAGES[prog])
        ):
            i += 2 if words[i] in long or (len(words[i]) == 2 and words[i][1] in short) else 1
        sub = words[i] if i < len(words) else ""
        if prog == "uv":
            nxt = words[i + 1] if i + 1 < len(words) else ""
            if sub in ("pip",) and nxt not in ("install", "uninstall", "sync"):
                return
            if sub == "tool" and nxt not in ("install", "run", "upgrade", "uninstall"):
                return
            if sub == "run" and "--with" not in words:
                return
            if sub in PACKAGES["uv"] or sub == "run":
                self.add(f"uv {sub} {nxt if sub in ('pip', 'tool') else ''}".strip(), "installs or runs packages from the internet")  # fmt: skip
            return
        if prog == "go" and sub == "run" and any("@" in w for w in words[i + 1 :]):
            self.add("go run", "downloads and runs a Go program from the internet")
            return
        if sub in PACKAGES[prog]:
            key = f"{prog} {sub}".strip()
            if sub in ("uninstall", "remove", "rm", "un", "r", "del", "purge", "erase", "autoremove", "-e", "--uninstall"):  # fmt: skip
                self.add(key, f"removes packages ({key})")
            else:
                self.add(
                    key, f"installs or runs packages from the internet ({key}), whose scripts run code here"
                )

    def cloud(self, prog: str, args: list[Word]) -> None:
        words = [w.text for w in args if not w.text.startswith("-")]
        for w in words[:5]:
            verb = w.lower()
            stem = verb.split("-", 1)[0]
            if prog in ("aws", "gsutil") and verb in ("ls", "cat", "du", "stat", "presign", "help"):
                return
            if verb in READ_VERBS or stem in ("describe", "list", "get", "show", "head"):
                return
            if verb in MUTATING_VERBS or stem in MUTATING_VERBS:
                self.add(f"{prog} {verb}", f"changes cloud, cluster or container resources ({prog} {verb})")
                return
        self.add(
            f"{prog} {' '.join(words[:2])}".strip(),
            f"may change cloud, cluster or container resources ({prog})",
        )
