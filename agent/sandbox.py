"""Where the agent's tools act: a per-thread file tree and a shell, behind a small provider interface.

Tools never touch the filesystem or spawn processes themselves; they call a :class:`Sandbox`. The local
implementation (:class:`LocalSandbox`) works on the host under ``<data_dir>/users/<owner>/threads/<thread>
/user-data``. A container implementation can later provide the same methods (running ``bash`` through
``docker exec`` and reading files through the container's mount) without any tool changing.

What the local sandbox does and does not isolate is written down honestly in docs/sandbox.md: file tools
are confined to the thread's tree, but ``bash`` runs as the service's own user.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from agent.paths import VIRTUAL_ROOT, ThreadPaths

MASK = "***"
# Names that look like credentials. Matched against the upper-cased variable name.
_SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSW|PASSPHRASE|PWD$|CREDENTIAL|AUTH|COOKIE|SESSION|DSN|DATABASE_URL|DB_URL|_URI$|PRIVATE)"
)
# Values that carry credentials even under an innocent name (``scheme://user:pass@host``).
_CREDENTIAL_URL = re.compile(r"^[a-z][a-z0-9+.\-]*://[^/\s:@]+:[^/\s@]+@", re.I)
# A few harmless names that contain a secret-looking fragment.
_ALLOWED_NAMES = frozenset({"PWD", "OLDPWD"})
KILL_GRACE_SECONDS = 2.0


class SandboxError(Exception):
    """A tool request the sandbox refuses; the message is shown to the model as the tool result."""


@dataclass(slots=True)
class CommandResult:
    """What one shell command produced. ``output`` is already bounded and masked."""

    output: str
    exit_code: int | None
    timed_out: bool = False
    truncated: bool = False


@dataclass(slots=True)
class DirEntry:
    name: str
    is_dir: bool
    size: int


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return upper not in _ALLOWED_NAMES and bool(_SECRET_NAME.search(upper))


def scrubbed_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without anything that looks like a credential, by name or by value."""
    return {
        name: value
        for name, value in base.items()
        if not is_secret_name(name) and not _CREDENTIAL_URL.match(value.strip())
    }


@dataclass(slots=True)
class SecretMasker:
    """Replaces every secret value with ``***``. Longest first, so a secret containing another is whole."""

    values: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, secrets: Mapping[str, str]) -> SecretMasker:
        # Very short values would mask ordinary words; they are still injected, just not masked.
        values = sorted({v for v in secrets.values() if len(v) >= 4}, key=len, reverse=True)
        return cls(values)

    @property
    def longest(self) -> int:
        return len(self.values[0]) if self.values else 0

    def __call__(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, MASK)
        return text


class StreamMasker:
    """Masks secrets in streamed text without ever emitting a secret split across two chunks.

    It holds back the last ``len(longest secret) - 1`` characters until more text (or the end) arrives.
    """

    def __init__(self, masker: SecretMasker) -> None:
        self.masker = masker
        self.hold = max(0, masker.longest - 1)
        self.pending = ""

    def feed(self, text: str) -> str:
        if not self.masker.values:
            return text
        self.pending = self.masker(self.pending + text)
        if len(self.pending) <= self.hold:
            return ""
        cut = len(self.pending) - self.hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

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


class SandboxProvider(ABC):
    """Hands out a :class:`Sandbox` per thread (a container provider would start/reuse a container here)."""

    @abstractmethod
    async def acquire(self, paths: ThreadPaths) -> Sandbox: ...

    async def close(self) -> None:
        return None


class LocalSandbox(Sandbox):
    """The thread's tree on the host; commands run as host processes in their own process group."""

    def __init__(self, paths: ThreadPaths, *, base_env: Mapping[str, str] | None = None) -> None:
        self.paths = paths
        self.root = paths.root.resolve()
        self.base_env = scrubbed_environment(os.environ if base_env is None else base_env)
        self._live: set[int] = set()

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
        root = PurePosixPath(VIRTUAL_ROOT)
        if pure != root and root not in pure.parents:
            raise SandboxError(f"{raw} is outside {VIRTUAL_ROOT}; only files under it are reachable")
        relative = pure.relative_to(root)
        candidate = self.root.joinpath(*relative.parts)
        # Follow symlinks: the real target must stay inside this thread's tree.
        real = candidate.resolve()
        if real != self.root and self.root not in real.parents:
            raise SandboxError(f"{raw} leads outside {VIRTUAL_ROOT} (through a symlink); refused")
        return real

    def virtual(self, real: Path) -> str:
        relative = real.resolve().relative_to(self.root)
        return VIRTUAL_ROOT if not relative.parts else f"{VIRTUAL_ROOT}/{relative.as_posix()}"

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
        writable = [self.root / name for name in ("workspace", "uploads", "outputs")]
        if not any(area in target.parents for area in writable):
            raise SandboxError("files can only be written inside workspace/, uploads/ or outputs/")

        def write() -> Path:
            if target.is_dir():
                raise SandboxError(f"{path} is a directory")
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("a" if append else "w", encoding="utf-8") as handle:
                handle.write(content)
            return target

        return await asyncio.to_thread(write)

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

    def _to_real(self, command: str) -> str:
        # The agent writes /mnt/user-data/...; on the host that tree lives under the thread's root.
        return command.replace(VIRTUAL_ROOT, str(self.root))

    def _to_virtual(self, text: str) -> str:
        return text.replace(str(self.root), VIRTUAL_ROOT)

    async def run(
        self, command: str, *, secrets: Mapping[str, str], time_limit: float, max_output: int
    ) -> CommandResult:
        workspace = self.paths.workspace
        workspace.mkdir(parents=True, exist_ok=True)
        process = await asyncio.create_subprocess_exec(
            "/bin/bash",
            "-c",
            self._to_real(command),
            cwd=str(workspace),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self._environment(secrets),
            start_new_session=True,  # its own process group, so we can kill everything it spawns
        )
        masker = SecretMasker.of(secrets)
        # Keep a little extra so a secret straddling the cut is masked whole before cutting.
        self._live.add(process.pid)
        collector = _BoundedCollector(max_output + masker.longest)
        assert process.stdout is not None
        reader = asyncio.create_task(collector.drain(process.stdout))
        timed_out = False
        try:
            try:
                await asyncio.wait_for(process.wait(), time_limit)
            except TimeoutError:
                timed_out = True
        finally:
            # Always reap the whole group: on timeout, on cancel (/stop), and leftovers after exit.
            _kill_group(process.pid)
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await asyncio.shield(_reap(process))
            # Something that left the group (setsid) may still hold the pipe open; don't wait forever.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), KILL_GRACE_SECONDS)
            if not reader.done():
                reader.cancel()
            self._live.discard(process.pid)
        output = masker(self._to_virtual(collector.text()))
        dropped = collector.dropped + max(0, len(output) - max_output)
        output = output[:max_output]
        if dropped:
            output += f"\n… [output cut: about {dropped} more characters]"
        if timed_out:
            output += f"\n… [stopped: the command ran longer than {time_limit:g} s and was killed]"
        return CommandResult(
            output=output,
            exit_code=None if timed_out else process.returncode,
            timed_out=timed_out,
            truncated=dropped > 0,
        )

    async def release(self) -> None:
        for pid in list(self._live):
            _kill_group(pid)
        self._live.clear()


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


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _reap(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        await process.wait()


class LocalSandboxProvider(SandboxProvider):
    """The default provider: host processes and files, one tree per thread."""

    def __init__(self, *, base_env: Mapping[str, str] | None = None) -> None:
        self.base_env = base_env

    async def acquire(self, paths: ThreadPaths) -> Sandbox:
        await asyncio.to_thread(paths.ensure)
        return LocalSandbox(paths, base_env=self.base_env)
