"""Feishu's native live reply: a CardKit card entity in streaming mode.

Why: the edit path replaces the whole card with ``PATCH /im/v1/messages/:id`` for every step, and Feishu
shows each version as a jump. A card entity in *streaming mode* takes just the element's new text
(``PUT …/elements/:element_id/content``) and types out the part that extends what it showed before —
the typewriter effect Feishu built for AI answers. The sequence, per reply:

1. ``POST /cardkit/v1/cards`` — the card entity (JSON 2.0, ``streaming_mode: true``) with the placeholder;
2. reply to the user's message with ``{"type": "card", "data": {"card_id": …}}`` (an entity is sent once);
3. ``PUT …/elements/answer/content`` with the whole text so far, each call with a larger ``sequence``;
4. at the end the final text, ``DELETE …/elements/:element_id`` for each live button (the Stop button
   goes with the stream), then ``PATCH …/settings`` with ``streaming_mode: false`` so the chat list shows
   the answer instead of the "generating" summary (either refused: the whole card is patched instead).

Feishu ends streaming mode by itself 10 minutes after it was switched on; a long answer that meets that
(``200850``/``300309``) switches it on again once and carries on. While a user's button press on the card
is being answered, every card call is refused with ``200810`` ("wait for the interaction to end and
update again"): that call is tried again shortly with a fresh ``sequence`` (:meth:`CardKitStream._op`),
so a Stop press never pushes the reply off the card. Any other refusal raises, and the reply stream
continues on the edit path — patching the whole card of the message already sent.

A reply longer than one card rolls over (``rolls_over``): the reply stream closes this card with its
full chunk (the Stop button goes) and begins a new entity for the rest, which carries the Stop button.

A restart mid-answer continues the same card (:meth:`CardKitStream.resumed_from`): its id and message id
are stored with the reply (``ReplyTransport.resume_state``), and so is a *reserved* sequence number —
every call uses a sequence at or below the stored reservation, and the reservation moves
:data:`SEQUENCE_BLOCK` ahead well before it is reached, so the store is one write per block of calls,
not one per chunk, and the resumed stream starts above anything the dead process could have used.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from channels.errors import ChannelError, Forbidden, RetryAfter
from channels.feishu.api import CardBusy, LarkApi, StreamingClosed
from channels.feishu.content import (
    ANSWER_ELEMENT,
    ButtonScope,
    button_ids,
    card_content,
    card_entity_content,
    closed_settings,
    escape_mentions,
    reopen_settings,
    streaming_card,
)
from channels.reply import NativeStream
from channels.types import Action

log = logging.getLogger(__name__)


class CardPoster(Protocol):
    """What a card stream needs of its reply's transport (``FeishuTransport``): post the card entity
    as the reply's message, or say CardKit is off for this reply. Narrow, so this module does not
    import the channel."""

    def refuse_native(self) -> None: ...

    async def post_card_entity(self, content: str) -> str: ...


#: How long a card call keeps trying while the card is busy with a press. Feishu wants a callback
#: answered within 3 s, and the interaction ends with the answer; past this the reply stream decides.
BUSY_PATIENCE = 4.0
#: Sequence numbers reserved ahead per stored reservation (see the module docstring).
SEQUENCE_BLOCK = 100
#: The reservation moves once fewer than this many are left: more than one call to the stream uses.
SEQUENCE_MARGIN = 20


@dataclass(frozen=True, slots=True)
class CardResume:
    """What continues a CardKit card after a restart: stored with the reply as JSON."""

    card_id: str
    message_id: str
    sequence: int  # at or above every sequence used on the card

    def to_json(self) -> str:
        return json.dumps({"card_id": self.card_id, "message_id": self.message_id, "sequence": self.sequence})

    @classmethod
    def from_json(cls, raw: str) -> CardResume | None:
        """The stored card, or None for a state that names none (logged when it is malformed)."""
        try:
            value = json.loads(raw)
            return cls(str(value["card_id"]), str(value["message_id"]), int(value["sequence"]))
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("ignoring a stored feishu card state that does not parse (%s)", exc)
            return None


class CardKitStream(NativeStream):
    """One reply streamed into one CardKit card entity (see the module docstring for the calls)."""

    rolls_over = True

    def __init__(
        self,
        transport: CardPoster,
        api: LarkApi,
        actions: Sequence[Action] = (),
        scope: ButtonScope | None = None,
    ) -> None:
        self.transport = transport
        self.api = api
        self.actions = tuple(actions)
        self.scope = scope or {}
        #: Button elements still in the entity (deleted one by one at close; a retried close skips done ones).
        self.buttons = button_ids(self.actions)
        self.card_id: str | None = None
        self.message_id: str | None = None
        self.sequence = 0  # the last one used on this card; Feishu wants each call's strictly larger
        self.reserved = 0  # no call uses a sequence above this (stored before it is needed)
        self.shown = ""

    @classmethod
    def resumed_from(
        cls,
        stored: CardResume,
        transport: CardPoster,
        api: LarkApi,
        actions: Sequence[Action] = (),
        scope: ButtonScope | None = None,
    ) -> CardKitStream:
        """The stream continuing ``stored``'s card after a restart (above its reserved sequence)."""
        stream = cls(transport, api, actions, scope)
        stream.resumed = True
        stream.card_id, stream.message_id = stored.card_id, stored.message_id
        stream.sequence = stream.reserved = stored.sequence
        stream._next_block()
        return stream

    def resume(self) -> CardResume | None:
        if self.card_id is None or self.message_id is None:
            return None
        return CardResume(self.card_id, self.message_id, self.reserved)

    def _next_block(self) -> None:
        self.reserved = self.sequence + SEQUENCE_BLOCK

    def _next(self) -> int:
        self.sequence += 1
        if self.sequence > self.reserved - SEQUENCE_MARGIN:
            self._next_block()
        return self.sequence

    async def _op(self, call: Callable[[int], Awaitable[None]]) -> None:
        """One call on the card with a fresh ``sequence``, tried again while the card is busy (200810)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BUSY_PATIENCE
        while True:
            try:
                await call(self._next())
                return
            except CardBusy as exc:
                if loop.time() + exc.retry_after > deadline:
                    raise
                log.info("the card is busy with a button press; trying again (%s)", exc)
                await asyncio.sleep(exc.retry_after)

    async def begin(self, placeholder: str) -> str | None:
        try:
            self.card_id = await self.api.create_card(streaming_card(placeholder, self.actions, self.scope))
        except Forbidden:
            # No cardkit:card:write scope (or CardKit off for the tenant): this will not change by the
            # next reply, so the channel stops asking and goes straight to the edit path.
            self.transport.refuse_native()
            raise
        self.message_id = await self.transport.post_card_entity(card_entity_content(self.card_id))
        self._next_block()
        self.shown = placeholder
        return self.message_id

    async def show(self, text: str) -> None:
        if text == self.shown:
            return
        await self._stream(text)
        self.shown = text

    async def _stream(self, text: str) -> None:
        assert self.card_id is not None
        card_id, content = self.card_id, escape_mentions(text)
        try:
            await self._op(lambda seq: self.api.stream_text(card_id, ANSWER_ELEMENT, content, seq))
        except StreamingClosed:
            log.info("feishu closed the card's streaming mode; switching it on again")
            await self._op(lambda seq: self.api.card_settings(card_id, reopen_settings(), seq))
            await self._op(lambda seq: self.api.stream_text(card_id, ANSWER_ELEMENT, content, seq))

    async def close(self, text: str) -> str | None:
        card_id = self.card_id
        assert card_id is not None
        if text != self.shown:
            await self._stream(text)
            self.shown = text
        try:
            while self.buttons:
                await self._op(partial(self.api.delete_element, card_id, self.buttons[0]))
                self.buttons.pop(0)
            await self._op(lambda seq: self.api.card_settings(card_id, closed_settings(), seq))
        except RetryAfter:
            raise  # the reply stream waits and calls close again
        except ChannelError as exc:
            # The text is already shown, but a card left in streaming mode reads "generating" in the
            # chat list until Feishu's timeout (and a Stop button would outlive its answer): replace it
            # with the same text as a plain card, without buttons, instead.
            log.info("closing the card's streaming mode was refused (%s); patching the whole card", exc)
            assert self.message_id is not None
            await self.api.patch(self.message_id, card_content(text))
        return self.message_id
