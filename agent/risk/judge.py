"""The judge: one pass over a parsed command line, each program sent to its rule."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar

from agent.risk.data import DataRules
from agent.risk.files import FileRules
from agent.risk.interpreters import InterpreterRules
from agent.risk.network import NetworkRules
from agent.risk.shells import ShellRules
from agent.risk.vcs import VcsRules
from agent.risk.vocabulary import (
    CLOUD,
    CODE_FILES,
    DEVICE,
    DEVICE_WRITERS,
    GITHUB_HOSTS,
    INTERPRETERS,
    MAILERS,
    NETWORK_CLIENTS,
    PACKAGES,
    POWER,
    PYTHON,
    PYTHON_SHEBANG,
    RAW_NETWORK,
    READERS,
    REMOTE,
    RUNNERS,
    SHELLS,
    SYSTEM_CHANGERS,
    URL_HOST,
    Finding,
    base_name,
    secret_variables,
)
from agent.risk.wrappers import WrapperRules
from agent.shell import Script, Simple, Word

#: One program's rule: (judge, the simple command, program name, its arguments, run by xargs).
Rule = Callable[["Judge", Simple, str, list[Word], bool], None]


class Judge(WrapperRules, FileRules, VcsRules, NetworkRules, ShellRules, InterpreterRules, DataRules):
    """Findings for one parsed command line (and the command lines nested in it)."""

    RULES: ClassVar[dict[str, Rule]] = {
        "rm": FileRules.rm, "find": FileRules.find, "shred": FileRules.shred, "srm": FileRules.shred, "truncate": FileRules.truncate, "dd": FileRules.dd,
        "chmod": FileRules.chmod, "chown": FileRules.chmod, "chgrp": FileRules.chmod,
        "kill": FileRules.kill, "killall": FileRules.kill, "pkill": FileRules.kill, "killall5": FileRules.kill,
        "crontab": FileRules.crontab, "at": FileRules.crontab, "batch": FileRules.crontab, "systemctl": FileRules.systemctl, "service": FileRules.systemctl,
        "init": FileRules.systemctl, "telinit": FileRules.systemctl, "git": VcsRules.git, "gh": VcsRules.gh, "curl": NetworkRules.curl, "wget": NetworkRules.wget,
        "http": NetworkRules.httpie, "https": NetworkRules.httpie, "xh": NetworkRules.httpie, "xhs": NetworkRules.httpie, "rsync": NetworkRules.rsync,
        "sqlite3": DataRules.sql, "psql": DataRules.sql, "mysql": DataRules.sql, "mariadb": DataRules.sql, "mongo": DataRules.sql, "mongosh": DataRules.sql,
        "redis-cli": DataRules.sql, "eval": ShellRules.eval_, "source": ShellRules.source, ".": ShellRules.source, "trap": ShellRules.trap,
        "awk": InterpreterRules.awk, "gawk": InterpreterRules.awk, "mawk": InterpreterRules.awk, "nawk": InterpreterRules.awk, "sed": InterpreterRules.sed, "cp": FileRules.cp, "mv": FileRules.cp,
        "dropdb": DataRules.dropdb, "dropuser": DataRules.dropdb, "export": FileRules.export, "declare": FileRules.export, "typeset": FileRules.export,
        "readonly": FileRules.export, "local": FileRules.export, "tar": FileRules.tar,
    }  # fmt: skip

    def command(self, cmd: Simple, words: list[Word], *, xargs: bool) -> None:
        if (
            base_name(words[0].text) in ("env", "printenv", "set", "export", "declare", "compgen")
            and cmd.piped_out
        ):
            self.add(
                f"{base_name(words[0].text)} |",
                "passes the environment, with its credentials, to another program",
            )
        unwrapped = self.unwrap(cmd, words)
        if unwrapped is None or not unwrapped[0]:
            return
        words, via_xargs = unwrapped
        xargs = xargs or via_xargs
        first = words[0]
        if first.dynamic:
            self.add(None, f"runs a program whose name is only known when it runs ({first.text})")
            return
        prog = base_name(first.text)
        if re.fullmatch(r"pip\d+(\.\d+)?", prog):
            prog = "pip"
        args = words[1:]
        # A start-up file named by a writing program (cp, tee, ln, sed -i …).
        if prog not in READERS:
            for w in args:
                if CODE_FILES.search(w.text):
                    self.add(
                        f"{prog} {w.text}", f"changes {w.text}, a file that runs code when something starts"
                    )
                    break
        for w in args:
            if DEVICE.match(w.text) and prog in DEVICE_WRITERS:
                self.add(None, f"writes to the disk device {w.text}", blocked=True)
                break
        if prog in self.downloaded | set(self.written) and "/" in first.text:
            self.script_file(first.text, first, shell=not PYTHON_SHEBANG.match(self.written.get(prog) or ""))
        secrets = secret_variables(args)
        if secrets and prog not in NETWORK_CLIENTS:
            self.add(
                f"${secrets[0]}",
                f"uses the credential ${secrets[0]}, whose value could get out encoded, past the masking",
            )
        elif secrets:
            hosts = {m.group(1).lower() for w in args for m in URL_HOST.finditer(w.text)}
            elsewhere = sorted(hosts - GITHUB_HOSTS)
            if elsewhere:
                self.add(f"{prog} ${secrets[0]}", f"sends the credential ${secrets[0]} to {elsewhere[0]}")
        rule = self.RULES.get(prog)
        if rule is not None:
            rule(self, cmd, prog, args, xargs)
        elif PYTHON.match(prog):
            self.python(cmd, prog, args, xargs)
        elif prog.startswith("mkfs") or prog in ("mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "parted", "gdisk", "sgdisk"):  # fmt: skip
            listing = prog in ("fdisk", "sfdisk", "parted", "gdisk", "sgdisk") and any(
                w.text in ("-l", "--list", "-p", "--print", "print") for w in args
            )
            if listing:
                pass  # fdisk -l: only shows the partition table
            elif any(w.text.startswith("/dev/") for w in args):
                self.add(None, f"formats or repartitions a disk ({prog})", blocked=True)
            else:
                self.add(prog, f"formats or wipes a disk image ({prog})")
        elif prog in SHELLS:
            self.shell(cmd, prog, args, xargs)
        elif prog in INTERPRETERS or prog in PACKAGES:
            if prog in PACKAGES:
                self.package(prog, args)
            if prog in INTERPRETERS:
                self.interpreter(cmd, prog, args, INTERPRETERS[prog])
        elif prog in RUNNERS:
            self.add(prog, f"downloads and runs a package from the internet ({prog})")
        elif prog in CLOUD:
            self.cloud(prog, args)
        elif prog in RAW_NETWORK:
            if prog != "openssl" or (args and args[0].text in ("s_client", "s_server")):
                self.add(prog, f"opens a raw network connection ({prog}), which can send anything anywhere")
        elif prog in REMOTE:
            self.add(prog, f"connects to another machine ({prog})")
        elif prog in MAILERS:
            self.add(prog, f"sends mail ({prog})")
        elif prog in POWER:
            self.add(None, f"switches the machine off or restarts it ({prog})", blocked=True)
        elif prog in SYSTEM_CHANGERS:
            self.add(prog, f"changes the system's configuration ({prog})")


def judge(script: Script) -> list[Finding]:
    """Every finding for a parsed command line, in order (duplicates removed)."""
    seen: set[tuple[str | None, str]] = set()
    out: list[Finding] = []
    for finding in Judge(script).run():
        if (finding.key, finding.why) not in seen:
            seen.add((finding.key, finding.why))
            out.append(finding)
    return out
