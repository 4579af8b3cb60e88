"""Rules for programs that delete, overwrite or re-permission files, stop processes or change services."""

from __future__ import annotations

from agent.risk.core import JudgeCore
from agent.risk.vocabulary import HARMLESS_DEVICE, is_root_or_home, options
from agent.shell import Simple, Word


class FileRules(JudgeCore):
    def rm(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        opts = options(args)
        recursive = opts.has("-r", "-R", "--recursive")
        force = opts.has("-f", "--force")
        if opts.has("--no-preserve-root") or (recursive and any(is_root_or_home(w.text) for w in opts.args)):
            self.add(None, "deletes the whole system or a home directory", blocked=True)
        elif recursive or force:
            self.add("rm", "deletes files recursively or by force")
        elif xargs or any(w.dynamic or w.glob for w in opts.args):
            self.add("rm", "deletes files chosen by a pattern or only known when it runs")

    def find(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        texts = [w.text for w in args]
        if "-delete" in texts:
            self.add("find -delete", "deletes every file it finds")
        for n, text in enumerate(texts):
            if text in ("-exec", "-execdir", "-ok", "-okdir"):
                end = next((m for m in range(n + 1, len(texts)) if texts[m] in (";", "+")), len(texts))
                sub = [Word(w.text, dynamic=True) if "{}" in w.text else w for w in args[n + 1 : end]]
                if sub:
                    self.command(Simple(words=sub), sub, xargs=False)

    def shred(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        self.add(prog, f"destroys file contents ({prog})")

    def truncate(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        self.add("truncate", "cuts files to a given size (their data is lost)")

    def dd(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        for w in args:
            if w.text.startswith("of="):
                target = w.text[3:]
                if HARMLESS_DEVICE.match(target):
                    continue
                if target.startswith("/dev/"):
                    self.add(None, f"writes raw data onto the device {target}", blocked=True)
                else:
                    self.add("dd", f"overwrites {target} block by block")

    def chmod(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        opts = options(args, "", ("--reference", "--from"))
        recursive = opts.has("-R", "--recursive")
        targets = opts.args[1:] if prog in ("chmod", "chown", "chgrp") and opts.args else opts.args
        if recursive and any(is_root_or_home(w.text) for w in targets):
            self.add(None, f"changes permissions or owners of the whole system ({prog} -R)", blocked=True)
        elif prog in ("chown", "chgrp"):
            self.add(prog, "changes who owns files")
        elif recursive:
            self.add(f"{prog} -R", "changes permissions of a whole directory tree")

    def kill(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        if prog in ("killall", "pkill", "killall5"):
            self.add(prog, f"stops processes by name ({prog})")
            return
        texts = [w.text for w in args]
        pids: list[str] = []
        i = 0
        while i < len(texts):
            t = texts[i]
            if t == "--":
                pids.extend(texts[i + 1 :])
                break
            if t in ("-s", "-n"):
                i += 2
                continue
            if t.startswith("-") and i == 0 and len(texts) > 1:
                i += 1
                continue
            pids.append(t)
            i += 1
        if any(p in ("-1", "0") or p.startswith("-") for p in pids):
            self.add("kill -1", "signals every process it may (kill -1), which stops this bot too")

    def crontab(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        if prog in ("at", "batch") or [w.text for w in args] != ["-l"]:
            self.add(prog, "schedules commands to run later on this machine")

    def systemctl(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        verbs = [w.text for w in args if not w.text.startswith("-")]
        verb = verbs[0] if verbs else ""
        if verb in ("poweroff", "reboot", "halt", "kexec", "suspend", "hibernate") or (prog == "init" and verb in ("0", "6")):  # fmt: skip
            self.add(None, "switches the machine off or restarts it", blocked=True)
        elif prog != "init" and verb not in ("status", "show", "list-units", "list-unit-files", "is-active", "is-enabled", "cat", "list-timers", ""):  # fmt: skip
            self.add(f"{prog} {verb}", f"changes system services ({prog} {verb})")

    def cp(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        texts = [w.text for w in args if not w.text.startswith("-")]
        if prog == "cp" and texts[:1] == ["/dev/null"] and len(texts) > 1:
            self.add("cp /dev/null", f"empties the file {texts[-1]}")
        if prog == "mv" and texts and texts[-1] == "/dev/null":
            self.add("mv /dev/null", "throws files away (mv to /dev/null)")

    def tar(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        texts = [w.text for w in args]
        runs = ("--to-command", "--checkpoint-action", "--use-compress-program", "--rsh-command",
                "--info-script", "--new-volume-script", "-I", "-F")  # fmt: skip
        if any(t.split("=", 1)[0] in runs for t in texts):
            self.add("tar (runs a program)", "makes tar run another program")
        if "--remove-files" in texts:
            self.add("tar --remove-files", "deletes the files it archives")

    def export(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        for w in args:
            self.code_variable(w.text)
