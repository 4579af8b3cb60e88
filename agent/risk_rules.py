"""What each program in a command line does that a person should approve, or that nobody may allow.

Input is a :class:`~agent.shell_parse.Script` (every simple command a line would run); output is a list
of :class:`Finding` — a sentence for the approval request ("deletes files recursively or by force"),
the *pattern* an "allow for this conversation" answer covers (``git push``, ``rm``), and whether it is
on the hard blocklist. Rules look at the program and its arguments after unwrapping ``sudo``/``env``/
``timeout``/``xargs``…; shell strings (``bash -c``, ``eval``, here-documents fed to a shell) are read
again as commands. Unknown is never harmless: a program whose name is computed at run time, a shell
fed by a pipe, SQL the check cannot see, all ask.

The rules are deliberately broad rather than clever: a question too many costs a tap, a question too
few can cost a repository.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agent.shell_parse import (
    MAX_DEPTH,
    TRUNCATING_REDIRECTS,
    WRITE_REDIRECTS,
    Script,
    ShellSyntaxError,
    Simple,
    Word,
    parse,
)
from config.secrets import is_secret_name


@dataclass(frozen=True, slots=True)
class Finding:
    #: What "allow for this conversation" covers (program and subcommand); None: never for a session.
    key: str | None
    #: Completes "this command …".
    why: str
    #: On the hard blocklist: refused whatever the approval mode and whoever approves.
    blocked: bool = False


def _base(word: str) -> str:
    return word.rsplit("/", 1)[-1]


# --- option scanning -------------------------------------------------------------------------------
@dataclass(slots=True)
class _Opts:
    flags: list[tuple[str, str | None]] = field(default_factory=list)  # (name, value)
    args: list[Word] = field(default_factory=list)

    def has(self, *names: str) -> bool:
        return any(name in names for name, _ in self.flags)

    def values(self, *names: str) -> list[str]:
        return [value for name, value in self.flags if name in names and value is not None]


def _options(words: Sequence[Word], short_values: str = "", long_values: Iterable[str] = ()) -> _Opts:
    """GNU-style options: ``-abc``, ``-ovalue``, ``-o value``, ``--name=value``, ``--name value``, ``--``.

    Options may follow positional arguments (GNU tools accept that). ``short_values``: the letters
    that take a value; ``long_values``: the long names that do.
    """
    long_set = set(long_values)
    out = _Opts()
    i = 0
    while i < len(words):
        text = words[i].text
        if text == "--":
            out.args.extend(words[i + 1 :])
            break
        if text.startswith("--") and len(text) > 2:
            name, eq, value = text.partition("=")
            if eq:
                out.flags.append((name, value))
            elif name in long_set and i + 1 < len(words):
                out.flags.append((name, words[i + 1].text))
                i += 1
            else:
                out.flags.append((name, None))
        elif text.startswith("-") and len(text) > 1 and not words[i].dynamic:
            for n, letter in enumerate(text[1:], 1):
                if letter in short_values:
                    rest = text[n + 1 :]
                    if rest:
                        out.flags.append(("-" + letter, rest))
                    elif i + 1 < len(words):
                        out.flags.append(("-" + letter, words[i + 1].text))
                        i += 1
                    else:
                        out.flags.append(("-" + letter, None))
                    break
                out.flags.append(("-" + letter, None))
        else:
            out.args.append(words[i])
        i += 1
    return out


# --- vocabularies ----------------------------------------------------------------------------------
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "busybox", "rbash", "yash"})
PYTHON = re.compile(r"^(python(\d+(\.\d+)?)?|pypy\d*)$")
#: Interpreter → its inline-code options.
INTERPRETERS: dict[str, tuple[str, ...]] = {
    "perl": ("-e", "-E"),
    "node": ("-e", "-p", "--eval", "--print"),
    "nodejs": ("-e", "-p", "--eval", "--print"),
    "ruby": ("-e",),
    "php": ("-r",),
    "lua": ("-e",),
    "luajit": ("-e",),
    "Rscript": ("-e",),
    "R": ("-e",),
    "osascript": ("-e",),
    "pwsh": ("-c", "-Command", "-command"),
    "powershell": ("-c", "-Command", "-command"),
    "bun": ("-e", "--eval", "-p", "--print"),
    "deno": (),
}
#: Names in inline code that delete, run programs, reach the network or decode hidden code.
CODE_DANGER = re.compile(
    r"rmtree|unlink|remove|rmdir|truncate|shutil|os\.system|\bsystem\s*\(|subprocess|popen|spawn|"
    r"\bexec[a-z]*\s*\(|\beval\s*\(|__import__|requests|urllib|http\.client|httpx|aiohttp|socket|"
    r"smtplib|ftplib|telnetlib|paramiko|urlopen|\bfetch\s*\(|xmlhttprequest|child_process|\brmsync|"
    r"\bfs\.rm|net::http|lwp::|io::socket|file\.delete|fileutils|b64decode|base64|fromhex|"
    r"install\.packages|\bpip\b|`|\bqx\b|invoke-webrequest|invoke-expression|\biex\b|remove-item|"
    r"environ|getenv|process\.env|\bENV\[|\$ENV\{|%ENV",
    re.IGNORECASE,
)
NETWORK_CLIENTS = frozenset({"curl", "wget", "http", "https", "xh", "xhs", "aria2c", "gh", "git"})
RAW_NETWORK = frozenset({"nc", "ncat", "netcat", "socat", "telnet", "openssl"})
REMOTE = frozenset({"ssh", "scp", "sftp", "sshpass", "mosh", "ftp", "lftp", "tftp", "smbclient"})
MAILERS = frozenset({"sendmail", "mail", "mailx", "mutt", "swaks", "msmtp"})
SYSTEM_CHANGERS = frozenset(
    {
        "mount", "umount", "iptables", "ip6tables", "nft", "ufw", "useradd", "userdel", "usermod",
        "passwd", "chpasswd", "groupadd", "groupdel", "visudo", "insmod", "rmmod", "modprobe",
        "sysctl", "swapoff", "swapon", "setcap", "chattr", "losetup", "cryptsetup", "update-alternatives",
    }
)  # fmt: skip
POWER = frozenset({"shutdown", "reboot", "halt", "poweroff"})
PRIVILEGE = frozenset({"sudo", "doas", "su", "pkexec", "runuser"})
#: Reading programs: an argument naming a start-up file is only read, never changed.
READERS = frozenset(
    {"cat", "less", "more", "head", "tail", "grep", "egrep", "fgrep", "rg", "ls", "stat", "file", "wc",
     "diff", "cmp", "md5sum", "sha1sum", "sha256sum", "echo", "printf", "test", "[", "realpath", "readlink",
     "basename", "dirname", "bat", "ag", "tree", "find", "git", "du", "source", "."}
)  # fmt: skip
DEVICE = re.compile(r"^/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-|mapper/|loop|sr|mem$|kmem$|port$)")
HARMLESS_DEVICE = re.compile(r"^/dev/(null|zero|stdout|stderr|stdin|tty|fd/\d+|random|urandom)$")
OTHERS_ENVIRON = re.compile(r"/proc/([0-9]+|\*|\[[^]]*\]|\?+|\$[A-Za-z_{(][^/]*)/(task/[^/]+/)?environ\b")
OWN_ENVIRON = re.compile(r"/proc/(self|thread-self|\$\$|\$BASHPID)/(task/[^/]+/)?environ\b")
#: Files that run code when something starts (a shell, git, Python, ssh): writing one is risky.
CODE_FILES = re.compile(
    r"(^|/)(\.bashrc|\.bash_profile|\.bash_login|\.bash_logout|\.profile|\.zshrc|\.zshenv|\.zprofile|"
    r"\.zlogin|\.kshrc|\.cshrc|\.tcshrc|\.envrc|\.gitconfig|\.npmrc|\.pam_environment|"
    r"sitecustomize\.py|usercustomize\.py|authorized_keys|rc\.local|[^/]+\.pth)$|"
    r"(^|/)\.git/(hooks(/|$)|config$)|(^|/)\.ssh/|^/etc/(profile|bash\.bashrc|cron|ld\.so)|"
    r"(^|/)\.config/(autostart|fish/config\.fish|systemd/user)"
)
STDIN_PATHS = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
PYTHON_SHEBANG = re.compile(r"#!.*\b(python|perl|node|ruby|php)")
#: Environment variables that make programs run other code (a prefix ``VAR=… cmd``, ``export``, ``env``).
CODE_VARIABLES = frozenset(
    {"LD_PRELOAD", "LD_AUDIT", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EXTERNAL_DIFF", "GIT_PAGER", "PAGER",
     "GIT_EDITOR", "EDITOR", "VISUAL", "BASH_ENV", "ENV", "PROMPT_COMMAND", "PERL5OPT", "NODE_OPTIONS",
     "GIT_CONFIG_PARAMETERS", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_PROXY_COMMAND", "PYTHONSTARTUP"}
)  # fmt: skip
#: Where a GitHub token may be sent (a credential in a request to any other host is risky).
GITHUB_HOSTS = frozenset(
    {"github.com", "api.github.com", "uploads.github.com", "codeload.github.com", "raw.githubusercontent.com",
     "objects.githubusercontent.com", "gist.github.com"}
)  # fmt: skip
URL_HOST = re.compile(r"[a-z][a-z0-9+.-]*://(?:[^/@\s]*@)?\[?([^/:?#\s\]]+)", re.IGNORECASE)
#: Programs that write to the paths they are given (so a disk device among them is written).
DEVICE_WRITERS = frozenset(
    {"cp", "mv", "tee", "install", "shred", "truncate", "rsync", "badblocks", "blkdiscard", "pv"}
)
DATA_FILE = re.compile(r"\.(db|sqlite|sqlite3|db3|mdb|accdb)$", re.IGNORECASE)
SYSTEM_DIRS = frozenset(
    {"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
     "/proc", "/root", "/sbin", "/srv", "/sys", "/usr", "/var", "/mnt", "/media", "/run", "/snap"}
)  # fmt: skip
HOME_WORDS = frozenset({"~", "$HOME", "${HOME}"})
SQL_WRITES = re.compile(r"\b(drop|delete|update|truncate|alter|replace\s+into|vacuum\s+into)\b|^\s*\.(shell|system)\b|\n\s*\.(shell|system)\b", re.IGNORECASE)  # fmt: skip
MUTATING_VERBS = frozenset(
    {"create", "delete", "deploy", "update", "set", "add", "remove", "apply", "destroy", "rm", "stop",
     "start", "restart", "reset", "resize", "patch", "replace", "scale", "rollout", "import", "attach",
     "detach", "move", "mv", "rename", "enable", "disable", "submit", "run", "ssh", "scp", "cp", "sync",
     "upload", "publish", "release", "promote", "purge", "cancel", "grant", "revoke", "login", "logout",
     "activate-service-account", "print-access-token", "print-identity-token", "configure", "edit",
     "label", "annotate", "taint", "untaint", "drain", "cordon", "uncordon", "exec", "port-forward",
     "proxy", "push", "put", "invoke", "terminate", "reboot", "modify", "tag", "untag", "install",
     "uninstall", "upgrade", "rollback", "kill", "prune", "rmi", "mb", "rb", "expose", "autoscale",
     "rerun", "copy", "send", "write", "post", "register", "deregister", "associate", "disassociate",
     "authorize", "restore", "recover", "clear", "wipe", "flush", "erase", "close", "open"}
)  # fmt: skip
READ_VERBS = frozenset(
    {"list", "ls", "describe", "get", "show", "view", "status", "version", "help", "logs", "log", "top",
     "explain", "plan", "validate", "fmt", "output", "whoami", "info", "inspect", "ps", "images", "stats",
     "history", "search", "lint", "template", "env", "diff", "api-resources", "api-versions",
     "cluster-info", "can-i", "wait", "events", "current-context", "get-contexts", "providers", "graph",
     "init", "head", "cat", "tree", "pull", "find", "query", "check", "test", "doctor", "--version",
     "-v", "--help", "-h", "config-list", "get-caller-identity", "get-value", "print-settings"}
)  # fmt: skip
CLOUD = frozenset(
    {"kubectl", "oc", "helm", "terraform", "tofu", "pulumi", "aws", "gcloud", "gsutil", "az", "doctl",
     "flyctl", "fly", "heroku", "vercel", "netlify", "firebase", "eksctl", "docker", "podman", "nomad",
     "consul", "vault", "ansible", "ansible-playbook", "wrangler", "supabase", "railway", "render"}
)  # fmt: skip
#: Package managers: program → (subcommands that install/remove/run packages, "" = no subcommand too).
PACKAGES: dict[str, frozenset[str]] = {
    "pip": frozenset({"install", "uninstall", "download", "wheel"}),
    "npm": frozenset({"install", "i", "in", "add", "ci", "isntall", "update", "up", "upgrade", "uninstall",
                      "un", "rm", "remove", "r", "exec", "x", "publish", "unpublish", "link", "dlx", "init"}),
    "yarn": frozenset({"", "install", "add", "upgrade", "up", "remove", "dlx", "global", "create", "publish"}),
    "pnpm": frozenset({"install", "i", "add", "update", "up", "upgrade", "remove", "rm", "un", "uninstall",
                       "dlx", "create", "publish", "link"}),
    "bun": frozenset({"install", "i", "add", "a", "remove", "rm", "update", "x", "create", "publish", "link"}),
    "gem": frozenset({"install", "uninstall", "update", "push"}),
    "cargo": frozenset({"install", "uninstall", "add", "publish"}),
    "go": frozenset({"install", "get"}),
    "apt": frozenset({"install", "remove", "purge", "autoremove", "upgrade", "full-upgrade", "dist-upgrade",
                      "update", "reinstall"}),
    "apk": frozenset({"add", "del", "upgrade", "update"}),
    "dnf": frozenset({"install", "remove", "erase", "upgrade", "update", "reinstall"}),
    "brew": frozenset({"install", "uninstall", "remove", "rm", "upgrade", "tap", "reinstall"}),
    "conda": frozenset({"install", "create", "remove", "uninstall", "update", "upgrade", "run"}),
    "poetry": frozenset({"add", "install", "remove", "update", "publish", "self"}),
    "pdm": frozenset({"add", "install", "remove", "update", "sync", "publish"}),
    "composer": frozenset({"require", "install", "update", "remove", "create-project", "global"}),
    "pipx": frozenset({"install", "run", "inject", "runpip", "upgrade", "upgrade-all", "reinstall",
                       "uninstall"}),
    "snap": frozenset({"install", "remove", "refresh"}),
    "flatpak": frozenset({"install", "uninstall", "update"}),
    "nix-env": frozenset({"-i", "--install", "-e", "--uninstall", "-u", "--upgrade"}),
    "luarocks": frozenset({"install", "remove"}),
    "cpanm": frozenset({""}),
    "cpan": frozenset({""}),
    "uv": frozenset({"add", "remove", "sync", "tool", "pip", "self"}),
}  # fmt: skip
PACKAGES["apt-get"] = PACKAGES["aptitude"] = PACKAGES["apt"]
PACKAGES["yum"] = PACKAGES["zypper"] = PACKAGES["microdnf"] = PACKAGES["dnf"]
PACKAGES["mamba"] = PACKAGES["micromamba"] = PACKAGES["conda"]
RUNNERS = frozenset({"npx", "uvx", "bunx", "pnpx", "pipx-run"})
#: Options that take a value, so the subcommand after them is found (program → short letters, long names).
GLOBAL_VALUES: dict[str, tuple[str, tuple[str, ...]]] = {
    "git": ("Cc", ("--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env")),
    "gh": ("R", ("--repo", "--hostname")),
    "pip": ("", ("--python", "--log", "--proxy", "--cache-dir")),
    "npm": ("", ("--prefix", "--workspace", "-w", "--registry")),
    "uv": ("", ("--directory", "--project", "--python", "--cache-dir", "--config-file")),
}
CURL_VALUES = "dFTXHouAebcxwmKErYyzCUtPQD"  # curl's short options that take a value (and -h is help)
CURL_LONG = (
    "--data", "--data-binary", "--data-raw", "--data-urlencode", "--data-ascii", "--json", "--form",
    "--form-string", "--upload-file", "--request", "--header", "--output", "--user", "--user-agent",
    "--referer", "--cookie", "--cookie-jar", "--proxy", "--write-out", "--max-time", "--config", "--url",
    "--connect-timeout", "--retry", "--cacert", "--cert", "--key", "--resolve", "--connect-to",
    "--output-dir", "--range", "--oauth2-bearer", "--variable", "--expand-url", "--expand-data",
)  # fmt: skip
CURL_SENDS = {"-d", "-F", "-T", "--data", "--data-binary", "--data-raw", "--data-urlencode", "--data-ascii",
              "--json", "--form", "--form-string", "--upload-file", "--expand-data"}  # fmt: skip


def _secret_variables(words: Iterable[Word]) -> list[str]:
    return sorted({v for w in words for v in w.variables if is_secret_name(v)})


def _is_root_or_home(text: str) -> bool:
    """``/``, ``/*``, ``//``, ``/usr``, ``/etc/*``, ``~``, ``$HOME/*`` … (what ``rm -r`` must never get)."""
    path = re.sub(r"/+", "/", text.strip())
    while len(path) > 1 and path.endswith(("/", "/*", "/.")):
        path = path[:-1] if path.endswith("/") else path[:-2]
    return path in ("", "/*") or path in SYSTEM_DIRS or path in HOME_WORDS


# --- the judge -------------------------------------------------------------------------------------
class Judge:
    """Findings for one parsed command line (and the command lines nested in it)."""

    def __init__(self, script: Script, depth: int = 0, *, xargs: bool = False) -> None:
        self.script = script
        self.depth = depth
        #: The whole line runs once per input line of ``xargs`` (``xargs sh -c '…'``): arguments are unknown.
        self.xargs = xargs
        self.findings: list[Finding] = []
        self.downloaded: set[str] = set()  # file names this line downloads (then running one is risky)
        #: file name → the text this line wrote into it (a here-document, echo/printf), None if unknown
        self.written: dict[str, str | None] = {}

    def add(self, key: str | None, why: str, *, blocked: bool = False) -> None:
        self.findings.append(Finding(key, why, blocked))

    def run(self) -> list[Finding]:
        self.fork_bombs()
        for cmd in self.script.commands:
            self.paths(cmd)
            self.redirects(cmd)
            for assignment in cmd.assignments:
                self.code_variable(assignment)
            if cmd.words:
                self.command(cmd, list(cmd.words), xargs=self.xargs)
        return self.findings

    def nested_text(self, text: str, key: str | None, *, xargs: bool = False) -> None:
        """A command string the line runs (``bash -c``, ``eval``, a here-document fed to a shell)."""
        if self.depth + 1 > MAX_DEPTH:
            self.add(None, "nests shells too deeply to be read reliably")
            return
        try:
            script = parse(text, depth=self.depth + 1)
        except ShellSyntaxError as exc:
            self.add(None, f"runs a shell command string that could not be read reliably ({exc})")
            return
        inner = Judge(script, self.depth + 1, xargs=xargs or self.xargs)
        inner.downloaded, inner.written = self.downloaded, self.written
        self.findings.extend(inner.run())

    def code_variable(self, assignment: str) -> None:
        """``LD_PRELOAD=…``, ``GIT_SSH_COMMAND=…``: a variable that makes programs run other code."""
        name = re.split(r"\+?=|\[", assignment, maxsplit=1)[0]
        if "=" in assignment and name in CODE_VARIABLES:
            self.add(f"{name}=", f"sets {name}, which makes programs run other code")

    def fork_bombs(self) -> None:
        for name, indexes in self.script.functions.items():
            calls = [self.script.commands[n] for n in indexes]
            if any(
                c.words and c.words[0].text == name and (c.piped_in or c.piped_out or c.background)
                for c in calls
            ):
                self.add(
                    None, f"defines a fork bomb (the function {name} starts copies of itself)", blocked=True
                )

    def paths(self, cmd: Simple) -> None:
        """Paths anywhere in the command: other processes' environments, the machine's disks."""
        words = [*cmd.words, *(r.target for r in cmd.redirects if r.target is not None)]
        for w in words:
            if OTHERS_ENVIRON.search(w.text):
                self.add(None, "reads another process's environment (where the service keeps its secrets)", blocked=True)  # fmt: skip
            elif OWN_ENVIRON.search(w.text):
                self.add(
                    "/proc/self/environ", "reads the process environment, where this run's credentials are"
                )

    def redirects(self, cmd: Simple) -> None:
        prog = _base(cmd.words[0].text) if cmd.words else ""
        for r in cmd.redirects:
            if r.target is None or r.op not in WRITE_REDIRECTS:
                continue
            target = r.target.text
            if HARMLESS_DEVICE.match(target) or r.op in (">&",):
                continue
            if DEVICE.match(target):
                self.add(None, f"writes straight onto the disk device {target}", blocked=True)
            elif CODE_FILES.search(target):
                self.add(
                    f"write {target}", f"writes to {target}, a file that runs code when something starts"
                )
            elif r.op in TRUNCATING_REDIRECTS and not cmd.compound and self.truncates_only(cmd):
                self.add(f"{prog or ''} > file".strip(), f"empties the file {target}")
            elif r.op in TRUNCATING_REDIRECTS and DATA_FILE.search(target):
                self.add(f"{prog} > {target}", f"overwrites the database file {target}")
            elif r.target.dynamic and r.op in TRUNCATING_REDIRECTS:
                self.add(
                    f"{prog} > file", f"overwrites a file whose name is only known when it runs ({target})"
                )
            if prog in ("curl", "wget") and r.op in (">", ">|", "&>"):
                self.downloaded.add(_base(target))
            elif r.op in (">", ">|", "&>", ">>", "&>>"):
                self.wrote(_base(target), self.output_text(cmd), append=r.op in (">>", "&>>"))

    def wrote(self, name: str, text: str | None, *, append: bool) -> None:
        before = self.written.get(name, "") if append else ""
        self.written[name] = None if text is None or before is None else before + text

    def output_text(self, cmd: Simple) -> str | None:
        """What a command writes to its standard output, when this line spells it out; None otherwise."""
        bodies = [r.body for r in cmd.redirects if r.body is not None]
        prog = _base(cmd.words[0].text) if cmd.words else ""
        if prog == "cat" and len(cmd.words) == 1 and bodies:
            return bodies[-1]
        if prog in ("echo", "printf") and not any(w.dynamic for w in cmd.words):
            return " ".join(w.text for w in cmd.words[1:] if not w.text.startswith("-")) + "\n"
        if not cmd.words:
            return ""
        return None

    @staticmethod
    def truncates_only(cmd: Simple) -> bool:
        """``> f``, ``: > f``, ``true > f``, ``echo -n > f``, ``printf '' > f``, ``cat /dev/null > f``."""
        if not cmd.words:
            return True
        prog, args = _base(cmd.words[0].text), [w.text for w in cmd.words[1:]]
        if prog in (":", "true", "false"):
            return True
        if prog == "echo":
            return all(a in ("", "-n", "-e", "-ne", "-en", "-E") for a in args)
        if prog == "printf":
            return all(a == "" for a in args)
        return prog == "cat" and args == ["/dev/null"]

    # --- one program -------------------------------------------------------------------------------
    def command(self, cmd: Simple, words: list[Word], *, xargs: bool) -> None:
        if (
            _base(words[0].text) in ("env", "printenv", "set", "export", "declare", "compgen")
            and cmd.piped_out
        ):
            self.add(
                f"{_base(words[0].text)} |",
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
        prog = _base(first.text)
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
        secrets = _secret_variables(args)
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

    def unwrap(self, cmd: Simple, words: list[Word]) -> tuple[list[Word], bool] | None:
        """Strip sudo/env/timeout/nice/nohup/xargs/… and judge the program they run."""
        via_xargs = False
        while words:
            prog = _base(words[0].text)
            rest = words[1:]
            if words[0].dynamic:
                return words, via_xargs
            if prog in PRIVILEGE:
                self.add(prog, f"runs as another user ({prog})")
                if prog == "su":
                    code = _options(rest, "cgsl", ("--command", "--shell", "--group")).values(
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

    # --- rules -------------------------------------------------------------------------------------
    def rm(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        opts = _options(args)
        recursive = opts.has("-r", "-R", "--recursive")
        force = opts.has("-f", "--force")
        if opts.has("--no-preserve-root") or (recursive and any(_is_root_or_home(w.text) for w in opts.args)):
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
        opts = _options(args, "", ("--reference", "--from"))
        recursive = opts.has("-R", "--recursive")
        targets = opts.args[1:] if prog in ("chmod", "chown", "chgrp") and opts.args else opts.args
        if recursive and any(_is_root_or_home(w.text) for w in targets):
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
        opts = _options(args, "XfFHpqt", ("--method", "--field", "--raw-field", "--input", "--header", "--jq",
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

    def curl(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        opts = _options(args, CURL_VALUES, CURL_LONG)
        methods = [m.upper() for m in opts.values("-X", "--request")]
        if any(name in CURL_SENDS for name, _ in opts.flags):
            self.add("curl (send)", "sends data over the network (curl with data or an upload)")
        elif methods and methods[-1] not in ("GET", "HEAD", "OPTIONS"):
            self.add(f"curl -X {methods[-1]}", f"sends a {methods[-1]} request over the network")
        elif opts.has("-K", "--config"):
            self.add("curl -K", "takes its options from a file this check cannot see")
        self.network_arguments(prog, args, opts.args, xargs)
        for out in opts.values("-o", "--output"):
            self.downloaded.add(_base(out))
        if opts.has("-O", "--remote-name", "--remote-name-all"):
            self.downloaded.update(_base(w.text.split("?")[0]) for w in opts.args)

    def network_arguments(self, prog: str, args: list[Word], urls: list[Word], xargs: bool) -> None:
        """A request built from another command's output, or carrying a credential in its address."""
        if any(w.substituted for w in args):
            self.add(
                f"{prog} $(…)",
                "puts another command's output into a network request (a way to send data out)",
            )
        elif xargs:
            self.add(f"xargs {prog}", "builds a network request from another command's output")
        else:
            secrets = _secret_variables(urls)
            if secrets:
                self.add(f"{prog} ${secrets[0]}", f"puts the credential ${secrets[0]} into a web address")

    def wget(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        opts = _options(args, "OoaPeUtTwQlAIXDRBi", ("--post-data", "--post-file", "--body-data", "--body-file",
                                                      "--method", "--output-document", "--header", "--user",
                                                      "--password", "--directory-prefix"))  # fmt: skip
        methods = [m.upper() for m in opts.values("--method")]
        if opts.has("--post-data", "--post-file", "--body-data", "--body-file") or (methods and methods[-1] not in ("GET", "HEAD")):  # fmt: skip
            self.add("wget (send)", "sends data over the network (wget with a request body)")
        if opts.has("-i", "--input-file", "-e", "--execute"):
            self.add("wget -i", "takes its addresses or commands from elsewhere")
        self.network_arguments(prog, args, opts.args, xargs)
        outputs = opts.values("-O", "--output-document")
        self.downloaded.update(_base(o) for o in outputs if o != "-")
        if not outputs:
            self.downloaded.update(_base(w.text.split("?")[0]) for w in opts.args)

    def httpie(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        positional = [w.text for w in args if not w.text.startswith("-")]
        if positional and positional[0].upper() in ("POST", "PUT", "PATCH", "DELETE"):
            self.add(
                f"{prog} {positional[0].upper()}", f"sends a {positional[0].upper()} request over the network"
            )
        elif any(re.search(r"^[^:=@/]*(:=|=|@)", p) and "==" not in p for p in positional[1:]):
            self.add(f"{prog} (send)", "sends data over the network")
        self.network_arguments(prog, args, args, xargs)

    def rsync(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        texts = [w.text for w in args]
        if any(t.startswith("--delete") or t == "--remove-source-files" for t in texts):
            self.add("rsync --delete", "deletes files at the destination")
        if any(re.match(r"^[^/]*[^/:\\]:", t) or t.startswith("rsync://") for t in texts if not t.startswith("-")) or any(
            t in ("-e", "--rsh") or t.startswith("--rsh=") for t in texts
        ):  # fmt: skip
            self.add("rsync (remote)", "copies files to or from another machine")

    def sql(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        if prog == "sqlite3":  # sqlite3 [-options] DB [SQL …]; -cmd SQL runs first
            texts = [w.text for w in args if not w.text.startswith("-")][1:]
            texts += [args[n + 1].text for n, w in enumerate(args[:-1]) if w.text == "-cmd"]
        elif prog in ("psql",):
            opts = _options(args, "cfdhpUvo", ("--command", "--file", "--dbname", "--host", "--port",
                                             "--username", "--set", "--variable", "--output"))  # fmt: skip
            if opts.values("-f", "--file"):
                self.add(f"{prog} -f", "runs an SQL file this check cannot see")
            texts = opts.values("-c", "--command")
        elif prog in ("mysql", "mariadb"):
            opts = _options(args, "ehuPpDS", ("--execute", "--host", "--user", "--port", "--database"))
            texts = opts.values("-e", "--execute")
        elif prog in ("mongo", "mongosh"):
            texts = _options(args, "", ("--eval", "--file")).values("--eval")
            if any(re.search(r"\b(drop|remove|delete|update|insert|replace)", t, re.I) for t in texts):
                self.add(prog, "changes data in a database")
            return
        else:  # redis-cli
            positional = [w.text for w in _options(args, "hpansu", ()).args]
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

    def fed_by_literal(self, cmd: Simple) -> bool:
        """The pipe into ``cmd`` comes from ``echo``/``printf`` with words known now."""
        if cmd.fed_by is None:
            return False
        source = self.script.commands[cmd.fed_by]
        return (
            bool(source.words)
            and _base(source.words[0].text) in ("echo", "printf")
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

    def awk(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        program = next((w.text for w in _options(args, "fvF", ()).args), "")
        if re.search(r"\bsystem\s*\(|\|\s*\"|\"\s*\|&?|getline|ENVIRON", program):
            self.add(prog, f"runs commands or reads the environment from inside an {prog} program")

    def sed(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        program = " ".join(w.text for w in args if not w.text.startswith("-"))
        if re.search(r"(^|[;}\s/])e(\s|$|;)|/e\b|\bw\s+/", program) and prog == "sed":
            self.add("sed e", "runs commands or writes files from a sed script")

    def cp(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        texts = [w.text for w in args if not w.text.startswith("-")]
        if prog == "cp" and texts[:1] == ["/dev/null"] and len(texts) > 1:
            self.add("cp /dev/null", f"empties the file {texts[-1]}")
        if prog == "mv" and texts and texts[-1] == "/dev/null":
            self.add("mv /dev/null", "throws files away (mv to /dev/null)")

    def export(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        for w in args:
            self.code_variable(w.text)

    def tar(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        texts = [w.text for w in args]
        runs = ("--to-command", "--checkpoint-action", "--use-compress-program", "--rsh-command",
                "--info-script", "--new-volume-script", "-I", "-F")  # fmt: skip
        if any(t.split("=", 1)[0] in runs for t in texts):
            self.add("tar (runs a program)", "makes tar run another program")
        if "--remove-files" in texts:
            self.add("tar --remove-files", "deletes the files it archives")

    def dropdb(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        self.add(prog, f"deletes a database or account ({prog})")

    RULES = {
        "rm": rm, "find": find, "shred": shred, "srm": shred, "truncate": truncate, "dd": dd,
        "chmod": chmod, "chown": chmod, "chgrp": chmod,
        "kill": kill, "killall": kill, "pkill": kill, "killall5": kill,
        "crontab": crontab, "at": crontab, "batch": crontab, "systemctl": systemctl, "service": systemctl,
        "init": systemctl, "telinit": systemctl, "git": git, "gh": gh, "curl": curl, "wget": wget,
        "http": httpie, "https": httpie, "xh": httpie, "xhs": httpie, "rsync": rsync,
        "sqlite3": sql, "psql": sql, "mysql": sql, "mariadb": sql, "mongo": sql, "mongosh": sql,
        "redis-cli": sql, "eval": eval_, "source": source, ".": source, "trap": trap,
        "awk": awk, "gawk": awk, "mawk": awk, "nawk": awk, "sed": sed, "cp": cp, "mv": cp,
        "dropdb": dropdb, "dropuser": dropdb, "export": export, "declare": export, "typeset": export,
        "readonly": export, "local": export, "tar": tar,
    }  # fmt: skip

    # --- shells and interpreters -------------------------------------------------------------------
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

    def stdin_program(self, cmd: Simple, prog: str) -> None:
        body, piped = self.stdin_code(cmd)
        if body is not None:
            self.inline_code(prog, "stdin", body, False)
        elif piped:
            self.add(f"| {prog}", f"runs whatever the command before it prints, as {prog} code")

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

    def script_file(self, prog: str, script: Word, *, shell: bool) -> None:
        """A script a shell or interpreter runs: judged by its text when this very line wrote it."""
        name = _base(script.text)
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

    def inline_code(self, prog: str, flag: str, code: str, dynamic: bool) -> None:
        if dynamic:
            self.add(None, f"runs {prog} code that is only known when it runs")
            return
        found = CODE_DANGER.search(code)
        if found:
            self.add(f"{prog} {flag}", f"runs inline {prog} code that can delete files, run programs, read credentials or reach the network ({found.group().strip()})")  # fmt: skip

    # --- packages and clouds -----------------------------------------------------------------------
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


def judge(script: Script) -> list[Finding]:
    """Every finding for a parsed command line, in order (duplicates removed)."""
    seen: set[tuple[str | None, str]] = set()
    out: list[Finding] = []
    for finding in Judge(script).run():
        if (finding.key, finding.why) not in seen:
            seen.add((finding.key, finding.why))
            out.append(finding)
    return out
