"""The service's side of one long-lived bubblewrap sandbox: start it, run commands in it, end it.

A :class:`RunnerSession` is one ``bwrap … --as-pid-1 python3 runner.py`` (:mod:`agent.sandbox_runner`)
and the control socket to it. :meth:`RunnerSession.launch` hands the runner one command with its output
pipe and a hello socket, learns the command's pid from the kernel (``SO_PASSCRED`` on the hello
socket translates it into the service's PID namespace), lets the caller put it into its cgroup, and
returns a :class:`RunnerCommand` whose ``exited`` future resolves when the command's shell exits.

If the runner dies (the kernel's OOM killer, an operator, a bug) the control socket closes: the
command in flight ends with 128 + 9 and a sentence saying so, the session is marked dead, and the
next command gets a new sandbox (:mod:`agent.sandbox_pool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import struct
from collections.abc import Callable, Mapping

from agent.egress import EgressProxy
from agent.sandbox import Launched

log = logging.getLogger(__name__)

HEADER = struct.Struct(">I")
#: How long a new sandbox may take to say it is ready (a loaded machine starts Python slowly).
START_SECONDS = 30.0
#: How long a killed command may take to be reported gone before its whole sandbox is ended.
KILL_SECONDS = 5.0
#: What a command that lost its sandbox mid-way reports (SIGKILL, as bubblewrap reported it).
LOST_CODE = 128 + signal.SIGKILL
UCRED = struct.Struct("3i")


class RunnerFailed(Exception):
    """The sandbox did not start; the message is bubblewrap's (or the runner's) last words."""


class RunnerCommand(Launched):
    """One command in a runner's sandbox."""

    def __init__(self, session: RunnerSession, output: asyncio.StreamReader, pid: int) -> None:
        self.session = session
        self.output = output
        self.pid = pid
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[None] = loop.create_future()
        self.code: int | None = None
        #: Said after the output when the sandbox itself ended under the command.
        self.note = ""
        self._hello: socket.socket | None = None
        self.egress: EgressProxy | None = None
        self.mark = 0

    @property
    def returncode(self) -> int | None:
        return self.code

    def go(self, run: bool = True) -> None:
        """Let a held command start (it is in its cgroup now), or make it give up (``run=False``)."""
        if self._hello is not None:
            with contextlib.suppress(OSError):
                self._hello.send(b"g" if run else b"x")
            self._hello.close()
            self._hello = None

    def watch_egress(self, egress: EgressProxy | None) -> None:
        """Report what ``egress`` refuses from now on with this command's result."""
        self.egress = egress
        self.mark = len(egress.refusals) if egress is not None else 0

    def notes(self) -> list[str]:
        return self.egress.notes_since(self.mark) if self.egress is not None else []

    def kill(self) -> None:
        if self.exited.done():
            return
        self.session.send_soon({"op": "kill"})
        if self.pid > 0:  # known once the child said hello (0 would be the service's own group)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    async def finish(self) -> None:
        """Make sure the command and everything it started are gone, then free the sandbox for the next."""
        if self._hello is not None:
            self._hello.close()
            self._hello = None
        if not self.exited.done():
            self.kill()
            try:
                await asyncio.wait_for(asyncio.shield(self.exited), KILL_SECONDS)
            except TimeoutError:
                log.warning("a sandboxed command did not end when killed; ending its sandbox")
                await self.session.close()
        self.session.done(self)

    def ended(self, code: int, note: str = "") -> None:
        if not self.exited.done():
            self.code, self.note = code, note
            self.exited.set_result(None)


class RunnerSession:
    """One running sandbox and its runner; one command at a time."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        control: socket.socket,
        runner_pid: int,
        on_idle: Callable[[RunnerSession], None],
    ) -> None:
        self.process = process
        self.control = control
        #: The runner's pid in the service's namespace (pid 1 in the sandbox).
        self.runner_pid = runner_pid
        self.on_idle = on_idle
        self.alive = True
        self._closed = False
        self.current: RunnerCommand | None = None
        self._reader = asyncio.create_task(self._read())
        self._sending: set[asyncio.Task[None]] = set()
        self._stray: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        build: Callable[[int, int], list[str]],
        *,
        pass_fds: tuple[int, ...],
        env: Mapping[str, str],
        on_idle: Callable[[RunnerSession], None],
    ) -> RunnerSession:
        """Start the sandbox ``build(info_fd, control_fd)`` describes (``bwrap --info-fd`` … runner)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        info_read, info_write = os.pipe()
        try:
            command = build(info_write, theirs.fileno())
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(*pass_fds, theirs.fileno(), info_write),
                start_new_session=True,
                env=dict(env),
            )
        except BaseException:
            ours.close()
            os.close(info_read)
            raise
        finally:
            theirs.close()
            os.close(info_write)
        try:
            info, ready = await asyncio.wait_for(_handshake(info_read, ours), START_SECONDS)
        except BaseException as exc:
            ours.close()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            assert process.stdout is not None
            said = b""
            with contextlib.suppress(TimeoutError, OSError):
                said = await asyncio.wait_for(process.stdout.read(4000), 5)
            await _reap(process)
            if isinstance(exc, asyncio.CancelledError):
                raise
            lines = said.decode(errors="replace").strip().splitlines()
            raise RunnerFailed(lines[-1] if lines else "the sandbox's runner did not start") from None
        finally:
            os.close(info_read)
        del ready
        session = cls(process, ours, int(info["child-pid"]), on_idle)
        session._stray = asyncio.create_task(_log_stray_output(process))
        return session

    # --- commands ------------------------------------------------------------------------------------
    async def launch(
        self,
        argv: list[str],
        env: Mapping[str, str],
        cwd: str,
        *,
        limits: Mapping[str, tuple[int, int]],
        hold: bool,
        stdio: tuple[int, int] | None = None,
    ) -> RunnerCommand:
        """Start one command; with ``hold`` it waits for :meth:`RunnerCommand.go` before it ``exec`` s.

        ``stdio`` (a read end and a write end) become its stdin and stdout; its output pipe is then its
        stderr alone (a live process, :meth:`agent.sandbox.Sandbox.start_process`).
        """
        if not self.alive:
            raise RunnerFailed("the sandbox has ended")
        assert self.current is None, "one command at a time"
        loop = asyncio.get_running_loop()
        out_read, out_write = os.pipe2(os.O_CLOEXEC)
        hello, child_hello = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        hello.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        hello.setblocking(False)
        reader = asyncio.StreamReader(limit=2**16, loop=loop)
        # The command is current before its frame goes out: a quick one (``echo ok``) can end, and the
        # runner's exit frame be read, while this coroutine still waits (on the send, or the pipe below).
        # An exit read with no current command was dropped, and the command then "ran" until its timeout.
        command = RunnerCommand(self, reader, 0)
        self.current = command
        try:
            request = {
                "op": "run",
                "argv": argv,
                "env": dict(env),
                "cwd": cwd,
                "limits": {name: list(pair) for name, pair in limits.items()},
                "hold": hold,
                "stdio": stdio is not None,
            }
            await self._send(request, fds=(out_write, child_hello.fileno(), *(stdio or ())))
        except BaseException:
            os.close(out_read)
            hello.close()
            # Half a frame may have gone out: this sandbox cannot be trusted with another command.
            self.alive = False
            self.current = None
            self.on_idle(self)
            raise
        finally:
            os.close(out_write)
            child_hello.close()
        try:
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(out_read, "rb", 0)
            )
        except BaseException:
            hello.close()
            await command.finish()
            raise
        try:
            command.pid = await self._hello(hello)
        except RunnerFailed as exc:
            hello.close()
            await command.finish()
            said = b""
            with contextlib.suppress(TimeoutError, OSError):
                said = await asyncio.wait_for(reader.read(2000), 1)  # the child's own last words
            transport.close()
            lines = said.decode(errors="replace").strip().splitlines()
            raise RunnerFailed(lines[-1] if lines else str(exc)) from None
        except BaseException:
            hello.close()
            await command.finish()
            transport.close()
            raise
        if hold:
            command._hello = hello
        else:
            hello.close()
        return command

    async def _hello(self, hello: socket.socket) -> int:
        """The child's pid in the service's namespace, from the credentials the kernel attached."""
        loop = asyncio.get_running_loop()
        got: asyncio.Future[int] = loop.create_future()

        def readable() -> None:
            try:
                _, ancillary, _, _ = hello.recvmsg(16, socket.CMSG_SPACE(UCRED.size))
            except BlockingIOError:
                return
            except OSError as exc:
                if not got.done():
                    got.set_exception(RunnerFailed(f"the command did not start ({exc})"))
                return
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and not got.done():
                    got.set_result(UCRED.unpack(payload[: UCRED.size])[0])
            if not got.done():
                got.set_exception(RunnerFailed("the command did not start"))

        assert self.current is not None
        command = self.current

        def lost(_: asyncio.Future[None]) -> None:
            # A quick command's exit may be read before its hello, which is queued already: read it first.
            if not got.done():
                readable()
            if not got.done():
                got.set_exception(RunnerFailed(command.note or "the command did not start"))

        loop.add_reader(hello.fileno(), readable)
        command.exited.add_done_callback(lost)
        try:
            return await got
        finally:
            command.exited.remove_done_callback(lost)
            loop.remove_reader(hello.fileno())

    def done(self, command: RunnerCommand) -> None:
        """``command`` is over: the sandbox takes the next (or is dropped, when it ended)."""
        if self.current is command:
            self.current = None
            self.on_idle(self)

    # --- the control socket --------------------------------------------------------------------------
    async def _send(self, message: dict[str, object], fds: tuple[int, ...] = ()) -> None:
        data = json.dumps(message).encode()
        frame = HEADER.pack(len(data)) + data
        loop = asyncio.get_running_loop()
        sent = 0
        if fds:
            while True:
                try:
                    sent = self.control.sendmsg(
                        [frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
                    )
                    break
                except BlockingIOError:
                    await _writable(loop, self.control)
        await loop.sock_sendall(self.control, frame[sent:])

    def send_soon(self, message: dict[str, object]) -> None:
        """Send without waiting (a kill, from code that cannot await)."""
        if not self.alive:
            return
        task = asyncio.get_running_loop().create_task(self._send_quietly(message))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_quietly(self, message: dict[str, object]) -> None:
        with contextlib.suppress(OSError):
            await self._send(message)

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        buffer = b""
        try:
            while True:
                data = await loop.sock_recv(self.control, 1 << 16)
                if not data:
                    break
                buffer += data
                while len(buffer) >= HEADER.size:
                    (size,) = HEADER.unpack_from(buffer)
                    if len(buffer) < HEADER.size + size:
                        break
                    frame = json.loads(buffer[HEADER.size : HEADER.size + size])
                    buffer = buffer[HEADER.size + size :]
                    self._frame(frame)
        except OSError:
            pass
        finally:
            self.alive = False
            if self.current is not None:
                self.current.ended(
                    LOST_CODE, "[the sandbox ended while the command ran; the next command gets a new one]"
                )

    def _frame(self, frame: dict[str, object]) -> None:
        op = frame.get("op")
        if op == "exit" and self.current is not None:
            code = frame.get("code")
            self.current.ended(code if isinstance(code, int) else LOST_CODE)
        elif op == "error":
            log.warning("sandbox runner: %s", frame.get("message"))

    async def close(self) -> None:
        """End the sandbox: its runner (pid 1) and with it everything in it."""
        self.alive = False
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.runner_pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        # A pending sock_recv would never hear of the socket's closing: end the reader first.
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        self.control.close()
        await _reap(self.process)


async def _handshake(info_read: int, control: socket.socket) -> tuple[dict[str, int], dict[str, object]]:
    """bubblewrap's ``--info-fd`` report (the runner's pid) and the runner's ``ready`` frame."""
    info = await asyncio.to_thread(_read_info, info_read)
    control.setblocking(False)
    loop = asyncio.get_running_loop()
    buffer = b""
    while len(buffer) < HEADER.size or len(buffer) < HEADER.size + HEADER.unpack_from(buffer)[0]:
        data = await loop.sock_recv(control, 4096)
        if not data:
            raise RunnerFailed("the sandbox's runner ended before it was ready")
        buffer += data
    (size,) = HEADER.unpack_from(buffer)
    ready = json.loads(buffer[HEADER.size : HEADER.size + size])
    if ready.get("op") != "ready" or "child-pid" not in info:
        raise RunnerFailed("the sandbox's runner did not start")
    return info, ready


def _read_info(fd: int) -> dict[str, int]:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    try:
        info = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_writer(sock.fileno())


async def _log_stray_output(process: asyncio.subprocess.Process) -> None:
    """The runner writes nothing itself; a traceback (a bug) is logged, not lost."""
    assert process.stdout is not None
    with contextlib.suppress(OSError, ValueError):
        async for line in process.stdout:
            log.warning("sandbox runner said: %s", line.decode(errors="replace").rstrip())


async def _reap(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        await process.wait()


__all__ = ["RunnerCommand", "RunnerFailed", "RunnerSession"]
