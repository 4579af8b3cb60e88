"""``switchboard`` — serve, doctor, chat (and subcommands that features add in ``bot/clicmds``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any

from config import ConfigError, Settings, load_settings

EXIT_CONFIG = 2


def secret_values(settings: Settings) -> list[str]:
    """Every configured value whose key looks secret, so logs can mask them."""
    found: list[str] = []

    def walk(value: Any, key: str = "") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, list):
            for v in value:
                walk(v, key)
        elif (
            isinstance(value, str)
            and any(w in key.lower() for w in ("token", "secret", "key", "password"))
            and key.lower() != "private_key_path"
        ):
            found.append(value)

    walk(settings.model_dump())
    return found


def load_or_exit(path: str | None) -> Settings:
    try:
        return load_settings(path)
    except ConfigError as exc:
        where = f" in {exc.source}" if exc.source else ""
        print(f"switchboard: configuration problem{where}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from bot.app import create_app
    from bot.logs import configure_logging

    settings = load_or_exit(args.config)
    if args.host:
        settings.server.host = args.host
    if args.port is not None:
        settings.server.port = args.port
    configure_logging(args.log_level, secret_values(settings))
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.server.host,
        port=settings.server.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=int(settings.bus.drain_seconds) + 5,
    )
    return 0


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
    from bot.logs import configure_logging
    from bot.service import Service
    from channels.terminal import TerminalChannel

    settings = load_or_exit(args.config)
    configure_logging(args.log_level, secret_values(settings))

    async def main() -> None:
        terminal = TerminalChannel(user=args.user)
        service = Service(settings, channels={"terminal": terminal})
        await service.start()
        try:
            await terminal.run()
            # End of input: finish everything accepted (including work resumed from a previous run).
            assert service.manager is not None
            await service.manager.wait_idle()
        finally:
            await service.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchboard", description="Self-hosted chat-ops bot service.")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the service (HTTP API, channels, agent)")
    serve.add_argument("--config", help="path to config.yaml")
    serve.add_argument("--host", help="override server.host")
    serve.add_argument("--port", type=int, help="override server.port")
    serve.set_defaults(func=cmd_serve)

    doctor = sub.add_parser("doctor", help="check config, database, channels and model; say what to fix")
    doctor.add_argument("--config", help="path to config.yaml")
    doctor.set_defaults(func=cmd_doctor)

    chat = sub.add_parser("chat", help="talk to the bot in this terminal (reads lines from stdin)")
    chat.add_argument("--config", help="path to config.yaml")
    chat.add_argument("--user", default="local", help="the sender id to use")
    chat.set_defaults(func=cmd_chat)

    from bot import clicmds

    for info in sorted(pkgutil.iter_modules(clicmds.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"bot.clicmds.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub, load_or_exit)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
