"""Where the agent's tools act: a per-thread file tree and a shell, behind a small provider interface.

Tools never touch the filesystem or spawn processes themselves; they call a :class:`Sandbox`. Two
implementations exist, chosen by ``sandbox.mode`` (see :func:`agent.sandboxes.build_sandbox_provider`):

* ``bwrap`` (the default, :mod:`agent.sandbox_bwrap`): every command runs under bubblewrap in fresh
  mount/PID/IPC/UTS namespaces, never the host's network, showing only read-only system directories and
  this thread's ``/mnt/user-data`` — not the service's files, database, environment or other threads.
* ``host`` (:class:`LocalSandbox`, opt-in only): commands run as the service's own user on the host.

File tools run on the host side for both, confined to the thread's tree by :meth:`LocalSandbox.resolve`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from agent.cgroups import Cgroups
from agent.command_guard import CommandGuard, RunPlan
from agent.paths import VIRTUAL_ROOT, ThreadPaths
from agent.quota import DiskQuota
from agent.skills import SKILLS_ROOT
from config.schema import SandboxLimits
from config.secrets import CREDENTIAL_URL, SecretMasker, is_secret_name

log = logging.getLogger(__name__)

#: How long to keep reading output after the command's shell exited and its process group was killed.
#: Only a process that escaped the group (its own ``setsid``, host mode) can hold the pipe that long.
KILL_GRACE_SECONDS = 0.5
#: Where writes are allowed; ``uploads/`` keeps what people sent exactly as they sent it.
WRITABLE_AREAS = ("workspace", "outputs")


class SandboxError(Exception):
    """A tool request the sandbox refuses; the message is shown to the model as the tool result."""


@dataclass(slots=True)
class CommandResult:
    """What one shell command produced. ``output`` is already bounded and masked."""

    output: str
    exit_code: int | None
    timed_out: bool = False
    truncated: bool = False


class Launched(ABC):
    """One started command, whichever way it was started: what :meth:`LocalSandbox.run` watches."""

    #: The command's process group (its first process) as the service sees it; 0 while unknown.
    pid: int
    #: Its stdout and stderr together.
    output: asyncio.StreamReader
    #: Resolves when the command's shell exits (not when the pipe closes: background jobs may hold it).
    exited: asyncio.Future[None]
    #: Said after the output when the command ended for a reason of the sandbox's own.
    note: str = ""

    @property
    @abstractmethod
    def returncode(self) -> int | None: ...

    @abstractmethod
    def kill(self) -> None:
        """Kill the command and everything it started, without waiting (``release``'s safety net)."""

    @abstractmethod
    async def finish(self) -> None:
        """After the exit, a timeout or a cancel: end everything the command started, and wait for that."""

    def notes(self) -> list[str]:
        """Lines said after the result (what the egress proxy refused while the command ran)."""
        return []


class ProcessLaunch(Launched):
    """A command that is a child process of the service (host mode)."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        exited: asyncio.Future[None],
        output: asyncio.StreamReader | None = None,
    ) -> None:
        output = output or process.stdout
        assert output is not None
        self.process = process
        self.pid = process.pid
        self.output = output
        self.exited = exited

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def kill(self) -> None:
        _kill_group(self.pid)

    async def finish(self) -> None:
        _kill_group(self.pid)
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await _reap(self.process)


class LiveProcess:
    """A process started by :meth:`Sandbox.start_process`: its stdin and stdout are live pipes, its
    stderr is ``launched.output``. It runs under the same limits, cgroup, network rules and kill-on-release
    as a ``bash`` command, but without a time limit of its own: :meth:`close` ends it and what it started.
    """

    def __init__(
        self,
        launched: Launched,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        on_close: Callable[[], Awaitable[None]],
    ) -> None:
        self.launched = launched
        self.stdin = stdin
        self.stdout = stdout
        self._on_close = on_close
        self._closed = False
        #: The end of what it wrote to stderr, for saying why it failed.
        self.stderr_tail = bytearray()

    @property
    def exited(self) -> asyncio.Future[None]:
        return self.launched.exited

    @property
    def returncode(self) -> int | None:
        return self.launched.returncode

    def said(self) -> str:
        """The last line or two it wrote to stderr."""
        lines = self.stderr_tail.decode(errors="replace").strip().splitlines()
        return " ".join(lines[-2:])

    async def close(self) -> None:
        """Kill the process and everything it started, and give its sandbox slot back (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.stdin.close()
        await asyncio.shield(self._on_close())


@dataclass(slots=True)
class DirEntry:
    name: str
    is_dir: bool
    size: int


def scrubbed_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without anything that looks like a credential, by name or by value."""
    return {
        name: value
        for name, value in base.items()
        if not is_secret_name(name) and not CREDENTIAL_URL.match(value.strip())
    }


class StreamMasker:
    """Masks secrets in streamed text without ever emitting a secret split across two chunks.

    It holds back only the longest tail of the text so far that could still grow into a secret (a
    prefix of one), so ordinary text streams without delay however long the secrets are. What it holds is
    kept unmasked: masking it early would replace a shorter secret inside a longer one that has not
    fully arrived yet, and the rest of the longer one would then be shown.
    """

    def __init__(self, masker: SecretMasker) -> None:
        self.masker = masker
        self.pending = ""

    def _held(self, text: str) -> int:
        """How many trailing characters of ``text`` are the start of some secret."""
        longest = 0
        for secret in self.masker.values:
            tail = text[-(len(secret) - 1) :] if len(secret) > 1 else ""
            start = tail.find(secret[0])
            # Leftmost candidate first: the first tail that starts the secret is the longest one.
            while start != -1 and len(tail) - start > longest:
                if secret.startswith(tail[start:]):
                    longest = len(tail) - start
                    break
                start = tail.find(secret[0], start + 1)
        return longest

    def _clear_of_secrets(self, text: str, cut: int) -> int:
        """``cut`` moved back so that no whole secret in ``text`` is split by it."""
        moved = True
        while moved:
            moved = False
            for secret in self.masker.values:
                lo = max(0, cut - len(secret) + 1)
                start = text.find(secret, lo, cut + len(secret) - 1)
                if start != -1 and start < cut:
                    cut, moved = start, True
        return cut

    def feed(self, text: str) -> str:
        if not self.masker.values:
            return text
        raw = self.pending + text
        cut = self._clear_of_secrets(raw, len(raw) - self._held(raw))
        self.pending = raw[cut:]
        return self.masker(raw[:cut])

    def flush(self) -> str:
        out, self.pending = self.masker(self.pending), ""
        return out


class Sandbox(ABC):
    """One thread's view of the world: ``/mnt/user-data/{workspace,uploads,outputs}`` and a shell."""

    @abstractmethod
    def resolve(self, path: str) -> Path:
        """The real path for an agent-visible path; raises :class:`SandboxError` for anything outside."""

    @abstractmethod
    def virtual(self, real: Path) -> str:
        """The agent-visible path of a real path inside the tree."""

    @abstractmethod
    def outputs_dir(self) -> Path: ...

    @abstractmethod
    async def list_dir(self, path: str) -> list[DirEntry]: ...

    @abstractmethod
    async def read_text(self, path: str, max_chars: int) -> tuple[str, bool]:
        """The file's text (and whether it was cut at ``max_chars``)."""

    @abstractmethod
    async def read_bytes(self, path: str, max_bytes: int) -> bytes:
        """A whole file's bytes; refuses files larger than ``max_bytes``."""

    @abstractmethod
    async def write_text(self, path: str, content: str, *, append: bool = False) -> Path: ...

    @abstractmethod
    async def run(
        self, command: str, *, secrets: Mapping[str, str], time_limit: float, max_output: int
    ) -> CommandResult:
        """Run a shell command in the workspace. Cancelling the call must kill everything it started."""

    async def release(self) -> None:
        """The turn is over: end anything still running for it (a safety net behind ``run``)."""
        return None

    async def start_process(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, mounts: Sequence[str] = ()
    ) -> LiveProcess:
        """Start ``argv`` in the workspace with live stdin/stdout (a coding agent spoken to over ACP).

        ``env`` is added to this process's environment alone (its API key); ``mounts`` are host paths it
        may read, bound read-only in a sandbox of its own (bwrap mode; host mode sees them anyway).
        """
        raise SandboxError("this sandbox cannot run a process with live input")

    def agent_cwd(self) -> str:
        """The workspace as a process started by :meth:`start_process` sees it."""
        return f"{VIRTUAL_ROOT}/workspace"

    def from_agent_path(self, path: str) -> str:
        """An absolute path as such a process sees it, as the agent-visible path :meth:`resolve` takes."""
        return path

    async def deliverable(self, files: Iterable[Path]) -> list[Path]:
        """The presented files that are still plain files inside ``outputs/`` (no symlink on the way)."""
        outputs = self.outputs_dir()

        def check() -> list[Path]:
            kept = []
            for real in files:
                try:
                    plain = real.resolve(strict=True) == real and not real.is_symlink() and real.is_file()
                except (OSError, RuntimeError):
                    plain = False
                if plain and outputs in real.parents:
                    kept.append(real)
                else:
                    log.warning("not delivering %s: it is no longer a plain file in outputs/", real.name)
            return kept

        return await asyncio.to_thread(check)


class SandboxUnavailable(RuntimeError):
    """The configured sandbox cannot run on this machine; the message says how to fix it, in one line."""


class SandboxProvider(ABC):
    """Hands out a :class:`Sandbox` per thread (a container provider would start/reuse a container here)."""

    #: What ``/health`` and ``doctor`` report, and what the logs say at start-up.
    mode: str = "custom"

    async def start(self) -> None:
        """Check that this provider can run commands here; raise :class:`SandboxUnavailable` if not."""
        return None

    @abstractmethod
    async def acquire(self, paths: ThreadPaths) -> Sandbox: ...

    @abstractmethod
    def guide(self) -> str:
        """What the model is told about its environment; it must be true for this provider."""

    def limits_report(self) -> dict[str, object]:
        """Which protections and limits are in force, for ``/health`` and ``doctor`` (empty: unknown)."""
        return {}

    async def close(self) -> None:
        return None


class LocalSandbox(Sandbox):
    """The thread's tree on the host; commands run as host processes in their own process group.

    This is ``sandbox.mode: host``: no isolation beyond the file tools' path rules. The bubblewrap sandbox
    (:class:`agent.sandbox_bwrap.BwrapSandbox`) reuses the file side and replaces how commands start.
    """

    def __init__(
        self,
        paths: ThreadPaths,
        *,
        base_env: Mapping[str, str] | None = None,
        limits: SandboxLimits | None = None,
        skills_dir: Path | None = None,
        cgroups: Cgroups | None = None,
    ) -> None:
        self.paths = paths
        self.root = paths.root.resolve()
        self.base_env = scrubbed_environment(os.environ if base_env is None else base_env)
        self.limits = limits
        self.cgroups = cgroups
        #: The disk quota over workspace/ and outputs/. A service that is not root cannot read a
        #: directory a command made unreadable (chmod 000), so it gives itself read access back.
        self.quota = (
            DiskQuota(
                limits.disk_mb,
                [self.root / name for name in WRITABLE_AREAS],
                fix_permissions=os.geteuid() != 0,
            )
            if limits is not None
            else None
        )
        #: Read-only skill files, seen as /mnt/skills (None when the server has no skills).
        self.skills = skills_dir.resolve() if skills_dir is not None and skills_dir.is_dir() else None
        self._live: set[Launched] = set()

    # --- paths -------------------------------------------------------------------------------------
    def resolve(self, path: str) -> Path:
        raw = (path or "").strip()
        if not raw:
            raise SandboxError("no path given")
        if "\x00" in raw:
            raise SandboxError("paths cannot contain NUL bytes")
        pure = PurePosixPath(raw)
        if ".." in pure.parts:
            raise SandboxError(f"'..' is not allowed in paths: {raw}")
        if not pure.is_absolute():
            pure = PurePosixPath(VIRTUAL_ROOT) / "workspace" / pure
        mount = next(
            (m for m in self._mounts() if pure == PurePosixPath(m[0]) or PurePosixPath(m[0]) in pure.parents),
            None,
        )
        if mount is None:
            where = " or ".join(v for v, _ in self._mounts())
            raise SandboxError(f"{raw} is outside {where}; only files under it are reachable")
        virtual_root, real_root = mount
        candidate = real_root.joinpath(*pure.relative_to(virtual_root).parts)
        # Follow symlinks: the real target must stay inside the same tree.
        real = candidate.resolve()
        if real != real_root and real_root not in real.parents:
            raise SandboxError(f"{raw} leads outside {virtual_root} (through a symlink); refused")
        return real

    def _mounts(self) -> list[tuple[str, Path]]:
        mounts = [(VIRTUAL_ROOT, self.root)]
        if self.skills is not None:
            mounts.append((SKILLS_ROOT, self.skills))
        return mounts

    def virtual(self, real: Path) -> str:
        resolved = real.resolve()
        for virtual_root, real_root in self._mounts():
            if resolved == real_root or real_root in resolved.parents:
                relative = resolved.relative_to(real_root)
                return virtual_root if not relative.parts else f"{virtual_root}/{relative.as_posix()}"
        raise ValueError(f"{real} is not inside the sandbox's trees")

    def outputs_dir(self) -> Path:
        return self.paths.outputs.resolve()

    # --- files -------------------------------------------------------------------------------------
    async def list_dir(self, path: str) -> list[DirEntry]:
        target = self.resolve(path)

        def listing() -> list[DirEntry]:
            if not target.exists():
                raise SandboxError(f"{path} does not exist")
            if not target.is_dir():
                raise SandboxError(f"{path} is a file, not a directory")
            entries = []
            for child in sorted(target.iterdir(), key=lambda p: p.name):
                is_dir = child.is_dir()
                size = 0 if is_dir else child.lstat().st_size
                entries.append(DirEntry(child.name, is_dir, size))
            return entries

        return await asyncio.to_thread(listing)

    async def read_text(self, path: str, max_chars: int) -> tuple[str, bool]:
        target = self.resolve(path)

        def read() -> tuple[str, bool]:
            if not target.is_file():
                raise SandboxError(f"{path} is not a file" if target.exists() else f"{path} does not exist")
            with target.open("r", encoding="utf-8", errors="replace") as handle:
                text = handle.read(max_chars + 1)
            return text[:max_chars], len(text) > max_chars

        return await asyncio.to_thread(read)

    async def read_bytes(self, path: str, max_bytes: int) -> bytes:
        target = self.resolve(path)

        def read() -> bytes:
            if not target.is_file():
                raise SandboxError(f"{path} is not a file")
            if target.stat().st_size > max_bytes:
                raise SandboxError(f"{path} is larger than {max_bytes} bytes")
            return target.read_bytes()

        return await asyncio.to_thread(read)

    async def write_text(self, path: str, content: str, *, append: bool = False) -> Path:
        target = self.resolve(path)
        if self.root / "uploads" in [target, *target.parents]:
            raise SandboxError("uploads/ holds the files people sent and is read-only; write to workspace/")
        writable = [self.root / name for name in WRITABLE_AREAS]
        if not any(area in target.parents for area in writable):
            raise SandboxError("files can only be written inside workspace/ or outputs/")

        def write() -> Path:
            if target.is_dir():
                raise SandboxError(f"{path} is a directory")
            if self.quota is not None:
                refusal = self.quota.refuse_write(target, len(content.encode()), append=append)
                if refusal is not None:
                    raise SandboxError(refusal)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("a" if append else "w", encoding="utf-8") as handle:
                handle.write(content)
            self._adopt(target)
            return target

        return await asyncio.to_thread(write)

    def _adopt(self, written: Path) -> None:
        """Hook: make a file the file tools wrote usable by the command side (the bwrap user)."""
        return None

    # --- commands ----------------------------------------------------------------------------------
    def _environment(self, secrets: Mapping[str, str]) -> dict[str, str]:
        env = dict(self.base_env)
        env.update(
            HOME=str(self.paths.workspace.resolve()),
            PWD=str(self.paths.workspace.resolve()),
            USER_DATA=VIRTUAL_ROOT,
        )
        env.setdefault("PATH", os.defpath)
        env.update(secrets)  # injected for this run only; never stored
        return env

    def _argv(self, command: str, plan: RunPlan) -> list[str]:
        # The agent writes /mnt/user-data/...; on the host that tree lives under the thread's root.
        script = command.replace(VIRTUAL_ROOT, str(self.root))
        if self.skills is not None:
            script = script.replace(SKILLS_ROOT, str(self.skills))
        # No process-count limit here: on the host it would count every process of the service's user.
        prefix = limits_prefix(self.limits, processes=False, file_kb=plan.file_kb)
        return ["/bin/bash", "-c", prefix, "bash", script]

    def _to_virtual(self, text: str) -> str:
        text = text.replace(str(self.root), VIRTUAL_ROOT)
        return text.replace(str(self.skills), SKILLS_ROOT) if self.skills is not None else text

    async def _launch(
        self,
        command: str,
        plan: RunPlan,
        env: Mapping[str, str],
        workspace: Path,
        stdio: tuple[int, int] | None = None,
        mounts: Sequence[str] = (),
    ) -> Launched:
        """Start the command (host mode: a process of the service's own, in a session of its own).

        ``stdio`` (a read end and a write end): the command's stdin and stdout; its output is then stderr.
        """
        process, exited = await spawn(
            plan.wrap(self._argv(command, plan)),
            env=env,
            cwd=workspace,
            stdio=stdio,
        )
        return ProcessLaunch(process, exited, process.stderr if stdio is not None else None)

    async def _start(
        self,
        command: str,
        env: Mapping[str, str],
        stdio: tuple[int, int] | None = None,
        mounts: Sequence[str] = (),
    ) -> tuple[Launched, CommandGuard, RunPlan]:
        """Start a command under the sandbox's limits (quota, cgroup) and track it for :meth:`release`.

        :meth:`run` and :meth:`start_process` both start this way, so a live process gets exactly a
        ``bash`` command's limits and kill-on-release. A start that fails gives the guard's slot back.
        """
        workspace = self.paths.workspace
        workspace.mkdir(parents=True, exist_ok=True)
        guard = CommandGuard(self.limits, self.quota, self.cgroups)
        plan = await guard.begin()
        try:
            launched = await self._launch(command, plan, env, workspace, stdio, mounts)
        except BaseException:
            guard.spawned(None)
            await asyncio.shield(guard.end())
            raise
        guard.spawned(launched.pid)
        self._live.add(launched)
        return launched, guard, plan

    async def _stop(self, launched: Launched, guard: CommandGuard) -> None:
        """End everything a command started (even while the caller is cancelled), then its guard."""
        await asyncio.shield(launched.finish())
        await asyncio.shield(guard.end())
        self._live.discard(launched)

    def agent_cwd(self) -> str:
        return str(self.paths.workspace.resolve())

    def from_agent_path(self, path: str) -> str:
        return self._to_virtual(path)

    async def start_process(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, mounts: Sequence[str] = ()
    ) -> LiveProcess:
        in_read, in_write = os.pipe2(os.O_CLOEXEC)
        out_read, out_write = os.pipe2(os.O_CLOEXEC)
        try:
            launched, guard, _plan = await self._start(
                "exec " + shlex.join(argv), self._environment(env or {}), (in_read, out_write), mounts
            )
        except BaseException:
            for fd in (in_write, out_read):
                os.close(fd)
            raise
        finally:
            os.close(in_read)
            os.close(out_write)
        try:
            stdin, stdout, reading = await _connect_pipes(in_write, out_read)
        except BaseException:  # cancelled while connecting: it must not outlive this call
            await self._stop(launched, guard)
            raise

        async def end() -> None:
            await self._stop(launched, guard)
            reading.close()
            drain.cancel()

        live = LiveProcess(launched, stdin, stdout, end)
        drain = asyncio.create_task(_keep_tail(launched.output, live.stderr_tail))
        return live

    async def run(
        self, command: str, *, secrets: Mapping[str, str], time_limit: float, max_output: int
    ) -> CommandResult:
        masker = SecretMasker.of(secrets)
        # Keep a little extra so a secret straddling the cut is masked whole before cutting.
        collector = _BoundedCollector(max_output + masker.longest)
        launched, guard, plan = await self._start(command, self._environment(secrets))
        reader = asyncio.create_task(collector.drain(launched.output))
        timed_out = False
        try:
            try:
                # The shell's exit, not the pipe's end: a background job (`sleep 30 & echo hi`) keeps
                # the pipe open, and waiting for it would hang the turn until the timeout.
                await asyncio.wait_for(asyncio.shield(launched.exited), time_limit)
            except TimeoutError:
                timed_out = True
        finally:
            # Always end everything it started: on timeout, on cancel (/stop), and leftovers after exit.
            await self._stop(launched, guard)
            # Something that left the group (setsid) may still hold the pipe open; don't wait for it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), KILL_GRACE_SECONDS)
            if not reader.done():
                reader.cancel()
        output = masker(self._to_virtual(collector.text()))
        dropped = collector.dropped + max(0, len(output) - max_output)
        output = output[:max_output]
        if dropped:
            output += f"\n… [output cut: about {dropped} more characters]"
        exit_code = None if timed_out else launched.returncode
        if plan.note:
            output = f"{plan.note}\n{output}"
        if timed_out:
            output += f"\n… [stopped: the command ran longer than {time_limit:g} s and was killed]"
        elif launched.note:
            output += f"\n… {launched.note}"
        else:
            output += guard.notice(exit_code, output) or self._limit_notice(exit_code, output)
        if notes := launched.notes():
            output = output.rstrip("\n") + "\n" + "\n".join(notes)
        return CommandResult(output=output, exit_code=exit_code, timed_out=timed_out, truncated=dropped > 0)

    def _limit_notice(self, exit_code: int | None, output: str) -> str:
        """Say plainly which sandbox limit ended a command, so the model can adapt instead of retrying."""
        if self.limits is None or exit_code is None:
            return ""
        signal_number = exit_code - 128 if exit_code > 128 else -exit_code if exit_code < 0 else 0
        if signal_number == signal.SIGXCPU:
            return f"\n… [stopped: the command used more than {self.limits.cpu_seconds} s of CPU time]"
        if signal_number == signal.SIGXFSZ or "File size limit exceeded" in output:
            return f"\n… [stopped: a file grew past the {self.limits.file_size_mb} MB size limit]"
        if "Resource temporarily unavailable" in output and "fork" in output:
            return f"\n… [the sandbox allows at most {self.limits.processes} processes]"
        if "Cannot allocate memory" in output or "MemoryError" in output or "memory exhausted" in output:
            return f"\n… [the sandbox allows at most {self.limits.memory_mb} MB of memory per process]"
        return ""

    async def release(self) -> None:
        for launched in list(self._live):
            launched.kill()
        self._live.clear()


def limits_prefix(limits: SandboxLimits | None, *, processes: bool = True, file_kb: int | None = None) -> str:
    """A bash prologue that sets hard resource limits, then runs the command given as ``$1``.

    ``ulimit`` without ``-S`` sets soft and hard limits together, so the command cannot raise them again.
    ``file_kb`` replaces the per-file limit when less of the disk quota is left.
    """
    if limits is None:
        return 'exec /bin/bash -c "$1"'
    file_kb = limits.file_size_mb * 1024 if file_kb is None else file_kb
    parts = [f"-v {limits.memory_mb * 1024}", f"-f {file_kb}", "-c 0"]
    if processes:
        parts.append(f"-u {limits.processes}")
    # CPU: the soft limit sends SIGXCPU (reported as such); the hard one, a second later, SIGKILL.
    cpu = f"ulimit -S -t {limits.cpu_seconds} && ulimit -H -t {limits.cpu_seconds + 1}"
    return f'ulimit {" ".join(parts)} && {cpu} && exec /bin/bash -c "$1"'


class _ExitAwareProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Stream protocol that also reports the moment the process exits, before its pipes close."""

    def __init__(self, exited: asyncio.Future[None], limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = exited

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


async def spawn(
    argv: list[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    pass_fds: tuple[int, ...] = (),
    stdio: tuple[int, int] | None = None,
) -> tuple[asyncio.subprocess.Process, asyncio.Future[None]]:
    """Start ``argv`` in its own session, stdout+stderr on one pipe; also return a future for its exit.

    ``asyncio``'s ``Process.wait()`` only returns once every pipe is closed; the exit future does not wait
    for children that inherited the pipe. With ``stdio`` (two descriptors) they are its stdin and stdout,
    and the pipe carries stderr alone.
    """
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()
    transport, protocol = await loop.subprocess_exec(
        lambda: _ExitAwareProtocol(exited, 2**16, loop),
        *argv,
        stdin=asyncio.subprocess.DEVNULL if stdio is None else stdio[0],
        stdout=asyncio.subprocess.PIPE if stdio is None else stdio[1],
        stderr=asyncio.subprocess.STDOUT if stdio is None else asyncio.subprocess.PIPE,
        cwd=str(cwd) if cwd is not None else None,
        env=dict(env),
        start_new_session=True,  # its own process group, so we can kill everything it spawns
        pass_fds=pass_fds,
    )
    return asyncio.subprocess.Process(transport, protocol, loop), exited


class _BoundedCollector:
    """Keeps the first ``limit`` characters of a stream and counts the rest (still draining the pipe)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.kept = 0
        self.dropped = 0

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            room = self.limit - self.kept
            if room > 0:
                self.chunks.append(chunk[:room])
                self.kept += min(room, len(chunk))
            self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


async def _connect_pipes(
    in_write: int, out_read: int
) -> tuple[asyncio.StreamWriter, asyncio.StreamReader, asyncio.BaseTransport]:
    """Stream ends for a live process's stdin and stdout pipes (the descriptors are theirs from now)."""
    loop = asyncio.get_running_loop()
    writer_file, reader_file = os.fdopen(in_write, "wb", 0), os.fdopen(out_read, "rb", 0)
    try:
        stdout = asyncio.StreamReader(limit=_LINE_LIMIT, loop=loop)
        reading, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stdout, loop=loop), reader_file
        )
        writing, protocol = await loop.connect_write_pipe(
            lambda: asyncio.streams.FlowControlMixin(loop=loop), writer_file
        )
    except BaseException:
        writer_file.close()
        reader_file.close()
        raise
    return asyncio.StreamWriter(writing, protocol, None, loop), stdout, reading


#: The longest line a live process may write at once (an ACP message with a whole file in it).
_LINE_LIMIT = 16 * 1024 * 1024


async def _keep_tail(stream: asyncio.StreamReader, tail: bytearray, keep: int = 2000) -> None:
    """Drain a live process's stderr (a chatty one never blocks on a full pipe), keeping its end."""
    with contextlib.suppress(OSError, ValueError):
        while chunk := await stream.read(65536):
            tail.extend(chunk)
            del tail[:-keep]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _reap(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        await process.wait()


def file_tree_guide() -> str:
    """The part of the model's guide that is the same for every provider: the thread's file tree."""
    return f"""You can use tools on a private file tree:
- {VIRTUAL_ROOT}/workspace — your working directory (bash runs here; files you make stay for this conversation)
- {VIRTUAL_ROOT}/uploads — files the user sent (read-only)
- {VIRTUAL_ROOT}/outputs — put files for the user here, then call present_files to send them
File tools (ls, read_file, write_file, str_replace) only reach paths under {VIRTUAL_ROOT}."""


class LocalSandboxProvider(SandboxProvider):
    """``sandbox.mode: host``: host processes and files, one tree per thread. Chosen explicitly only."""

    mode = "host"

    def __init__(
        self,
        *,
        base_env: Mapping[str, str] | None = None,
        limits: SandboxLimits | None = None,
        skills_dir: Path | None = None,
    ) -> None:
        self.base_env = base_env
        self.limits = limits
        self.skills_dir = skills_dir
        self.cgroups = Cgroups.detect()

    async def acquire(self, paths: ThreadPaths) -> Sandbox:
        await asyncio.to_thread(paths.ensure)
        return LocalSandbox(
            paths,
            base_env=self.base_env,
            limits=self.limits,
            skills_dir=self.skills_dir,
            cgroups=self.cgroups,
        )

    def limits_report(self) -> dict[str, object]:
        return limits_report(self.limits, self.cgroups, seccomp=False, userns="allowed")

    async def close(self) -> None:
        await asyncio.to_thread(self.cgroups.close)

    def guide(self) -> str:
        return (
            file_tree_guide()
            + "\nbash runs directly on the server as the service's own user, without isolation: treat"
            " everything outside the workspace as someone else's and leave it alone."
        )


def limits_report(
    limits: SandboxLimits | None, cgroups: Cgroups, *, seccomp: bool, userns: str
) -> dict[str, object]:
    """The ``/health`` view of a provider's protections (shared by the providers)."""
    return {
        "seccomp": seccomp,
        "userns": userns,
        "memory": cgroups.describe() if limits is not None else "unlimited",
        "disk_quota_mb": limits.disk_mb if limits is not None else None,
    }
