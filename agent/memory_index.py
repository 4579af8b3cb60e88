"""An owner's facts, indexed once, so choosing what to inject costs the query's words, not the fact count.

``render_memory`` used to re-tokenise every fact and sort them all before every turn (441 ms on the event
loop at 10,000 facts), and ``merge`` compared every candidate with every fact (3.3 s). A
:class:`FactIndex` tokenises each fact once and keeps an inverted index (word → facts). Before a turn only
the facts sharing a word with the message get a new score; everything else is already in order.
The result is exactly the old one: same scores, same order (ties by the store's order), same budget rule.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "of",
        "to",
        "in",
        "on",
        "for",
        "with",
        "is",
        "are",
        "was",
        "were",
        "be",
        "i",
        "my",
        "me",
        "you",
        "your",
        "it",
        "this",
        "that",
        "at",
        "as",
        "by",
    ]
)
HEADER = (
    "What you remember about this user from earlier conversations (use it when it helps; do not recite it):"
)
#: Score added for a fact updated within a day of the newest one.
RECENT_SECONDS = 86400


class FactLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def category(self) -> str: ...
    @property
    def confidence(self) -> float: ...
    @property
    def updated_at(self) -> float: ...


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def similarity(a: str, b: str) -> float:
    """Jaccard similarity of the two texts' words (1.0 for equal texts without any word)."""
    return _similarity(words(a), a, words(b), b)


def _similarity(wa: set[str] | frozenset[str], a: str, wb: set[str] | frozenset[str], b: str) -> float:
    if not wa or not wb:
        return 1.0 if a.strip().lower() == b.strip().lower() else 0.0
    return len(wa & wb) / len(wa | wb)


def estimate_tokens(text: str) -> int:
    """About four characters per token: close enough for a prompt budget, and needs no tokenizer."""
    return max(1, len(text) // 4)


@dataclass(slots=True)
class FactIndex:
    """Facts in the store's order (confidence, then newest first) with their words and prompt lines."""

    facts: list[FactLike]
    words: list[frozenset[str]]
    postings: dict[str, list[int]]
    #: Facts whose text has no word at all, by normalised text (they only ever match themselves).
    wordless: dict[str, list[int]]
    #: Score without any query word (confidence + recency), and every fact ordered by it.
    base: list[float]
    recency: list[float]
    base_order: list[int]
    lines: list[str]
    costs: list[int]
    min_cost: int

    @classmethod
    def build(cls, facts: Sequence[FactLike]) -> FactIndex:
        index = cls(list(facts), [], {}, {}, [], [], [], [], [], 0)
        newest = max((f.updated_at for f in facts), default=0.0)
        for i, fact in enumerate(facts):
            recency = 0.1 if newest and fact.updated_at >= newest - RECENT_SECONDS else 0.0
            index.recency.append(recency)
            index.base.append(fact.confidence + 0.0 + recency)  # the same float sum as with a query
            index._add_text(i, fact)
        index.base_order = sorted(range(len(facts)), key=lambda i: (-index.base[i], i))
        index.min_cost = min(index.costs, default=0)
        return index

    def _add_text(self, i: int, fact: FactLike) -> None:
        found = frozenset(words(fact.content))
        self.words.append(found)
        for word in found:
            self.postings.setdefault(word, []).append(i)
        if not found:
            self.wordless.setdefault(fact.content.strip().lower(), []).append(i)
        line = f"- {fact.content} ({fact.category})"
        self.lines.append(line)
        self.costs.append(estimate_tokens(line))

    def add(self, fact: FactLike) -> None:
        """Append a fact for :meth:`best_match` (``merge`` adds what it inserts; scores are not kept)."""
        self.facts.append(fact)
        self._add_text(len(self.facts) - 1, fact)

    def best_match(self, content: str) -> tuple[FactLike, float] | None:
        """The most similar fact (the first in order among equals) and its similarity; None if no
        fact shares a word with ``content`` (or, for wordless text, equals it)."""
        wanted = words(content)
        if not wanted:
            same = self.wordless.get(content.strip().lower())
            return (self.facts[same[0]], 1.0) if same else None
        shared: set[int] = set()
        for word in wanted:
            shared.update(self.postings.get(word, ()))
        best: tuple[float, int] | None = None
        for i in shared:
            score = _similarity(self.words[i], self.facts[i].content, wanted, content)
            if best is None or score > best[0] or (score == best[0] and i < best[1]):
                best = (score, i)
        return (self.facts[best[1]], best[0]) if best is not None else None

    def ranked(self, query: str) -> Iterator[int]:
        """Every fact, best first: confidence + 0.5 per query word it contains + recency."""
        overlap: dict[int, int] = {}
        for word in words(query):
            for i in self.postings.get(word, ()):
                overlap[i] = overlap.get(i, 0) + 1
        facts, recency = self.facts, self.recency
        boosted = sorted(
            ((-(facts[i].confidence + 0.5 * n + recency[i]), i) for i, n in overlap.items()),
        )
        rest = ((-self.base[i], i) for i in self.base_order if i not in overlap)
        for _key, i in heapq.merge(boosted, rest):
            yield i

    def render(self, summary: str | None, query: str, token_budget: int) -> str:
        """The memory block for the system prompt: summary first, then facts by relevance, within budget."""
        if not self.facts and not summary:
            return ""
        lines = [HEADER]
        used = estimate_tokens(HEADER)
        if summary:
            line = f"Summary: {summary}"
            if used + estimate_tokens(line) <= token_budget:
                lines.append(line)
                used += estimate_tokens(line)
        if self.facts:
            for i in self.ranked(query):
                if token_budget - used < self.min_cost:
                    break  # nothing left can fit
                cost = self.costs[i]
                if used + cost > token_budget:
                    continue
                lines.append(self.lines[i])
                used += cost
        return "<memory>\n" + "\n".join(lines) + "\n</memory>" if len(lines) > 1 else ""
