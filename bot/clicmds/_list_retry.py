"""The shape ``switchboard inbox`` and ``switchboard webhooks`` share: ``list [--failed] [--limit]`` and
``retry ID [--wait]``, each running one coroutine on the configured database."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from config.schema import Settings

Lister = Callable[[Settings, bool, int], Coroutine[Any, Any, int]]
Retrier = Callable[[Settings, str, float], Coroutine[Any, Any, int]]


def age(seconds: float) -> str:
    """The AGE column of both listings: seconds up to two minutes, minutes up to two hours, then hours."""
    if seconds < 120:
        return f"{int(seconds)}s"
    if seconds < 7200:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"


def register_list_retry(
    subparsers: Any,
    load_or_exit: Callable[[str | None], Settings],
    *,
    name: str,
    help: str,
    list_help: str,
    failed_help: str,
    retry_help: str,
    id_name: str,
    lister: Lister,
    retrier: Retrier,
) -> None:
    parser = subparsers.add_parser(name, help=help)
    sub = parser.add_subparsers(dest=f"{name}_command", required=True)

    listing = sub.add_parser("list", help=list_help)
    listing.add_argument("--config", help="path to config.yaml")
    listing.add_argument("--failed", action="store_true", help=failed_help)
    listing.add_argument("--limit", type=int, default=50)

    def run_list(args: argparse.Namespace) -> int:
        return asyncio.run(lister(load_or_exit(args.config), args.failed, args.limit))

    listing.set_defaults(func=run_list)

    retry = sub.add_parser("retry", help=retry_help)
    retry.add_argument(id_name)
    retry.add_argument("--config", help="path to config.yaml")
    retry.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the outcome")

    def run_retry(args: argparse.Namespace) -> int:
        return asyncio.run(retrier(load_or_exit(args.config), getattr(args, id_name), args.wait))

    retry.set_defaults(func=run_retry)
