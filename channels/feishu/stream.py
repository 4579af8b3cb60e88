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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from channels.feishu.channel import FeishuTransport

log = logging.getLogger(__name__)

#: How long a card call keeps trying while the card is busy with a press. Feishu wants a callback
#: answered within 3 s, and the interaction ends with the answer; past this the reply stream decides.
BUSY_PATIENCE = 4.0


class CardKitStream(NativeStream):
    """One reply streamed into one CardKit card entity (see the module docstring for the calls)."""

    rolls_over = True

    def __init__(
        self,
        transport: FeishuTransport,
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
        self.shown = ""

    def _next(self) -> int:
        self.sequence += 1
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
