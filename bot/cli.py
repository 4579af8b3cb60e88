"""``switchboard`` — serve, doctor, chat (and subcommands that features add in ``bot/clicmds``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import pkgutil
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from config import ConfigError, Settings, load_settings
from config.loader import find_config_file
from config.secrets import known_secrets

if TYPE_CHECKING:
    from bot.service import Service
    from channels.terminal import TerminalChannel

log = logging.getLogger("switchboard")

EXIT_CONFIG = 2
#: As uvicorn's own start-up failure, so supervisors see the same code whichever part failed.
EXIT_STARTUP = 3


def secret_values(settings: Settings) -> list[str]:
    """Every secret the service knows (config and environment), so logs can mask them."""
    return known_secrets(settings, os.environ)


def preflight_extras(settings: Settings) -> None:
    """Stop before anything starts when an enabled platform's SDK is not installed: one line per channel."""
    from bot.registry import missing_extras

    problems = missing_extras(settings)
    for problem in problems:
        print(f"switchboard: {problem}", file=sys.stderr)
    if problems:
        raise SystemExit(EXIT_CONFIG)


def preflight_tracing(settings: Settings) -> None:
    """Install the OTLP span exporter when configured; stop in one line if the ``[otel]`` extra is missing."""
    import os

    if not settings.tracing.otlp_endpoint and not any(
        os.environ.get(name) for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return  # nothing to export: spare the start-up the import (bot.tracing.OTLP_ENV has the same names)
    from bot.tracing import TracingUnavailable, configure

    try:
        configure(settings.tracing)
    except TracingUnavailable as exc:
        print(f"switchboard: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def preflight_sandbox(settings: Settings) -> None:
    """Fail before anything starts, in one line, when the configured sandbox cannot run here."""
    if settings.sandbox.mode != "bwrap":
        return
    from agent.sandbox import SandboxUnavailable
    from agent.sandbox_bwrap import check_bwrap

    try:
        asyncio.run(check_bwrap(settings.sandbox))
    except SandboxUnavailable as exc:
        print(f"switchboard: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def preflight_data_dir(settings: Settings) -> None:
    """Refuse in one line a ``data_dir`` this user cannot write (say, one a root run left behind)."""
    from bot.datadir import data_dir_problem

    problem = data_dir_problem(settings.data_dir)
    if problem is not None:
        print(f"switchboard: {problem}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG)


def preflight_auth(settings: Settings) -> None:
    """``auth.mode: none`` is for one machine: refuse to listen where other machines can connect."""
    from config.hosts import is_loopback

    server = settings.server
    if settings.auth.mode == "none" and not is_loopback(server.host):
        print(
            f"switchboard: auth.mode is none but server.host is {server.host}, which other machines can "
            "reach, and every request would act as user 'default': listen on 127.0.0.1 (behind a proxy "
            "that authenticates) or set auth.mode: jwt with auth.jwt_secret",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_CONFIG)
    if settings.auth.mode == "jwt":
        import jwt  # noqa: F401  # every request checks a token: import it (and fail, if missing) now


def preflight_database(settings: Settings) -> None:
    """A second instance on one SQLite file is refused in one line, before the web server starts."""
    from bot.db import DatabaseInUse, check_sqlite_free

    try:
        check_sqlite_free(settings.database.url)
    except DatabaseInUse as exc:
        print(f"switchboard: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def load_or_exit(path: str | None) -> Settings:
    try:
        return load_settings(path)
    except ConfigError as exc:
        where = f" in {exc.source}" if exc.source else ""
        print(f"switchboard: configuration problem{where}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def version() -> str:
    """The package's version: ``bot/version.py`` is the one source (the wheel's metadata reads it too)."""
    from bot.version import VERSION

    return VERSION


class _VersionAction(argparse.Action):
    """``--version``, looked up when given rather than each time the parser is built."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kwargs.get("help"))

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        print(f"switchboard {version()}")
        parser.exit()


def apply_listen_flags(settings: Settings, host: str | None, port: int | None) -> None:
    """``--host``/``--port`` over ``server.*``; a ``public_url`` that was derived from them follows."""
    from config.schema import local_public_url

    server = settings.server
    derived = server.public_url == local_public_url(server.host, server.port)
    if host:
        server.host = host
    if port is not None:
        server.port = port
    if derived:
        server.public_url = local_public_url(server.host, server.port)


def cmd_serve(args: argparse.Namespace) -> int:
    """Listen first, then build the service behind :class:`bot.boot.Booting` (docs/operations.md).

    What fails in one line before anything listens stays here (configuration, missing extras, the
    sandbox); the rest — FastAPI, SQLAlchemy, the service, the SQLite instance check, the database —
    comes after the socket is open, so ``/health`` answers ``"starting"`` meanwhile.
    """
    import uvicorn

    from bot.boot import BootCancelled, Booting
    from bot.gc_tuning import import_paused
    from bot.logs import configure_logging

    settings = load_or_exit(args.config)
    apply_listen_flags(settings, args.host, args.port)
    configure_logging(args.log_level, secret_values(settings), fmt=args.log_format)
    preflight_auth(settings)
    preflight_extras(settings)
    preflight_tracing(settings)
    preflight_data_dir(settings)
    preflight_sandbox(settings)
    # Until the service can apply a reload, a SIGHUP (a supervisor's "reload") must not end the process.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    source = find_config_file(args.config)
    failures: list[BaseException] = []
    exit_code: list[int] = []
    server: uvicorn.Server | None = None

    def stop_serving() -> None:
        if server is not None:
            server.should_exit = True

    def agent_failed(exc: BaseException) -> None:
        # HTTP was already answering while the agent was built; a build that fails still ends `serve`.
        failures.append(exc)
        stop_serving()

    def start_failed(exc: BaseException) -> None:
        if isinstance(exc, SystemExit):  # a pre-flight check printed its line already
            exit_code.append(exc.code if isinstance(exc.code, int) else EXIT_STARTUP)
        else:
            log.debug("start-up failed", exc_info=exc)
            print(f"switchboard: start-up failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            exit_code.append(EXIT_STARTUP)
        stop_serving()

    async def build(stack: contextlib.AsyncExitStack) -> Any:
        # FastAPI, SQLAlchemy and the service's modules: imported in a worker thread, so the event
        # loop keeps answering /health between the import's GIL slices.
        await asyncio.to_thread(import_paused, "bot.app")
        if booting.stopping:
            raise BootCancelled
        preflight_database(settings)
        from bot.app import create_app

        app = create_app(
            settings, config_source=str(source) if source else None, on_agent_failed=agent_failed
        )
        await stack.enter_async_context(app.router.lifespan_context(app))  # Service.open()
        reload_on_sighup(app.state.service, str(source) if source else args.config, args)
        return app

    booting = Booting(build, starting_health=starting_health(settings), on_failed=start_failed)
    config = uvicorn.Config(
        booting,
        host=settings.server.host,
        port=settings.server.port,
        log_config=None,
        access_log=False,
        lifespan="on",
        interface="asgi3",
        ws="none",  # no WebSocket endpoints: skips importing a WebSocket implementation at start-up
        timeout_graceful_shutdown=int(settings.bus.drain_seconds) + 5,
    )
    server = uvicorn.Server(config)
    server.run()
    if exit_code:
        return exit_code[0]
    if failures:
        exc = failures[0]
        print(f"switchboard: the agent could not be started: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    if not server.started:
        return EXIT_STARTUP  # uvicorn logged why (port in use, the rest of start-up failed)
    return 0


def reload_on_sighup(service: Service, path: str | None, args: argparse.Namespace) -> None:
    """``kill -HUP``: read the config again and apply what can change safely (bot/reload.py).

    One reload at a time, in order; ``--host``/``--port`` stay as the command line set them.
    """
    from bot.reload import reload_from

    loop = asyncio.get_running_loop()
    lock = asyncio.Lock()
    running: set[asyncio.Task[Any]] = set()

    async def reload() -> None:
        async with lock:
            await reload_from(service, path, lambda new: apply_listen_flags(new, args.host, args.port))

    def on_hup() -> None:
        log.info("reload: SIGHUP received, reading %s", path or "the built-in defaults")
        task = loop.create_task(reload())
        running.add(task)
        task.add_done_callback(running.discard)

    loop.add_signal_handler(signal.SIGHUP, on_hup)


def starting_health(settings: Settings) -> dict[str, Any]:
    """``/health`` before the service exists: the same keys, nothing claimed that is not known yet."""
    from bot.version import VERSION

    channels = {name: {"state": "starting"} for name, section in settings.channels.items() if section.enabled}
    return {
        "status": "starting",
        "version": VERSION,
        "database": "starting",
        "agent": "starting",
        "sandbox": settings.sandbox.mode,
        "sandbox_limits": {},
        "mcp": {},
        "channels": channels,
    }


def cmd_doctor(args: argparse.Namespace) -> int:
    from bot.doctor import run_doctor

    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print("✗ config: not usable")
        for problem in exc.problems:
            print(f"    {problem}")
        return 1
    return asyncio.run(run_doctor(settings))


def cmd_chat(args: argparse.Namespace) -> int:
    from bot.logs import add_file_handler, configure_logging
    from bot.service import Service
    from channels.terminal import TerminalChannel

    settings = load_or_exit(args.config)
    # The conversation owns the terminal: only warnings reach stderr; --log-file gets everything.
    configure_logging(args.log_level, secret_values(settings), fmt=args.log_format, handler_level="WARNING")
    if args.log_file:
        add_file_handler(args.log_file, args.log_format or "json")
    preflight_data_dir(settings)
    preflight_sandbox(settings)
    preflight_database(settings)
    terminal_holder: list[TerminalChannel] = []

    async def main() -> None:
        terminal = TerminalChannel(user=args.user)
        terminal_holder.append(terminal)
        service = Service(settings, channels={"terminal": terminal})
        # SIGTERM stops gracefully, as `serve` does: running turns finish within bus.drain_seconds.
        main_task = asyncio.current_task()
        assert main_task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
        await service.start()
        try:
            await terminal.run()
            # End of input: finish everything accepted, including work resumed from a previous run and
            # goal steps (which are not bus messages).
            assert service.manager is not None
            await service.manager.wait_idle()
        finally:
            await service.stop()

    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main())
    # Scripts need to know when nothing worked: every piped message got an error reply.
    if terminal_holder and terminal_holder[0].all_failed:
        print("switchboard: every reply failed (see the messages above)", file=sys.stderr)
        return 1
    return 0


def _add_global_flags(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--config``, ``--log-level`` and ``--log-format``, accepted before and after any subcommand.

    Below the top they default to ``SUPPRESS`` so a subcommand never overwrites what was given earlier.
    """
    existing = {option for action in parser._actions for option in action.option_strings}
    for action in parser._actions:
        if not top and action.dest in ("config", "log_level", "log_format"):
            action.default = argparse.SUPPRESS

    def default(value: str | None) -> str | None:
        return value if top else argparse.SUPPRESS

    if "--config" not in existing:
        parser.add_argument("--config", default=default(None), help="path to config.yaml")
    if "--log-level" not in existing:
        parser.add_argument(
            "--log-level",
            default=default("INFO"),
            type=str.upper,
            choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        )
    if "--log-format" not in existing:
        parser.add_argument(
            "--log-format",
            default=default(None),
            choices=["json", "text"],
            help="default: text on a terminal",
        )


def _each_subparser(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.append(child)
                found.extend(_each_subparser(child))
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchboard", description="Self-hosted chat-ops bot service.")
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    _add_global_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the service (HTTP API, channels, agent)")
    serve.add_argument("--host", help="override server.host")
    serve.add_argument("--port", type=int, help="override server.port")
    serve.set_defaults(func=cmd_serve)

    doctor = sub.add_parser("doctor", help="check config, database, channels and model; say what to fix")
    doctor.set_defaults(func=cmd_doctor)

    chat = sub.add_parser("chat", help="talk to the bot in this terminal (reads lines from stdin)")
    chat.add_argument("--user", default="local", help="the sender id to use")
    chat.add_argument("--log-file", help="write the service's log here (the terminal shows warnings only)")
    chat.set_defaults(func=cmd_chat)

    from bot import clicmds

    for info in sorted(pkgutil.iter_modules(clicmds.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"bot.clicmds.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub, load_or_exit)
    for child in _each_subparser(parser):
        _add_global_flags(child, top=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
