"""``sandbox.mode: bwrap``: every ``bash`` command runs inside a bubblewrap sandbox.

Why bubblewrap: it is the unprivileged sandbox Flatpak uses, a single small binary from the distribution
(``apt install bubblewrap``), and needs no daemon, image or registry — so isolation can be on by default
on a plain Linux box. A thread's sandbox is built on its first command and kept (``agent/sandbox_pool.py``);
its pid 1 is a runner (``agent/sandbox_runner.py``) that forks each command, which costs about what a
host command does, where building the sandbox per command cost several times that. Each command gets:

* a fresh mount namespace whose root is an empty tmpfs with read-only ``/usr`` (and the ``/bin``,
  ``/lib*`` links), a minimal ``/etc`` (name resolution, TLS roots, time zone, a generated passwd), a
  private ``/tmp``, a minimal ``/dev`` and a ``/proc`` of its own PID namespace — and the thread's tree at
  ``/mnt/user-data`` (``workspace`` and ``outputs`` writable, ``uploads`` read-only). Nothing else of the
  host: not ``data_dir``, the config, other threads, the host's ``/tmp`` or the service's home;
* its own PID, IPC and UTS namespaces (the service's processes and their ``/proc/<pid>/environ`` do not
  exist in there), and never the host's network: an empty network namespace of its own
  (``sandbox.network: false``), or its thread's private one, whose only way out is the service's egress
  proxy (:mod:`agent.egress`; the thread's :class:`~agent.egress.NetworkHolder` keeps it);
* a non-root user: the service's own uid mapped to uid 1000 in a user namespace of its own, or — when
  the service runs as root — a host uid of the thread's own (``sandbox.uid_base`` plus a number derived
  from the thread's path), set with ``setpriv`` after bubblewrap has built the mounts, with no
  capabilities and ``no_new_privs``. Either way one fork bomb cannot starve everybody else's commands:
  the process limit counts that thread's uid (root), or that sandbox's user namespace (an ordinary user,
  Linux 5.14+: the runner sets it inside the namespace, never on bubblewrap);
* hard ``ulimit`` limits (CPU seconds, address space, processes, file size) from ``sandbox.limits``;
* its own environment, the workspace as its working directory and an empty ``/tmp``; when its shell
  exits, or on timeout or ``/stop``, the runner kills every other process in the sandbox, so nothing of
  one command is left running in the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from secrets import token_hex

from agent.cgroups import Cgroups
from agent.command_guard import RunPlan
from agent.egress import (
    RUN_DIR,
    EgressPolicy,
    EgressProxy,
    HolderFailed,
    NetworkHolder,
    egress_mounts,
    proxy_environment,
    relay_argv,
    relay_interpreter,
)
from agent.paths import VIRTUAL_ROOT, ThreadPaths
from agent.sandbox import (
    WRITABLE_AREAS,
    CommandResult,
    Launched,
    LocalSandbox,
    Sandbox,
    SandboxError,
    SandboxProvider,
    SandboxUnavailable,
    file_tree_guide,
    limits_report,
    spawn,
)
from agent.sandbox_pool import SandboxPool, ThreadBox
from agent.sandbox_session import RunnerFailed, RunnerSession
from agent.seccomp import filter_program, native_arch, program_fd
from agent.skills import SKILLS_ROOT
from config.schema import SandboxConfig

log = logging.getLogger(__name__)

#: Host files a shell needs for names, TLS, time zones and dynamic linking; nothing secret.
ETC_FILES = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "gai.conf",
    "host.conf",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "profile",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
    "timezone",
)
#: Top-level system directories: bound read-only, or recreated as the symlinks they are (merged /usr).
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
SANDBOX_UID = 1000
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
RUNNER_SCRIPT = Path(__file__).with_name("sandbox_runner.py")
RUNNER_IN_SANDBOX = f"{RUN_DIR}/runner.py"
INSTALL_HINT = "install it (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap)"


def system_mounts() -> list[str]:
    """Read-only system directories and the minimal /etc every sandbox of ours starts from."""
    args = ["--ro-bind", "/usr", "/usr", "--perms", "0755", "--dir", "/etc"]
    for name in SYSTEM_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{name}"]
    for name in ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


#: Top directories every sandbox of ours has from :func:`system_mounts`, ``--proc`` and ``--dev``, bound
#: read-only: a mount's missing parents are never made inside them.
SYSTEM_TOP = frozenset({"usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "proc", "dev"})
#: Directories a thread sandbox makes itself, with modes of their own.
_PRESENT = frozenset({"/tmp", "/var", "/var/tmp", "/mnt"})


def mount_parents(path: str, made: set[str], present: frozenset[str] = _PRESENT) -> list[str]:
    """``--dir`` for each missing ancestor of a mount point, world-traversable.

    bubblewrap creates missing parents as 0700 root; the sandbox user could not walk through them.
    ``present``: directories the sandbox makes itself (a thread sandbox's, by default; an MCP server's
    sandbox has others), which are not made again.
    """
    args: list[str] = []
    parts = PurePosixPath(path).parts[1:-1]
    for depth in range(1, len(parts) + 1):
        ancestor = "/" + "/".join(parts[:depth])
        if ancestor in made or ancestor in present or parts[0] in SYSTEM_TOP:
            continue
        made.add(ancestor)
        args += ["--perms", "0755", "--dir", ancestor]
    return args


def runner_mounts() -> list[str]:
    """bwrap arguments that put the runner script into a sandbox (read-only)."""
    args = ["--perms", "0755", "--dir", str(Path(RUN_DIR).parent), "--perms", "0755", "--dir", RUN_DIR]
    return [*args, "--ro-bind", str(RUNNER_SCRIPT), RUNNER_IN_SANDBOX]


def runner_interpreter() -> tuple[str, list[str]]:
    """The Python that runs the runner inside every sandbox, and the bwrap arguments it needs there.

    A Python under ``/usr`` is already in every sandbox, so the service's own is used when it lives there,
    else the system's ``python3``; only a machine without one binds the service's interpreter in (as
    for the egress relay, :func:`agent.egress.relay_interpreter`).
    """
    own, mounts = relay_interpreter()
    if not mounts:
        return own, []
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate, []
    return own, mounts


def _sysctl(name: str) -> int | None:
    try:
        return int(Path("/proc/sys", name).read_text().strip())
    except (OSError, ValueError):
        return None


def namespace_hint(as_root: bool) -> str:
    """What to change so bubblewrap can create its namespaces here, read from the kernel's settings.

    Never "use host mode": a sandbox that could work should be made to work, not switched off.
    """
    if as_root:
        return (
            "the service runs as root but may not create namespaces, which happens in a container without "
            "CAP_SYS_ADMIN; run the service as an ordinary user with user namespaces enabled instead, or "
            'allow namespaces in the container (docs/sandbox.md, "Requirements")'
        )
    if _sysctl("kernel/unprivileged_userns_clone") == 0:
        return (
            "unprivileged user namespaces are disabled: enable them with "
            "sysctl -w kernel.unprivileged_userns_clone=1 (and a line in /etc/sysctl.d/ to keep it)"
        )
    if _sysctl("user/max_user_namespaces") == 0:
        return (
            "user namespaces are disabled: enable them with sysctl -w user.max_user_namespaces=15000 "
            "(and a line in /etc/sysctl.d/ to keep it)"
        )
    if _sysctl("kernel/apparmor_restrict_unprivileged_userns") == 1:
        return (
            "AppArmor keeps unprivileged programs from creating user namespaces: give bwrap an AppArmor "
            'profile that allows them (docs/sandbox.md, "Requirements")'
        )
    return (
        "bubblewrap needs unprivileged user namespaces: check that they are enabled "
        "(sysctl user.max_user_namespaces above 0) and, in a container, that its seccomp profile allows "
        'them (docs/sandbox.md, "Requirements")'
    )


class BwrapSandbox(LocalSandbox):
    """The thread's files as in :class:`LocalSandbox`; commands run in the thread's long-lived sandbox."""

    def __init__(self, paths: ThreadPaths, provider: BwrapSandboxProvider) -> None:
        super().__init__(
            paths,
            base_env=provider.base_env,
            limits=provider.config.limits,
            skills_dir=provider.skills_dir,
            cgroups=provider.cgroups,
        )
        self.provider = provider

    def _environment(self, secrets: Mapping[str, str]) -> dict[str, str]:
        # The host's proxy settings (*_proxy) lead nowhere from the sandbox's own network namespace.
        env = {name: value for name, value in self.base_env.items() if not name.lower().endswith("_proxy")}
        workspace = f"{VIRTUAL_ROOT}/workspace"
        env.update(
            HOME=workspace,
            PWD=workspace,
            USER="sandbox",
            LOGNAME="sandbox",
            TMPDIR="/tmp",
            PATH=SANDBOX_PATH,
            USER_DATA=VIRTUAL_ROOT,
        )
        if self.provider.config.network:
            env.update(proxy_environment())  # after the service's own: its proxy settings mean nothing here
        env.update(secrets)  # injected for this run only; never stored
        return env

    async def _launch(
        self,
        command: str,
        plan: RunPlan,
        env: Mapping[str, str],
        workspace: Path,
        stdio: tuple[int, int] | None = None,
        mounts: Sequence[str] = (),
    ) -> Launched:
        """Fork the command in the thread's sandbox (made on its first command, kept while in use).

        With ``mounts`` it runs in a sandbox of the thread's that binds them too (never one for ``bash``).
        """
        try:
            session, box = await self.provider.pool.lease(self.paths, tuple(mounts))
        except RunnerFailed as exc:
            raise SandboxError(f"the sandbox could not be started: {exc}") from None
        try:
            launched = await session.launch(
                ["/bin/bash", "-c", command],
                env,
                f"{VIRTUAL_ROOT}/workspace",
                limits=self._rlimits(plan),
                hold=plan.cgroup is not None,
                stdio=stdio,
            )
        except RunnerFailed as exc:
            raise SandboxError(f"the sandbox could not run the command: {exc}") from None
        launched.watch_egress(box.egress)
        if plan.cgroup is not None:
            try:
                plan.cgroup.add(launched.pid)  # a write or two to the cgroup filesystem: no thread hop
            except OSError as exc:
                log.warning("could not put a command into its cgroup (%s); it did not run", exc)
                launched.go(run=False)
            else:
                launched.go()
        return launched

    def _rlimits(self, plan: RunPlan) -> dict[str, tuple[int, int]]:
        """The hard ``ulimit`` s of :func:`agent.sandbox.limits_prefix`, which the runner's child sets itself
        (one ``exec`` of bash instead of two). CPU: the soft limit sends SIGXCPU, the hard one SIGKILL.
        """
        limits = self.limits
        if limits is None:
            return {}
        file_bytes = (limits.file_size_mb * 1024 if plan.file_kb is None else plan.file_kb) * 1024
        memory = limits.memory_mb * 1024 * 1024
        return {
            "RLIMIT_AS": (memory, memory),
            "RLIMIT_FSIZE": (file_bytes, file_bytes),
            "RLIMIT_CORE": (0, 0),
            "RLIMIT_NPROC": (limits.processes, limits.processes),
            "RLIMIT_CPU": (limits.cpu_seconds, limits.cpu_seconds + 1),
        }

    def _to_virtual(self, text: str) -> str:
        return text

    def agent_cwd(self) -> str:
        return f"{VIRTUAL_ROOT}/workspace"

    def _adopt(self, written: Path) -> None:
        if self.provider.as_root:
            _chown_up_to(written, self.root, self.identity, self.identity)

    @property
    def identity(self) -> int:
        return self.provider.identity(self.paths)


def drop_privileges(uid: int) -> list[str]:
    """``setpriv`` to ``uid`` (and gid) with no groups, no capabilities and ``no_new_privs``."""
    return [
        "/usr/bin/setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]


def _world_readable(path: Path, text: str) -> None:
    """Write one of the sandbox's /etc files as 0644 whatever the umask (systemd's ``UMask=0027`` would
    leave it unreadable to the sandbox's user when the service is root, and ``bash`` without a name)."""
    path.write_text(text)
    path.chmod(0o644)


def _chown_up_to(path: Path, root: Path, uid: int, gid: int) -> None:
    """``path`` and its parents below the writable area now belong to the sandbox user."""
    for item in [path, *path.parents]:
        if item == root:
            break
        with contextlib.suppress(FileNotFoundError):
            os.lchown(item, uid, gid)


def _adopt_tree(paths: ThreadPaths, uid: int) -> None:
    """Give the writable areas to the thread's user (once: a tree already theirs is left alone)."""
    paths.ensure()
    for name in WRITABLE_AREAS:
        area = paths.root / name
        if area.stat().st_uid == uid:
            continue
        os.lchown(area, uid, uid)
        for directory, dirs, files in os.walk(area):
            for entry in (*dirs, *files):
                os.lchown(os.path.join(directory, entry), uid, uid)


class BwrapSandboxProvider(SandboxProvider):
    """The default provider on Linux: long-lived bubblewrap sandboxes per thread, over its own tree."""

    mode = "bwrap"

    def __init__(
        self,
        config: SandboxConfig,
        *,
        base_env: Mapping[str, str] | None = None,
        bwrap: str | None = None,
        skills_dir: Path | None = None,
    ) -> None:
        self.config = config
        self.base_env = base_env
        self.skills_dir = skills_dir
        self.bwrap = bwrap or shutil.which("bwrap") or "bwrap"
        self.as_root = os.geteuid() == 0
        self._etc = Path(tempfile.mkdtemp(prefix="switchboard-sandbox-etc-"))
        self._etc.chmod(0o755)
        _world_readable(self._etc / "hostname", "sandbox\n")
        self._system = system_mounts()
        arch = native_arch()
        #: The seccomp program every command gets (None on a machine without a system call table).
        self.seccomp = filter_program(arch) if arch is not None else None
        #: ``--disable-userns`` (bubblewrap 0.8.0 and later); known once :meth:`start` asked bwrap.
        self.disable_userns = False
        self.cgroups = Cgroups.detect()
        #: The egress proxies' sockets; 0700, only the service enters (each socket is bound in alone).
        self._runtime = Path(tempfile.mkdtemp(prefix="switchboard-egress-"))
        self.policy = EgressPolicy(config.egress)
        self.relay_python, self.relay_mounts = relay_interpreter()
        self.nsenter = shutil.which("nsenter") or "/usr/bin/nsenter"
        self.runner_python = runner_interpreter()
        #: Each thread's long-lived sandboxes.
        self.pool = SandboxPool(self, idle_seconds=config.idle_seconds, max_idle=config.max_idle)

    @property
    def userns_blocked(self) -> bool:
        """Whether a command can create user namespaces (the door to every other kind)."""
        return self.seccomp is not None or (self.disable_userns and not self.as_root)

    def identity(self, paths: ThreadPaths) -> int:
        """The uid (and gid) a thread's commands run as: its own when the service is root."""
        if not self.as_root:
            return SANDBOX_UID
        slot = zlib.crc32(str(paths.root).encode()) % self.config.uid_count
        return self.config.uid_base + slot

    def _identity_files(self, uid: int) -> tuple[Path, Path]:
        """A passwd/group naming only the sandbox user (the host's list of accounts stays outside)."""
        passwd, group = self._etc / f"passwd-{uid}", self._etc / f"group-{uid}"
        if not passwd.exists():
            home = f"{VIRTUAL_ROOT}/workspace"
            _world_readable(group, f"root:x:0:\nsandbox:x:{uid}:\n")
            _world_readable(
                passwd,
                f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}:sandbox:{home}:/bin/bash\n",
            )
        return passwd, group

    def bwrap_args(
        self, root: Path, uid: int, *, seccomp_fd: int | None = None, own_net: bool = True
    ) -> list[str]:
        """The bubblewrap command line for one command over the thread tree at ``root``.

        ``own_net=False``: the command was put into its turn's private network namespace (nsenter).
        """
        args = [
            self.bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "sandbox",
        ]
        # Never the host's network: its loopback services, abstract unix sockets and 169.254.169.254 are
        # not in the command's namespace — an empty one of its own, or the turn's (egress via the proxy).
        if own_net:
            args.append("--unshare-net")
        if not self.as_root:
            args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
            if self.disable_userns:
                # No nested user namespaces (bwrap sets max_user_namespaces to 1 in ours). As root
                # there is no user namespace of ours to limit: the seccomp filter refuses them instead.
                args.append("--disable-userns")
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        args += self._system
        passwd, group = self._identity_files(uid)
        args += ["--ro-bind", str(passwd), "/etc/passwd", "--ro-bind", str(group), "/etc/group"]
        args += ["--ro-bind", str(self._etc / "hostname"), "/etc/hostname"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        # /tmp lives in memory: no bigger than what a command may use in total.
        tmp_size = str(self.config.limits.memory_total_mb * 1024 * 1024)
        args += ["--perms", "1777", "--size", tmp_size, "--tmpfs", "/tmp", "--dir", "/var"]
        args += ["--perms", "1777", "--size", tmp_size, "--tmpfs", "/var/tmp"]
        args += ["--perms", "0755", "--dir", "/mnt", "--perms", "0755", "--dir", VIRTUAL_ROOT]
        args += ["--bind", str(root / "workspace"), f"{VIRTUAL_ROOT}/workspace"]
        args += ["--bind", str(root / "outputs"), f"{VIRTUAL_ROOT}/outputs"]
        args += ["--ro-bind", str(root / "uploads"), f"{VIRTUAL_ROOT}/uploads"]
        args += ["--chdir", f"{VIRTUAL_ROOT}/workspace"]
        return args

    async def start(self) -> None:
        """Prove bubblewrap can build a sandbox here, so a broken set-up fails at start, not mid-chat.

        The check goes through :meth:`acquire`, exactly as a turn does, so what it proves is what a turn
        gets (a check that prepared its tree its own way once passed as root and failed as a user).
        """
        if shutil.which(self.bwrap) is None:
            raise SandboxUnavailable(
                f"sandbox.mode is bwrap but bubblewrap (bwrap) is not installed: {INSTALL_HINT}"
            )
        self.disable_userns = await asyncio.to_thread(_supports_disable_userns, self.bwrap)
        if self.seccomp is None:
            log.warning(
                "no seccomp filter for this machine (%s): sandboxed commands can use every system call",
                os.uname().machine,
            )
        if not self.userns_blocked:
            log.warning("sandboxed commands can create user namespaces (no seccomp filter, bwrap < 0.8.0)")
        if self.cgroups.kind == "none":
            log.warning(
                "sandbox memory is limited per process only (%s); run as root or under systemd with "
                "Delegate=yes for a total per command (sandbox.limits.memory_total_mb)",
                self.cgroups.reason,
            )
        if self.as_root and shutil.which("setpriv", path="/usr/bin") is None:
            raise SandboxUnavailable(
                "sandbox.mode is bwrap and the service runs as root, but /usr/bin/setpriv is missing: "
                "install util-linux (it provides setpriv), or run the service as an ordinary user"
            )
        if self.config.network and shutil.which(self.nsenter) is None:
            raise SandboxUnavailable(
                "sandbox.network is true but nsenter (util-linux) is missing: install util-linux, "
                "or set sandbox.network: false for commands without any network"
            )
        with tempfile.TemporaryDirectory(prefix="switchboard-sandbox-check-") as scratch:
            sandbox_paths = ThreadPaths(Path(scratch), "check", "check")
            sandbox = await self.acquire(sandbox_paths)
            try:
                result = await sandbox.run("echo ok", secrets={}, time_limit=30, max_output=2000)
            except SandboxError as exc:  # the turn's network holder is a bubblewrap too: same causes
                result = CommandResult(output=str(exc), exit_code=None)
            finally:
                await sandbox.release()
                await self.pool.forget(sandbox_paths)
        if result.exit_code != 0 or result.output.strip() != "ok":
            detail = result.output.strip().splitlines()[-1] if result.output.strip() else "no output"
            for prefix in (
                "the sandbox's network could not be set up: ",
                "the sandbox could not be started: ",
            ):
                detail = detail.removeprefix(prefix)
            raise SandboxUnavailable(
                f"sandbox.mode is bwrap but bubblewrap cannot create a sandbox here ({detail}): "
                f"{namespace_hint(self.as_root)}"
            )

    async def open_network(self, paths: ThreadPaths) -> tuple[EgressProxy, NetworkHolder] | None:
        """A thread's egress: a listening proxy, and a private network namespace with the relay in it.

        None with ``sandbox.network: false`` (each sandbox then has an empty network namespace).
        """
        if not self.config.network:
            return None
        uid = self.identity(paths)
        path = self._runtime / f"{token_hex(8)}.sock"
        proxy = EgressProxy(self.policy, path, label=paths.thread_id, owner=uid if self.as_root else None)
        await proxy.start()
        try:
            holder = await NetworkHolder.start(
                self.holder_args(path, uid), nsenter=self.nsenter, join_userns=not self.as_root
            )
        except HolderFailed as exc:
            await proxy.close()
            raise SandboxError(f"the sandbox's network could not be set up: {exc}") from None
        except BaseException:
            await proxy.close()
            raise
        return proxy, holder

    def holder_args(self, socket_path: Path, uid: int) -> list[str]:
        """bubblewrap for a turn's network holder: a new network namespace and the relay, nothing else."""
        args = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
        args += ["--unshare-uts", "--unshare-cgroup-try", "--unshare-net", "--hostname", "sandbox"]
        if not self.as_root:
            args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
        args += [*self._system, "--proc", "/proc", "--dev", "/dev"]
        args += [*egress_mounts(socket_path), *self.relay_mounts]
        if self.as_root:
            args += drop_privileges(uid)
        return [*args, *relay_argv(self.relay_python)]

    async def acquire(self, paths: ThreadPaths) -> Sandbox:
        if self.as_root:
            await asyncio.to_thread(_adopt_tree, paths, self.identity(paths))
        else:
            await asyncio.to_thread(paths.ensure)
        return BwrapSandbox(paths, self)

    def guide(self) -> str:
        network = (
            "It reaches the internet only through an HTTP proxy that is already set in its environment"
            " (HTTP_PROXY/HTTPS_PROXY, which pip, curl and git use); connections that bypass the proxy find"
            " nothing. Nothing of this server (its local services, localhost ports) or of private networks"
            " is reachable from it: the proxy refuses such addresses, and the result says so."
            " localhost inside the sandbox is its own, for servers your command starts itself."
            if self.config.network
            else "It has no network access at all."
        )
        limits = self.config.limits
        total = (
            f" Everything one command starts may use {limits.memory_total_mb} MB of memory together."
            if self.cgroups.kind != "none"
            else ""
        )
        return (
            file_tree_guide()
            + "\nbash runs in an isolated Linux sandbox as an ordinary user: the system directories (/usr) are"
            f" read-only, {VIRTUAL_ROOT} is the only data there is, /tmp is private and emptied after every"
            f" command, and background jobs end when the command returns. {network} Each command is limited"
            f" to {limits.cpu_seconds} s of CPU, {limits.memory_mb} MB of memory per process,"
            f" {limits.processes} processes and {limits.file_size_mb} MB per file.{total} This conversation's"
            f" files (workspace and outputs together) may use at most {limits.disk_mb} MB."
        )

    def limits_report(self) -> dict[str, object]:
        userns = "blocked" if self.userns_blocked else "allowed"
        return limits_report(
            self.config.limits, self.cgroups, seccomp=self.seccomp is not None, userns=userns
        )

    async def open_session(
        self, paths: ThreadPaths, holder: NetworkHolder | None, box: ThreadBox, mounts: tuple[str, ...] = ()
    ) -> RunnerSession:
        """Start one long-lived sandbox over the thread's tree, with the runner as its pid 1."""
        root, uid = paths.root.resolve(), self.identity(paths)
        seccomp_fd = program_fd(self.seccomp) if self.seccomp is not None else None
        pass_fds = (
            *(holder.fds if holder is not None else ()),
            *(() if seccomp_fd is None else (seccomp_fd,)),
        )

        def build(info_fd: int, control_fd: int) -> list[str]:
            return self.runner_args(root, uid, holder, info_fd, control_fd, seccomp_fd, mounts)

        try:
            return await RunnerSession.start(
                build,
                pass_fds=pass_fds,
                env={"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"},
                on_idle=lambda session: self.pool.idle(box, session),
            )
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)

    def runner_args(
        self,
        root: Path,
        uid: int,
        holder: NetworkHolder | None,
        info_fd: int,
        control_fd: int,
        seccomp_fd: int | None,
        mounts: tuple[str, ...] = (),
    ) -> list[str]:
        """The command line of a thread's sandbox: bubblewrap, then the runner as pid 1.

        ``mounts``: host paths bound read-only where they are (a coding agent's install, ``acp.mounts``).
        """
        own = self.bwrap_args(root, uid, seccomp_fd=seccomp_fd, own_net=holder is None)
        args = [*(holder.prefix if holder is not None else []), *own]
        args += ["--as-pid-1", "--info-fd", str(info_fd), *runner_mounts(), *self.runner_python[1]]
        if self.skills_dir is not None and self.skills_dir.is_dir():
            args += ["--ro-bind", str(self.skills_dir.resolve()), SKILLS_ROOT]
        made: set[str] = set()
        for path in mounts:
            args += [*mount_parents(path, made), "--ro-bind", path, path]
        if self.as_root:
            args += drop_privileges(uid)
        return [*args, self.runner_python[0], "-I", "-S", "-B", RUNNER_IN_SANDBOX, str(control_fd)]

    async def close(self) -> None:
        await self.pool.close()
        await asyncio.to_thread(shutil.rmtree, self._etc, True)
        await asyncio.to_thread(self.cgroups.close)
        await asyncio.to_thread(shutil.rmtree, self._runtime, True)


def _supports_disable_userns(bwrap: str) -> bool:
    """bubblewrap 0.8.0 added ``--disable-userns``; older versions do not list it in ``--help``."""
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--disable-userns" in done.stdout + done.stderr


async def check_bwrap(config: SandboxConfig) -> dict[str, object]:
    """Start-up check used by the CLI before anything else starts: raises :class:`SandboxUnavailable`.

    Returns the protections in force (:meth:`BwrapSandboxProvider.limits_report`), for ``doctor``.
    """
    provider = BwrapSandboxProvider(config)
    try:
        await provider.start()
        return provider.limits_report()
    finally:
        await provider.close()


__all__ = ["BwrapSandbox", "BwrapSandboxProvider", "check_bwrap", "spawn"]
