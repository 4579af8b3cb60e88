"""Per-owner long-term memory: durable facts plus a short summary, kept in the service database.

After an owner's conversation settles (``memory.debounce_seconds`` with no new turn), one model call reads
the recent transcript and the facts already known and answers with JSON: new durable facts (content,
category, confidence) and a refreshed summary. Near-duplicates merge into the existing fact; above
``memory.max_facts`` the weakest (lowest confidence, then oldest) are evicted. Before each turn the most
relevant facts are rendered into the system prompt within ``memory.injection_token_budget`` — for any
chat of that owner, on any platform, because the key is the owner, not the chat.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from agent.context import HIDDEN_ID_PREFIX
from agent.memory_index import FactIndex
from agent.tables import memory_cursors, memory_facts, memory_pending, memory_profiles
from config.batching import Batcher, KeyQuery
from config.schema import MemoryConfig

log = logging.getLogger(__name__)

CATEGORIES = ("preference", "profile", "project", "skill", "context", "other")
MIN_CONFIDENCE = 0.5
DUPLICATE_SIMILARITY = 0.8
TRANSCRIPT_MESSAGES = 20
TRANSCRIPT_CHARS_PER_MESSAGE = 1000
EXTRACTION_MARKER = "You maintain the long-term memory of an assistant"
EXTRACTION_PROMPT = f"""{EXTRACTION_MARKER} about one user.
Read the known facts and the latest conversation. Answer with JSON only, no prose:
{{"facts": [{{"content": "...", "category": "{"|".join(CATEGORIES)}", "confidence": 0.0-1.0}}],
 "summary": "two or three sentences about who the user is and what they work on"}}
Only include durable facts worth remembering in later conversations (preferences, background, ongoing
projects, skills). Skip small talk, one-off requests and anything secret (passwords, tokens, keys).
List only facts that are new or changed; return an empty list when there are none."""


@dataclass(frozen=True, slots=True)
class Fact:
    id: str
    content: str
    category: str
    confidence: float
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class CandidateFact:
    content: str
    category: str
    confidence: float


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in a model answer (tolerating code fences and chatter around it)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        value = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def parse_extraction(text: str) -> tuple[list[CandidateFact], str | None] | None:
    data = parse_json_object(text)
    if data is None:
        return None
    facts: list[CandidateFact] = []
    for item in data.get("facts") or []:
        if not isinstance(item, dict):
            continue
        content = str(item.get("content") or "").strip()
        try:
            confidence = min(1.0, max(0.0, float(item.get("confidence", 0.7))))
        except (TypeError, ValueError):
            confidence = 0.7
        category = str(item.get("category") or "other").strip().lower()
        if content and confidence >= MIN_CONFIDENCE:
            facts.append(
                CandidateFact(content[:500], category if category in CATEGORIES else "other", confidence)
            )
    summary = data.get("summary")
    return facts, (str(summary).strip()[:1000] or None) if summary else None


#: Owners whose indexed facts stay cached, and how many facts all of them may hold together.
VIEW_OWNERS = 256
VIEW_FACTS = 200_000
#: Owners per ``IN (...)`` list: well under SQLite's and PostgreSQL's bound-parameter limits.
IN_CHUNK = 500


class MemoryStore:
    """Facts and summaries per owner. Every method is one short transaction."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        #: owner -> (version, index): see :meth:`view`. Most recently used last.
        self._views: OrderedDict[str, tuple[tuple[Any, ...], FactIndex]] = OrderedDict()
        self._viewed_facts = 0
        # Cursor reads, batched: an extraction of many threads (or many owners' at once, when the
        # service stops) is one SELECT per 500 threads, not one each. Nothing is cached: another
        # instance's extraction may move a cursor.
        self._cursors: Batcher[str, None, tuple[bool, str | None]] = Batcher(
            self._read_cursors, max_batch=IN_CHUNK, name="memory-cursors"
        )
        # Finished extractions' pending rows, deleted in one transaction per batch: when the service
        # stops after a burst of new owners, thousands of extractions end at once.
        self._dropping: Batcher[tuple[str, frozenset[str]], None, None] = Batcher(
            self._drop_many, max_batch=IN_CHUNK, name="memory-drop-pending"
        )
        # The notes' statements, built once (their cache keys too) rather than per batch of notes: in a
        # burst of new owners every batch is a rewrite (docs/PERFORMANCE.md, GC section).
        self._insert_pending = (sqlite.insert if engine.dialect.name == "sqlite" else postgresql.insert)(
            memory_pending
        ).on_conflict_do_nothing(index_elements=["owner", "thread_id"])
        self._delete_pending = delete(memory_pending).where(
            memory_pending.c.owner.in_(bindparam("owners", expanding=True))
        )
        # Finished extractions' (owner, thread) rows: grouped by owner, an index search on SQLite too.
        self._delete_pairs = KeyQuery(
            [memory_pending.c.owner, memory_pending.c.thread_id], delete(memory_pending).where
        )

    async def view(self, owner: str) -> tuple[FactIndex, str | None]:
        """The owner's facts, indexed, and summary — what every turn reads.

        One aggregate query says whether the facts changed since they were indexed (count, newest and
        sum of ``updated_at``: any insert, update or delete moves one of them, whichever instance made
        it); only then are the rows read and indexed again, in a worker thread. ``merge`` re-indexes
        right after its own writes, so a turn normally finds the index current. The aggregate runs in the
        database (for SQLite on aiosqlite's thread): a turn's cost on the event loop no longer grows with
        the facts.
        """
        c = memory_facts.c
        summary_of = select(memory_profiles.c.summary).where(memory_profiles.c.owner == owner)
        query = select(
            func.count(c.id), func.max(c.updated_at), func.sum(c.updated_at), summary_of.scalar_subquery()
        ).where(c.owner == owner)
        async with self.engine.connect() as conn:
            count, newest, total, summary = (await conn.execute(query)).one()
        version = (count, newest, total)
        cached = self._views.get(owner)
        if cached is not None and cached[0] == version:
            self._views.move_to_end(owner)
            return cached[1], summary
        # Indexing 10,000 facts is ~80 ms of CPU: done in a worker thread, the loop keeps serving chats.
        index = (
            await asyncio.to_thread(FactIndex.build, await self.facts(owner))
            if count
            else FactIndex.build([])
        )
        self._remember(owner, version, index)
        return index, summary

    def _remember(self, owner: str, version: tuple[Any, ...], index: FactIndex) -> None:
        old = self._views.pop(owner, None)
        if old is not None:
            self._viewed_facts -= len(old[1].facts)
        self._views[owner] = (version, index)
        self._viewed_facts += len(index.facts)
        while len(self._views) > VIEW_OWNERS or (self._viewed_facts > VIEW_FACTS and len(self._views) > 1):
            _owner, (_version, dropped) = self._views.popitem(last=False)
            self._viewed_facts -= len(dropped.facts)

    def _forget_view(self, owner: str) -> None:
        old = self._views.pop(owner, None)
        if old is not None:
            self._viewed_facts -= len(old[1].facts)

    async def facts(self, owner: str) -> list[Fact]:
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(memory_facts)
                    .where(memory_facts.c.owner == owner)
                    .order_by(memory_facts.c.confidence.desc(), memory_facts.c.updated_at.desc())
                )
            ).mappings()
            return [
                Fact(r["id"], r["content"], r["category"], r["confidence"], r["created_at"], r["updated_at"])
                for r in rows
            ]

    async def summary(self, owner: str) -> str | None:
        async with self.engine.connect() as conn:
            return (
                await conn.execute(select(memory_profiles.c.summary).where(memory_profiles.c.owner == owner))
            ).scalar_one_or_none()

    async def merge(
        self,
        owner: str,
        candidates: Sequence[CandidateFact],
        summary: str | None,
        *,
        max_facts: int,
    ) -> None:
        """Add new facts, fold near-duplicates into existing ones, evict the weakest above the cap."""
        now = time.time()
        self._forget_view(owner)
        # Indexed once: each candidate is compared only with the facts that share a word with it.
        existing = FactIndex.build(await self.facts(owner))
        async with self.engine.begin() as conn:
            for candidate in candidates:
                found = existing.best_match(candidate.content)
                if found is not None and found[1] >= DUPLICATE_SIMILARITY:
                    match = found[0]
                    await conn.execute(
                        update(memory_facts)
                        .where(memory_facts.c.id == match.id)
                        .values(
                            content=candidate.content,
                            category=candidate.category,
                            confidence=max(match.confidence, candidate.confidence),
                            updated_at=now,
                        )
                    )
                    continue
                fact = Fact(
                    uuid.uuid4().hex,
                    candidate.content,
                    candidate.category,
                    candidate.confidence,
                    now,
                    now,
                )
                await conn.execute(insert(memory_facts).values(owner=owner, **_row(fact)))
                existing.add(fact)
            if summary:
                await conn.execute(delete(memory_profiles).where(memory_profiles.c.owner == owner))
                await conn.execute(
                    insert(memory_profiles).values(owner=owner, summary=summary, updated_at=now)
                )
            ids = (
                await conn.execute(
                    select(memory_facts.c.id)
                    .where(memory_facts.c.owner == owner)
                    .order_by(memory_facts.c.confidence.desc(), memory_facts.c.updated_at.desc())
                    .offset(max_facts)
                )
            ).scalars()
            weakest = list(ids)
            if weakest:
                await conn.execute(delete(memory_facts).where(memory_facts.c.id.in_(weakest)))
        await self.view(owner)  # index the new facts now, in the extraction, not in the next turn

    async def clear(self, owner: str, cursors: dict[str, str | None] | None = None) -> int:
        """Forget the owner's facts and pending extractions; move the given threads' cursors (thread id →
        newest message id) past everything said so far, all in one transaction."""
        self._forget_view(owner)
        async with self.engine.begin() as conn:
            result = await conn.execute(delete(memory_facts).where(memory_facts.c.owner == owner))
            await conn.execute(delete(memory_profiles).where(memory_profiles.c.owner == owner))
            await conn.execute(delete(memory_pending).where(memory_pending.c.owner == owner))
            for thread_id, last_id in (cursors or {}).items():
                await self._set_cursor(conn, thread_id, owner, last_id)
            return int(result.rowcount or 0)

    # --- extraction progress (survives restarts) ---------------------------------------------------
    async def cursor(self, thread_id: str) -> tuple[bool, str | None]:
        """``(known, last_message_id)``: whether the thread has a cursor, and the newest id read."""
        return (await self.cursors([thread_id]))[thread_id]

    async def cursors(self, thread_ids: Iterable[str]) -> dict[str, tuple[bool, str | None]]:
        """:meth:`cursor` of several threads, in batched queries (see :class:`config.batching.Batcher`)."""
        found = await self._cursors.lookup_many(thread_ids, None)
        return {thread_id: cursor or (False, None) for thread_id, cursor in found.items()}

    async def _read_cursors(self, batch: dict[str, None]) -> dict[str, tuple[bool, str | None]]:
        c = memory_cursors.c
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(c.thread_id, c.last_message_id).where(c.thread_id.in_(list(batch)))
            )
            return {thread_id: (True, last_id) for thread_id, last_id in rows}

    async def set_cursors(self, owner: str, cursors: dict[str, str | None]) -> None:
        async with self.engine.begin() as conn:
            for thread_id, last_id in cursors.items():
                await self._set_cursor(conn, thread_id, owner, last_id)

    @staticmethod
    async def _set_cursor(conn: Any, thread_id: str, owner: str, last_id: str | None) -> None:
        await conn.execute(delete(memory_cursors).where(memory_cursors.c.thread_id == thread_id))
        await conn.execute(
            insert(memory_cursors).values(
                thread_id=thread_id, owner=owner, last_message_id=last_id, updated_at=time.time()
            )
        )

    async def owner_threads(self, owner: str) -> set[str]:
        """Threads of the owner that extraction has read or is waiting to read."""
        async with self.engine.connect() as conn:
            read = (
                await conn.execute(select(memory_cursors.c.thread_id).where(memory_cursors.c.owner == owner))
            ).scalars()
            waiting = (
                await conn.execute(select(memory_pending.c.thread_id).where(memory_pending.c.owner == owner))
            ).scalars()
            return set(read) | set(waiting)

    async def write_pending(
        self, rewrite: Sequence[str], rows: Sequence[tuple[str, str, str | None]], due_at: float
    ) -> None:
        """One transaction for many owners' notes: ``rewrite`` owners' rows are replaced, and ``rows``
        (owner, thread, model) are added where missing — a thread already recorded keeps its first due
        time. Many owners in one commit is what keeps a burst of new chats from queueing thousands of
        small transactions behind each other (docs/PERFORMANCE.md, GC section)."""
        values = [
            {"owner": owner, "thread_id": thread_id, "model": model, "due_at": due_at}
            for owner, thread_id, model in rows
        ]
        async with self.engine.begin() as conn:
            for start in range(0, len(rewrite), IN_CHUNK):  # bound parameters per statement
                await conn.execute(self._delete_pending, {"owners": list(rewrite[start : start + IN_CHUNK])})
            if values:
                await conn.execute(self._insert_pending, values)

    async def drop_pending(self, owner: str, thread_ids: set[str]) -> None:
        """Forget the owner's pending rows of ``thread_ids`` (committed when this returns; a drop asked
        for while a batch is being deleted goes into the next one)."""
        await self._dropping.lookup((owner, frozenset(thread_ids)), None)

    async def _drop_many(self, batch: dict[tuple[str, frozenset[str]], None]) -> dict[Any, None]:
        pairs = sorted({(owner, thread) for owner, threads in batch for thread in threads})
        async with self.engine.begin() as conn:
            for start in range(0, len(pairs), IN_CHUNK):  # bound parameters per statement
                await conn.execute(*self._delete_pairs(pairs[start : start + IN_CHUNK]))
        return {}

    async def all_pending(self) -> dict[str, tuple[set[str], str | None, float]]:
        """Owner → (threads, model, due_at) for every extraction that was waiting when we last stopped."""
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(memory_pending))).mappings()
            found: dict[str, tuple[set[str], str | None, float]] = {}
            for row in rows:
                threads, _model, due = found.get(row["owner"], (set(), row["model"], row["due_at"]))
                threads.add(row["thread_id"])
                found[row["owner"]] = (threads, row["model"], min(due, row["due_at"]))
            return found


def _row(fact: Fact) -> dict[str, Any]:
    return {
        "id": fact.id,
        "content": fact.content,
        "category": fact.category,
        "confidence": fact.confidence,
        "created_at": fact.created_at,
        "updated_at": fact.updated_at,
    }


def render_memory(facts: Sequence[Fact], summary: str | None, query: str, token_budget: int) -> str:
    """The memory block for the system prompt: summary first, then facts by relevance, within budget."""
    return FactIndex.build(facts).render(summary, query, token_budget)


ModelGetter = Callable[[str | None], Any]
TranscriptGetter = Callable[[str], Awaitable[list[BaseMessage]]]
#: Slack when a timer fires: the loop runs a timer up to its clock's resolution early.
CLOCK_SLACK = time.get_clock_info("monotonic").resolution


class _Waiting:
    """One owner's debounced extraction: the threads to read, the model, and when it is due (loop time).

    Two tracked objects per owner (this and the set) instead of a sleeping task — a task, two
    coroutines, a future, a timer handle and a contextvars context each — which in a burst of 10,000
    new owners was the largest per-chat state the young collections walked (docs/PERFORMANCE.md)."""

    __slots__ = ("due", "model", "queued", "threads")

    def __init__(self, threads: set[str], model: str | None, due: float) -> None:
        self.threads = threads
        self.model = model
        self.due = due  # moved by every new turn of the owner
        self.queued = due  # the due time of this entry's item in the timer queue


class MemoryService:
    """Debounces extraction per owner, runs it, and renders memory for prompts.

    What must survive a restart is in the database: each thread's extraction cursor (the newest message
    already read, so a restart — or a ``/memory clear`` — never brings back facts from older messages)
    and the pending debounced extractions (run after a restart once what is left of the wait is over, or
    at the latest when the service stops: :meth:`close` flushes them).
    """

    #: How long :meth:`close` may spend flushing pending extractions before leaving them for next start.
    FLUSH_SECONDS = 15.0

    def __init__(
        self,
        config: MemoryConfig,
        store: MemoryStore,
        *,
        chat_model: ModelGetter,
        transcript: TranscriptGetter,
    ) -> None:
        self.config = config
        self.store = store
        self._chat_model = chat_model
        self._transcript = transcript
        self._pending: dict[str, _Waiting] = {}
        #: (due, owner), earliest first; one timer for all owners fires at the head (:meth:`_fire`).
        #: Items of an entry that was replaced or forgotten are stale and skipped.
        self._queue: list[tuple[float, str]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # extractions running now
        #: Notes not yet written, by owner: threads added to a waiting entry, or None to rewrite the
        #: owner's rows (a new entry or model). Written in batches by :meth:`_write_notes`.
        self._notes: dict[str, set[str] | None] = {}
        #: One future per hook waiting for the queued notes' commit (resolved together when it commits).
        self._batch: list[asyncio.Future[None]] = []
        self._writer: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Reschedule the extractions a previous run left pending."""
        now = time.time()
        for owner, (threads, model, due_at) in (await self.store.all_pending()).items():
            delay = min(max(0.0, due_at - now), self.config.debounce_seconds)
            self._schedule(owner, threads, model, delay)
        if self._pending:
            log.info("rescheduled %d pending memory extraction(s)", len(self._pending))

    async def prompt_block(self, owner: str, query: str) -> str:
        """The memory block for a turn: one small query, then the cached index (see :meth:`MemoryStore.view`)."""
        index, summary = await self.store.view(owner)
        return index.render(summary, query, self.config.injection_token_budget)

    async def turn_finished(self, owner: str, thread_id: str, model: str | None = None) -> None:
        """Note that ``thread_id`` had a turn; extract once the owner has been quiet for the debounce.

        Returns once the note is recorded in the database, as before batching: the caller (the after-turn
        hook, run just after the reply is delivered) may rely on it surviving a hard kill from then on.

        O(1) on the hot path: when the owner already waits with this thread and model, only the in-memory
        deadline moves (no database write, no task churn). The stored row keeps its first due time, so
        after a crash the extraction may run up to one debounce early — never lost, never late. Writes
        are batched (:meth:`_write_notes`): every note made while one transaction runs goes into the
        next, one transaction for many owners.
        """
        if self.config.debounce_seconds <= 0:
            await self.extract(owner, {thread_id}, model)
            return
        entry = self._pending.get(owner)
        if entry is not None and entry.model == model:
            entry.due = asyncio.get_running_loop().time() + self.config.debounce_seconds
            if thread_id in entry.threads:
                return
            entry.threads.add(thread_id)  # in memory first, so a turn finishing meanwhile sees it
            added = self._notes.get(owner, set())
            if added is not None:  # None: the owner's rows are rewritten anyway, with this thread
                added.add(thread_id)
                self._notes[owner] = added
        else:
            threads = {thread_id} | (entry.threads if entry is not None else set())
            self._schedule(owner, threads, model, self.config.debounce_seconds)
            self._notes[owner] = None  # a new entry (or model): rewrite the owner's rows
        await self._noted()

    async def _noted(self) -> None:
        """Wait until the batch holding the notes queued so far has committed (its error is raised).

        Each waiting turn has a future of its own: a turn cancelled while it waits (shutdown) cancels
        only that future, not the write the other turns of the batch wait for — and its own note is
        still written. (A shield over one shared future did the same with one more future and two more
        event-loop callbacks per turn.)"""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._batch.append(waiter)
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_notes(), name="memory-notes")
        await waiter

    async def _write_notes(self) -> None:
        """Write the queued notes, batch after batch, until none are left: one writer at a time, so a
        slower rewrite of an owner's rows can never commit after a later write and drop a thread from
        the durable record. Each batch reads the owners' current entries when it is taken."""
        batch: list[asyncio.Future[None]] = []
        try:
            while self._notes:
                notes, self._notes = self._notes, {}
                batch, self._batch = self._batch, []
                rewrite: list[str] = []
                rows: list[tuple[str, str, str | None]] = []
                for owner, added in notes.items():
                    current = self._pending.get(owner)
                    if current is None:  # its extraction already started and covers these turns
                        continue
                    if added is None:
                        rewrite.append(owner)
                    rows.extend(
                        (owner, t, current.model) for t in sorted(current.threads if added is None else added)
                    )
                try:
                    if rows:
                        due_at = time.time() + self.config.debounce_seconds
                        await self.store.write_pending(rewrite, rows, due_at)
                except Exception as exc:
                    log.warning(
                        "recording %d pending memory note(s) failed: %s", len(rows), type(exc).__name__
                    )
                    for waiter in batch:
                        if not waiter.done():
                            waiter.set_exception(exc)
                    continue
                for waiter in batch:
                    if not waiter.done():  # a cancelled turn's future is done
                        waiter.set_result(None)
        finally:
            self._writer = None
            for waiter in (*batch, *self._batch):  # cancelled mid-write: nobody waits forever
                if not waiter.done():
                    waiter.cancel()
            self._batch = []

    def _schedule(self, owner: str, threads: set[str], model: str | None, delay: float) -> None:
        """A new entry for ``owner`` (replacing any waiting one), due after ``delay`` seconds."""
        loop = asyncio.get_running_loop()
        entry = _Waiting(threads, model, loop.time() + delay)
        self._pending[owner] = entry
        heapq.heappush(self._queue, (entry.queued, owner))
        self._arm(loop)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """The one timer fires at the queue's head (or earlier: :meth:`_fire` then re-arms it)."""
        if not self._queue:
            return
        head = self._queue[0][0]
        if self._timer is not None:
            if self._timer.when() <= head:
                return
            self._timer.cancel()
        self._timer = loop.call_at(head, self._fire)

    def _fire(self) -> None:
        """Start the extraction of every owner quiet for the whole debounce; a later turn moved the
        others' deadlines, so they go back in the queue."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time() + CLOCK_SLACK
        try:
            while self._queue and self._queue[0][0] <= now:
                queued, owner = heapq.heappop(self._queue)
                entry = self._pending.get(owner)
                if entry is None or entry.queued != queued:
                    continue  # forgotten, extracting, or replaced by a newer entry with its own item
                if entry.due > now:
                    entry.queued = entry.due
                    heapq.heappush(self._queue, (entry.queued, owner))
                    continue
                del self._pending[owner]  # from here on a new turn schedules a fresh run
                task = loop.create_task(
                    self._extract_pending(owner, entry.threads, entry.model), name=f"memory-{owner[:16]}"
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            self._arm(loop)

    async def _extract_pending(self, owner: str, threads: set[str], model: str | None) -> None:
        await self.extract(owner, threads, model)
        if owner not in self._pending:  # a newer turn re-noted the owner meanwhile: its row stays
            await self.store.drop_pending(owner, threads)

    def forget_pending(self, owner: str) -> None:
        self._pending.pop(owner, None)  # its queue item is stale now

    async def clear(self, owner: str, thread_ids: Iterable[str] = ()) -> int:
        """``/memory clear``: forget facts and pending work, and move every known thread's cursor to its
        newest message so nothing said before the clear is extracted again — even after a restart."""
        self.forget_pending(owner)
        threads = set(thread_ids) | await self.store.owner_threads(owner)
        cursors: dict[str, str | None] = {}
        for thread_id in sorted(threads):
            messages = await self._transcript(thread_id)
            cursors[thread_id] = messages[-1].id if messages else None
        return await self.store.clear(owner, cursors)

    async def extract(self, owner: str, thread_ids: set[str], model: str | None) -> bool:
        """One extraction pass; returns whether memory changed. Failures are logged, never raised.

        Cursors move only after the answer is stored, so a failed or interrupted pass is retried.
        """
        try:
            transcript: list[str] = []
            cursors: dict[str, str | None] = {}
            ordered = sorted(thread_ids)
            for start in range(0, len(ordered), IN_CHUNK):  # one cursor query per chunk of threads
                for thread_id, lines, newest in await self._new_messages(ordered[start : start + IN_CHUNK]):
                    transcript.extend(lines)
                    if newest is not None:
                        cursors[thread_id] = newest
            if not transcript:
                if cursors:
                    await self.store.set_cursors(owner, cursors)
                return False
            known = await self.store.facts(owner)
            summary = await self.store.summary(owner)
            request = self._request(known, summary, transcript)
            answer = await self._chat_model(model).ainvoke(request)
            parsed = parse_extraction(_text(answer))
            if parsed is None:
                log.info("memory extraction answer was not JSON; nothing stored")
                await self.store.set_cursors(owner, cursors)
                return False
            facts, new_summary = parsed
            if facts or new_summary:
                await self.store.merge(owner, facts, new_summary, max_facts=self.config.max_facts)
            await self.store.set_cursors(owner, cursors)
            return bool(facts or new_summary)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("memory extraction failed: %s", type(exc).__name__)
            return False

    async def _new_messages(self, thread_ids: list[str]) -> list[tuple[str, list[str], str | None]]:
        """Per thread: the transcript lines after its cursor, and the id of the newest message seen.

        Each thread's transcript is read before its cursor, as when each had a query of its own; the
        cursors of all of them are then one query (a burst of new chats leaves one owner with thousands
        of threads, read when the service stops: a query each was most of the shutdown). Only the ids
        and the last ``TRANSCRIPT_MESSAGES`` messages of each thread are kept meanwhile."""
        read: list[tuple[str, list[str | None], list[BaseMessage]]] = []
        for thread_id in thread_ids:
            messages = await self._transcript(thread_id)
            read.append((thread_id, [m.id for m in messages], messages[-TRANSCRIPT_MESSAGES:]))
        cursors = await self.store.cursors(thread_ids)
        return [(thread_id, *_after_cursor(ids, tail, cursors[thread_id])) for thread_id, ids, tail in read]

    @staticmethod
    def _request(known: Sequence[Fact], summary: str | None, transcript: list[str]) -> list[BaseMessage]:
        facts = "\n".join(f"- {f.content} ({f.category}, {f.confidence:.2f})" for f in known) or "(none)"
        body = (
            f"Known summary: {summary or '(none)'}\nKnown facts:\n{facts}\n\n"
            "Latest conversation:\n" + "\n".join(transcript)
        )
        return [SystemMessage(EXTRACTION_PROMPT), HumanMessage(body)]

    async def close(self) -> None:
        """Flush pending extractions now (bounded by ``FLUSH_SECONDS``); what does not finish stays
        recorded and runs after the next start."""
        pending = list(self._pending.items())
        self._pending.clear()
        self._queue.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = time.monotonic() + self.FLUSH_SECONDS
        if self._writer is not None:  # a batch being written commits before the flushes drop its rows
            await asyncio.wait({self._writer}, timeout=self.FLUSH_SECONDS)  # (later batches: nothing left)
        running = [t for t in self._tasks if not t.done()]
        flushes = [
            asyncio.create_task(self._extract_pending(owner, entry.threads, entry.model))
            for owner, entry in pending
        ]
        work = [*running, *flushes]
        if work:
            _done, late = await asyncio.wait(work, timeout=max(0.0, deadline - time.monotonic()))
            for task in late:
                task.cancel()
            for task in work:
                with contextlib.suppress(BaseException):
                    await task


def _after_cursor(
    ids: list[str | None], tail: list[BaseMessage], cursor: tuple[bool, str | None]
) -> tuple[list[str], str | None]:
    """A thread's transcript lines after its cursor and its newest message id (None: nothing new).

    ``ids`` are all the thread's message ids, ``tail`` its last ``TRANSCRIPT_MESSAGES`` messages."""
    known, last_id = cursor
    start = 0
    if known and last_id is not None:
        # Not found: compaction summarised it away, and compaction only removes the oldest
        # messages — so every message still in the thread is newer than the cursor.
        start = ids.index(last_id) + 1 if last_id in ids else 0
    lines = []
    for message in tail[max(0, start - (len(ids) - len(tail))) :]:
        if isinstance(message, HumanMessage):
            if (message.id or "").startswith(HIDDEN_ID_PREFIX):
                continue  # a goal continuation's prompt: our words, not the user's
            who = "User"
        elif isinstance(message, AIMessage):
            who = "Assistant"
        else:
            continue
        text = _text(message).strip()
        if text:
            lines.append(f"{who}: {text[:TRANSCRIPT_CHARS_PER_MESSAGE]}")
    newest = ids[-1] if ids and start < len(ids) else None
    return lines, newest


def _text(message: Any) -> str:
    content = getattr(message, "content", message)
    if isinstance(content, str):
        return content
    return "".join(
        block if isinstance(block, str) else str(block.get("text", ""))
        for block in content
        if isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
    )
