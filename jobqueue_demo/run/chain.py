"""Who waits for whom when a schedule cannot go on, followed to its end.

A stuck session's direct blocker is often itself waiting: C waits for B, which waits for A.
Only the end of the chain explains the stop (A is idle in a transaction, so nothing will
release what everyone behind it waits for), so the chain is followed from each stuck
session through every blocker to the sessions that wait for nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

IDLE_IN_TRANSACTION = "idle in a transaction"
IDLE = "idle"
RUNNING = "running"
OUTSIDE = "outside the scenario"
CONSEQUENCE = {
    IDLE_IN_TRANSACTION: "idle in a transaction, so nothing will release its locks",
    IDLE: "idle, so nothing will release what it holds",
    RUNNING: "still running its own statement",
    OUTSIDE: "a connection outside the scenario",
}
UNNAMED = "a lock holder the server did not name"
STATEMENT_SHOWN = 80


@dataclass(frozen=True)
class Link:
    """One waiting session: what it waits for, held by whom, in which statement."""

    session: str
    blockers: tuple[str, ...]
    kind: str  # row lock, gap lock, metadata lock, table lock...
    lock: str  # e.g. "jobs PRIMARY X (2)"; empty when the server did not say
    statement: str
    queued: tuple[str, ...] = ()  # the blockers whose own request, still waiting, is ahead of this one
    requested: str = ""  # the mode it asks for, when the server tells it apart from the lock

    def phrase(self) -> str:
        holders = [b for b in self.blockers if b not in self.queued]
        what = " ".join(p for p in (self.kind, self.lock) if p) + (f", asking {self.requested}" if self.requested else "")
        first = " ".join(self.statement.split())[:STATEMENT_SHOWN]
        if self.queued and not holders:
            return f"is queued behind {' and '.join(self.queued)}'s request ({what}, in '{first}')"
        also = f", queued behind {' and '.join(self.queued)}'s request" if self.queued else ""
        return f"waits for {' and '.join(holders) or UNNAMED}{also} ({what}, in '{first}')"


@dataclass(frozen=True)
class Holder:
    """A session at the end of a chain: it waits for nothing, so its state is why all wait."""

    session: str
    state: str  # IDLE_IN_TRANSACTION, IDLE, RUNNING or OUTSIDE

    def phrase(self) -> str:
        return f"is {CONSEQUENCE[self.state]}"


@dataclass(frozen=True)
class WaitChain:
    links: tuple[Link, ...]  # each waiting session once, in the order followed
    holders: tuple[Holder, ...]
    cycle: bool = False  # a waiter reached again: the server did not break this cycle

    def renamed(self, names: Mapping[str, str]) -> WaitChain:
        """Its sessions as `names` calls them (a transcript's `A@1`)."""
        links = tuple(
            replace(k, session=names.get(k.session, k.session), blockers=tuple(names.get(b, b) for b in k.blockers),
                    queued=tuple(names.get(b, b) for b in k.queued))
            for k in self.links
        )
        holders = tuple(replace(h, session=names.get(h.session, h.session)) for h in self.holders)
        return replace(self, links=links, holders=holders)

    def lines(self) -> list[str]:
        """One line per waiting session, then one per session at the end of the chain."""
        out = [f"{link.session} {link.phrase()}" for link in self.links]
        out += [f"{h.session} {h.phrase()}" for h in self.holders]
        if self.cycle:
            out.append("the waits form a cycle the server did not break")
        return out

    def sentence(self, start: str) -> str:
        """The chain from `start` as one sentence: "C waits for B (…), which waits for A (…), which is …"."""
        return f"{start} {self._clause(start, set())}"

    def _clause(self, name: str, seen: set[str]) -> str:
        link = next((k for k in self.links if k.session == name), None)
        if link is None:  # every session `follow` reached is a link or a holder
            return next(h for h in self.holders if h.session == name).phrase()
        if name in seen:
            return "is already in this chain: a cycle"
        seen.add(name)
        text = link.phrase()
        if len(link.blockers) == 1:
            return f"{text}, which {self._clause(link.blockers[0], seen)}"
        return text + "".join(f"; {b} {self._clause(b, seen)}" for b in link.blockers)


def follow(stuck: list[str], waits: Mapping[str, Link], state_of: Callable[[str], str]) -> WaitChain:
    """The chain from the `stuck` sessions through `waits` (session -> its wait); `state_of`
    tells what a session that waits for nothing is doing."""
    links: list[Link] = []
    holders: list[Holder] = []
    seen: set[str] = set()
    pending = list(stuck)
    while pending:
        name = pending.pop(0)
        if name in seen:
            continue
        seen.add(name)
        link = waits.get(name)
        if link is None:
            holders.append(Holder(name, state_of(name)))
            continue
        links.append(link)
        pending += link.blockers
    return WaitChain(tuple(links), tuple(holders), _has_cycle(links))


def starts(chain: WaitChain, stuck: list[str]) -> list[str]:
    """The stuck sessions no other stuck session waits for: the rest are told inside their chains."""
    reached = {b for link in chain.links for b in link.blockers}
    return [s for s in stuck if s not in reached] or stuck[:1]


def _has_cycle(links: list[Link]) -> bool:
    edges = {link.session: link.blockers for link in links}
    done: set[str] = set()

    def reaches_back(name: str, path: set[str]) -> bool:
        if name in path:
            return True
        if name in done:
            return False
        done.add(name)
        return any(reaches_back(b, path | {name}) for b in edges.get(name, ()))

    return any(reaches_back(name, set()) for name in edges)
