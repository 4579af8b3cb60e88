"""``/connect CODE`` (and Telegram's ``/start CODE`` from a deep link): bind this platform account to the
person who made the code on the ``/connect`` page.

It runs before the allow-list and the ``require_bound_identity`` gate — connecting is how someone gets
past them — so it answers only about the code and never starts a turn.
"""

from __future__ import annotations

from bot.commands.base import Command, CommandContext
from connections import CodeRejected, PlatformIdentity
from connections.providers import TITLES

MAX_CODE_LENGTH = 128


def _title(provider: str) -> str:
    return TITLES.get(provider, provider)


def _rejection(exc: CodeRejected, provider: str) -> str:
    if exc.reason == "used":
        return "That connection code has already been used. Get a new one on the connect page."
    if exc.reason == "wrong_provider":
        return (
            f"That connection code was made for {_title(exc.code_provider or '?')}, not {_title(provider)}. "
            f"Send it there, or get a {_title(provider)} code."
        )
    if exc.reason == "throttled":
        minutes = max(1, round(exc.retry_after / 60))
        return (
            "Too many wrong connection codes from here. Wait about "
            f"{minutes} minute{'s' if minutes != 1 else ''}, then send the code from the connect page again."
        )
    if exc.reason == "expired":
        return "That connection code has expired. Get a new one on the connect page."
    return "That connection code is invalid or expired."


async def connect(ctx: CommandContext) -> None:
    message = ctx.message
    page = ctx.host.settings.server.public_url.rstrip("/") + "/connect"
    store = ctx.connections
    if store is None:
        await ctx.reply("Connecting accounts is not available on this server.")
        return
    code = ctx.args.split()[0] if ctx.args.split() else ""
    if not code:
        await ctx.reply(
            f"Hello! To link this {_title(message.provider)} account to your Switchboard user, open {page}, "
            "get a code, and send /connect CODE here."
        )
        return
    if message.sender.is_bot:
        await ctx.reply("Bots cannot be connected to a user.")
        return
    if len(code) > MAX_CODE_LENGTH:
        code = code[:MAX_CODE_LENGTH]  # still a failed attempt: it counts against the brake below
    identity = PlatformIdentity(message.provider, message.workspace or "", message.sender.id)
    try:
        result = await store.bind_with_code(code, identity, message.sender.name, chat=message.chat)
    except CodeRejected as exc:
        await ctx.reply(_rejection(exc, message.provider))
        return
    # The next message in a private chat moves to a thread in the owner's space (the resolver sees the
    # owner change), so nothing said before connecting carries over into the owner's conversations.
    owner = result.connection.owner
    if result.already_bound:
        await ctx.reply(f"This {_title(message.provider)} account is already connected to {owner}.")
    else:
        await ctx.reply(f"Connected: this {_title(message.provider)} account now belongs to {owner}.")


COMMAND = Command(
    name="connect",
    help="link this account to your Switchboard user with a code from the connect page",
    usage="CODE",
    handler=connect,
    aliases=("start",),
    before_gate=True,
    guests=True,
)
