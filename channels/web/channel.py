"""The web chat as a :class:`~channels.base.Channel`: a browser tab is the platform.

A message from the page becomes an :class:`InboundMessage` and goes to the same durable inbox as every
other platform's (:meth:`WebChannel.submit` returns only once it is stored); the reply comes back through
a :class:`WebTransport`, whose sends and edits land in the person's transcript (channels/web/store.py) and
are pushed to every open tab of that conversation (:meth:`WebChannel.watch`). Streaming edits are kept in
memory only and written when the reply's buttons change or it finishes, so a long answer is not rewritten
to disk with every few words; a tab that reloads mid-answer gets the live text from memory.

The conversation key is ``("web", <user id>, <conversation id>, "")``: the person is the workspace, so the
same conversation id under another person is another conversation, never theirs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

from channels.base import Channel, InboundSink
from channels.errors import Backpressure
from channels.reply import ReplyTransport
from channels.types import Action, InboundFile, InboundMessage, ReplyLimits, Sender
from channels.web.store import Entry, UnknownId, WebChatStore, new_id
from config.channels.web import WebChatConfig
from config.schema import Settings

log = logging.getLogger(__name__)

#: Events a tab may fall behind by before its stream is cut (it reconnects and gets a fresh snapshot).
WATCH_QUEUE = 500

Key = tuple[str, str]  # (user, conversation)
Event = dict[str, Any]


def _writing(actions: Sequence[Action]) -> bool:
    """A message with a Stop button is a reply still being written (the button goes with the final text)."""
    return any(a.command.startswith("/stop") for a in actions)


def _actions(actions: Sequence[Action]) -> list[dict[str, Any]]:
    return [{"command": a.command, "label": a.label, "style": a.style} for a in actions]


class WebChannel(Channel):
    provider = "web"
    # A browser has no rate limit of its own; a short spacing keeps a fast model from flooding the tab.
    limits = ReplyLimits(text_limit=16_000, min_edit_interval=0.15)

    def __init__(self, config: WebChatConfig, *, settings: Settings) -> None:
        super().__init__()
        self.config = config
        self.admins = frozenset(config.admins)
        self.trust = config.trust
        self.store = WebChatStore(Path(settings.data_dir) / "web-chat")
        self._live: dict[Key, dict[str, Entry]] = {}
        self._watchers: dict[Key, set[asyncio.Queue[Event | None]]] = {}
        self._paused = False

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        self._paused = False
        self.status.set("connected")

    async def pause(self) -> None:
        self._paused = True  # new messages get 503; replies still reach open tabs

    async def stop(self) -> None:
        self._paused = True
        self.status.set("stopped")
        for queues in self._watchers.values():
            for queue in queues:
                _close(queue)
        self._watchers.clear()

    def reply_transport(self, message: InboundMessage) -> ReplyTransport:
        return WebTransport(self, (message.workspace, message.chat))

    async def _download(self, file: InboundFile, max_bytes: int) -> bytes:
        return await asyncio.to_thread(self.store.read_upload, file.ref)

    # --- what the HTTP side calls ----------------------------------------------------------------
    async def create_conversation(self, user: str) -> str:
        return await asyncio.to_thread(self.store.create, user)

    async def entries(self, user: str, conversation: str) -> list[Entry]:
        """The conversation as the page shows it: the transcript with live replies' current text."""
        stored = await asyncio.to_thread(self.store.entries, user, conversation)
        live = self._live.get((user, conversation), {})
        merged = {e.ref: e for e in stored}
        for ref, entry in live.items():
            merged[ref] = entry
        return sorted(merged.values(), key=lambda e: e.at)

    async def submit(
        self,
        user: str,
        conversation: str,
        text: str,
        *,
        client_id: str,
        files: Sequence[tuple[str, bytes]] = (),
        pressed: str | None = None,
    ) -> bool:
        """Hand a person's message to the inbox; returns once it is stored (False: a repeat of one that
        was). Raises :class:`UnknownId` for a conversation that is not theirs, :class:`Backpressure`
        while the service cannot take more (or is shutting down)."""
        if self._sink is None or self._paused:
            raise Backpressure("the web chat is not taking messages right now")
        if not await asyncio.to_thread(self.store.exists, user, conversation):
            raise UnknownId("no such conversation")
        inbound = [
            InboundFile(
                name=name,
                ref=await asyncio.to_thread(self.store.save_upload, user, name, data),
                size=len(data),
            )
            for name, data in files
        ]
        message = InboundMessage(
            provider=self.provider,
            workspace=user,
            chat=conversation,
            sender=Sender(id=user, name=user, member=True),
            text=text,
            platform_message_id=client_id,
            is_private=True,
            files=inbound,
            pressed=pressed,
        )
        key = (user, conversation)
        shown: Entry | None = None
        if pressed is None:  # a press is a button, not something the person wrote
            shown = Entry(f"u-{client_id}", "user", text, files=[{"name": f.name} for f in inbound])
            await self.record(key, shown, persist=True)
        try:
            return await self._sink(message)
        except BaseException:
            if shown is not None:  # not stored: the page must not pretend it was sent
                await self.record(key, Entry(shown.ref, "deleted"), persist=True)
            raise

    async def watch(self, user: str, conversation: str) -> AsyncGenerator[Event, None]:
        """A snapshot of the conversation, then every change to it until the tab goes away."""
        key = (user, conversation)
        queue: asyncio.Queue[Event | None] = asyncio.Queue(WATCH_QUEUE)
        self._watchers.setdefault(key, set()).add(queue)
        try:
            entries = await self.entries(user, conversation)
            yield {"type": "snapshot", "entries": [e.to_json() for e in entries]}
            while True:
                event = await queue.get()
                if event is None:
                    return
                yield event
        finally:
            queues = self._watchers.get(key)
            if queues is not None:
                queues.discard(queue)
                if not queues:
                    del self._watchers[key]

    # --- what the transport calls ----------------------------------------------------------------
    def live_entry(self, key: Key, ref: str) -> Entry | None:
        return self._live.get(key, {}).get(ref)

    async def record(self, key: Key, entry: Entry, *, persist: bool) -> None:
        """Show ``entry`` in every open tab; write it to the transcript when ``persist``. A reply being
        written (``live``) stays in memory too: its streamed words are not written one edit at a time."""
        if persist:
            await asyncio.to_thread(self.store.append, key[0], key[1], entry)
        live = self._live.setdefault(key, {})
        if entry.live and entry.role != "deleted":
            live[entry.ref] = entry
        else:
            live.pop(entry.ref, None)
            if not live:
                self._live.pop(key, None)
        event: Event = (
            {"type": "delete", "ref": entry.ref}
            if entry.role == "deleted"
            else {"type": "entry", "entry": entry.to_json()}
        )
        for queue in list(self._watchers.get(key, ())):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:  # a tab that stopped reading: cut it, it reconnects with a snapshot
                self._watchers[key].discard(queue)
                _close(queue)


def _close(queue: asyncio.Queue[Event | None]) -> None:
    while not queue.empty():
        queue.get_nowait()
    queue.put_nowait(None)


class WebTransport(ReplyTransport):
    """One reply in one web conversation. Buttons (Stop, Approve/Deny) are real buttons on the page."""

    supports_actions = True

    def __init__(self, channel: WebChannel, key: Key) -> None:
        self.channel = channel
        self.key = key
        self.refs: list[str] = []

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        ref = f"a-{new_id()}"
        self.refs.append(ref)
        entry = Entry(ref, "assistant", text, _actions(actions), live=_writing(actions))
        await self.channel.record(self.key, entry, persist=True)
        return ref

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        if ref not in self.refs:
            self.refs.append(ref)  # a reply resumed after a restart continues its own messages
        entry = self.channel.live_entry(self.key, ref)
        new_actions = _actions(actions)
        live = _writing(actions)
        updated = Entry(ref, "assistant", text, new_actions, live=live)
        if entry is not None:
            updated.at = entry.at
            updated.files = entry.files
        # Only the words streamed into a reply being written stay in memory; every other change is kept.
        persist = entry is None or entry.actions != new_actions or not live
        await self.channel.record(self.key, updated, persist=persist)

    async def send_files(self, files: Sequence[Path]) -> None:
        kept = [await asyncio.to_thread(self.channel.store.keep_output, self.key[0], path) for path in files]
        await self.channel.record(self.key, Entry(f"a-{new_id()}", "assistant", "", files=kept), persist=True)

    async def finished(self) -> None:
        for ref in self.refs:
            entry = self.channel.live_entry(self.key, ref)
            if entry is not None:
                entry.live = False
                await self.channel.record(self.key, entry, persist=True)
