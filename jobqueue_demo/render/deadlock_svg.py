"""A deadlock cycle as a small inline SVG for the lesson page: one box per transaction, an
arrow from each waiter to the holder of what it waits for, labelled with the lock; the
victim crossed out. Drawn from coordinates alone: no script, font or image to load."""

from __future__ import annotations

import html
import math

from ..deadlock import DeadlockCycle

WIDTH = 680
BOX_W, BOX_H = 96, 40
VICTIM_COLOUR = "#cf222e"
INK = "#1f2328"
MUTED = "#59636e"
# How far each arrow bows out of the straight line, so A->B and B->A do not overlap.
BOW = 0.22


def cycle_svg(cycle: DeadlockCycle, colours: dict[str, str]) -> str:
    """`colours`: session name -> its colour on the page."""
    # In the scenario's session order, so A stands left as in the transcript's columns.
    order = list(colours)
    parties = sorted(cycle.parties, key=lambda p: order.index(p.session) if p.session in order else len(order))
    height = 250 if len(parties) == 2 else 330
    centres = _centres(len(parties), height)
    at = {p.number: c for p, c in zip(parties, centres)}
    parts = [_defs()]
    for party in parties:
        if party.blocked_by in at:
            wanted = party.waits_for.text() if party.waits_for else "a lock"
            labels = [f"waits for {wanted}"]
            holder = cycle.party(party.blocked_by)
            if holder.held is not None:
                labels.append(f"{cycle.name(holder.number)} holds it: {holder.held.mode} {holder.held.kind} lock")
            victim = party.number == cycle.victim
            parts.append(_arrow(at[party.number], at[party.blocked_by], labels, victim))
    for party, (x, y) in zip(parties, centres):
        name = cycle.name(party.number)
        parts.append(_box(x, y, name, colours.get(party.session, INK), party.number == cycle.victim))
    summary = f"Deadlock: {' and '.join(cycle.name(p.number) for p in parties)} each wait for a lock the other holds; " \
              f"the server rolled back {cycle.name(cycle.victim)}."
    return (
        f'<figure class="deadlock"><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="100%" role="img" aria-label="{html.escape(summary)}">'
        f"<title>{html.escape(summary)}</title>{''.join(parts)}</svg>"
        f"<figcaption>{html.escape(summary)} Each arrow points from a waiting transaction to the one "
        "holding the lock it waits for.</figcaption></figure>"
    )


def _centres(count: int, height: int) -> list[tuple[float, float]]:
    if count == 2:
        return [(130.0, height / 2), (WIDTH - 130.0, height / 2)]
    radius = min(WIDTH, height) / 2 - 50
    return [
        (WIDTH / 2 + radius * 1.6 * math.cos(-math.pi / 2 + 2 * math.pi * i / count),
         height / 2 + radius * math.sin(-math.pi / 2 + 2 * math.pi * i / count))
        for i in range(count)
    ]


def _defs() -> str:
    return (
        '<defs><marker id="dl-head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" '
        f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{INK}"/></marker></defs>'
    )


def _arrow(start: tuple[float, float], end: tuple[float, float], labels: list[str], victim: bool) -> str:
    """The victim's wait is drawn dashed: the rollback ended it, which broke the cycle."""
    (x1, y1), (x2, y2) = start, end
    dx, dy = x2 - x1, y2 - y1
    length = math.hypot(dx, dy) or 1.0
    # To the right of the direction of travel: the two arrows of a pair bow apart.
    nx, ny = -dy / length, dx / length
    cx, cy = (x1 + x2) / 2 + nx * length * BOW, (y1 + y2) / 2 + ny * length * BOW
    sx, sy = _edge(x1, y1, cx, cy)
    ex, ey = _edge(x2, y2, cx, cy)
    mx, my = (sx + 2 * cx + ex) / 4, (sy + 2 * cy + ey) / 4
    step = 16
    first = my + 18 if ny > 0 else my - 10 - step * (len(labels) - 1)
    colour = VICTIM_COLOUR if victim else INK
    dash = ' stroke-dasharray="7 5"' if victim else ""
    lines = "".join(
        f'<tspan x="{mx:.1f}" y="{first + i * step:.1f}"{" fill=" + chr(34) + MUTED + chr(34) if i else ""}>'
        f"{html.escape(text)}</tspan>"
        for i, text in enumerate(labels)
    )
    return (
        f'<path d="M{sx:.1f},{sy:.1f} Q{cx:.1f},{cy:.1f} {ex:.1f},{ey:.1f}" fill="none" stroke="{colour}" '
        f'stroke-width="1.8"{dash} marker-end="url(#dl-head)"/>'
        f'<text text-anchor="middle" font-size="13" fill="{colour}" '
        f'font-family="ui-monospace, DejaVu Sans Mono, monospace">{lines}</text>'
    )


def _edge(x: float, y: float, towards_x: float, towards_y: float) -> tuple[float, float]:
    """Where the line from a box's centre towards a point leaves the box."""
    dx, dy = towards_x - x, towards_y - y
    scale = min(BOX_W / 2 / abs(dx) if dx else math.inf, BOX_H / 2 / abs(dy) if dy else math.inf)
    return x + dx * scale, y + dy * scale


def _box(x: float, y: float, name: str, colour: str, victim: bool) -> str:
    left, top = x - BOX_W / 2, y - BOX_H / 2
    stroke = VICTIM_COLOUR if victim else colour
    dash = ' stroke-dasharray="6 4"' if victim else ""
    out = (
        f'<rect x="{left:.1f}" y="{top:.1f}" width="{BOX_W}" height="{BOX_H}" rx="8" fill="#ffffff" '
        f'stroke="{stroke}" stroke-width="3"{dash}/>'
        f'<text x="{x:.1f}" y="{y + 6:.1f}" text-anchor="middle" font-size="18" font-weight="700" fill="{colour}" '
        f'font-family="ui-monospace, DejaVu Sans Mono, monospace">{html.escape(name)}</text>'
    )
    if victim:
        out += (
            f'<text x="{x:.1f}" y="{top + BOX_H + 18:.1f}" text-anchor="middle" font-size="13" '
            f'fill="{VICTIM_COLOUR}" font-family="system-ui, sans-serif">rolled back (1213)</text>'
        )
    return out
