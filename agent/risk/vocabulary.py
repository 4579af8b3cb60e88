"""The words the rules know: program families, dangerous paths and patterns, option scanning."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agent.shell import Word
from config.secrets import is_secret_name


@dataclass(frozen=True, slots=True)
class Finding:
    #: What "allow for this conversation" covers (program and subcommand); None: never for a session.
    key: str | None
    #: Completes "this command …".
    why: str
    #: On the hard blocklist: refused whatever the approval mode and whoever approves.
    blocked: bool = False


def base_name(word: str) -> str:
    return word.rsplit("/", 1)[-1]


# --- option scanning -------------------------------------------------------------------------------
@dataclass(slots=True)
class Opts:
    flags: list[tuple[str, str | None]] = field(default_factory=list)  # (name, value)
    args: list[Word] = field(default_factory=list)

    def has(self, *names: str) -> bool:
        return any(name in names for name, _ in self.flags)

    def values(self, *names: str) -> list[str]:
        return [value for name, value in self.flags if name in names and value is not None]


def options(words: Sequence[Word], short_values: str = "", long_values: Iterable[str] = ()) -> Opts:
    """GNU-style options: ``-abc``, ``-ovalue``, ``-o value``, ``--name=value``, ``--name value``, ``--``.

    Options may follow positional arguments (GNU tools accept that). ``short_values``: the letters
    that take a value; ``long_values``: the long names that do.
    """
    long_set = set(long_values)
    out = Opts()
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


def secret_variables(words: Iterable[Word]) -> list[str]:
    return sorted({v for w in words for v in w.variables if is_secret_name(v)})


def is_root_or_home(text: str) -> bool:
    """``/``, ``/*``, ``//``, ``/usr``, ``/etc/*``, ``~``, ``$HOME/*`` … (what ``rm -r`` must never get)."""
    path = re.sub(r"/+", "/", text.strip())
    while len(path) > 1 and path.endswith(("/", "/*", "/.")):
        path = path[:-1] if path.endswith("/") else path[:-2]
    return path in ("", "/*") or path in SYSTEM_DIRS or path in HOME_WORDS


# --- the judge -------------------------------------------------------------------------------------
