"""A deadlock cycle as a small inline SVG for the lesson page: one box per transaction, an
arrow from each waiter to the holder of what it waits for, labelled with the lock; the
victim crossed out. Drawn from coordinates alone: no script, font or image to load."""

from __future__ import annotations

import html
import math

from ..engine.types import DeadlockCycle

WIDTH = 680
BOX_W, BOX_H = 96, 40
VICTIM_COLOUR = "#cf222e"
INK = "#1f2328"
MUTED = "#59636e"
# How far each arrow bows out of the straight line, so A->B and B->A do not overlap.
BOW = 0.22


def cycle_svg(cycle: DeadlockCycle, colours: dict[str, str]) -> str:
    """`colours`: session name -> its colour on the page."""
    svg, summary = cycle_picture(cycle, colours)
    return (
        f'<figure class="deadlock">{svg}'
        f"<figcaption>{html.escape(summary)} Each arrow points from a waiting transaction to the one "
        "holding the lock it waits for.</figcaption></figure>"
    )


def cycle_picture(cycle: DeadlockCycle, colours: dict[str, str]) -> tuple[str, str]:
    """The cycle as a standalone SVG document (a page inlines it, `serve` sends it as an image)
    and its one-sentence summary, unescaped."""
    # In the scenario's session order, so A stands left as in the transcript's columns.
    order = list(colours)
    parties = sorted(cycle.parties, key=lambda p: order.index(p.session) if p.session in order else len(order))
    height = 250 if len(parties) == 2 else 400
    centres = _centres(len(parties), height)
    at = {p.number: c for p, c in zip(parties, centres)}
    middle = (WIDTH / 2, height / 2)
    parts = [_defs()]
    for party in parties:
        if party.blocked_by in at:
            victim = party.number == cycle.victim
            parts.append(_arrow((at[party.number], at[party.blocked_by]), middle, _labels(cycle, party), victim))
    for party, (x, y) in zip(parties, centres):
        name = cycle.name(party.number)
        parts.append(_box(x, y, name, colours.get(party.session, INK), party.number == cycle.victim))
    summary = _summary(cycle, [cycle.name(p.number) for p in parties])
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="100%" role="img" aria-label="{html.escape(summary)}">'
        f"<title>{html.escape(summary)}</title>{''.join(parts)}</svg>"
    )
    return svg, summary


def _summary(cycle: DeadlockCycle, names: list[str]) -> str:
    if len(names) == 2:
        who = f"{names[0]} and {names[1]} each wait for a lock the other holds"
    else:
        who = f"{', '.join(names[:-1])} and {names[-1]} each wait for a lock the next one holds"
    return f"Deadlock: {who}; the server rolled back {cycle.name(cycle.victim)}."


def _labels(cycle: DeadlockCycle, party) -> list[str]:
    """What the arrow's waiter wants, where, and how its holder holds it: short lines."""
    if party.waits_for is None:
        return ["waits for a lock"]
    what, _, where = party.waits_for.text().partition(" on ")
    labels = [f"waits for {what}", f"on {where}"]
    holder = cycle.party(party.blocked_by)
    if holder is not None and holder.held is not None:
        labels.append(f"{cycle.name(holder.number)} holds it: {holder.held.mode} {holder.held.kind} lock")
    return labels


def _centres(count: int, height: int) -> list[tuple[float, float]]:
    if count == 2:
        return [(130.0, height / 2), (WIDTH - 130.0, height / 2)]
    radius = height / 2 - 90
    return [
        (WIDTH / 2 + radius * 1.5 * math.cos(-math.pi / 2 + 2 * math.pi * i / count),
         height / 2 + radius * math.sin(-math.pi / 2 + 2 * math.pi * i / count))
        for i in range(count)
    ]


def _defs() -> str:
    return (
        '<defs><marker id="dl-head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" '
        f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{INK}"/></marker></defs>'
    )


def _arrow(ends: tuple, middle: tuple[float, float], labels: list[str], victim: bool) -> str:
    """Bowed away from the figure's middle, its labels outside the bow. The victim's wait is
    drawn dashed: the rollback ended it, which broke the cycle."""
    (x1, y1), (x2, y2) = ends
    dx, dy = x2 - x1, y2 - y1
    length = math.hypot(dx, dy) or 1.0
    nx, ny = -dy / length, dx / length
    # Outwards; with two boxes the middle is on the line, and each arrow of the pair bows
    # to the right of its direction of travel, so the two part.
    if nx * ((x1 + x2) / 2 - middle[0]) + ny * ((y1 + y2) / 2 - middle[1]) < 0:
        nx, ny = -nx, -ny
    cx, cy = (x1 + x2) / 2 + nx * length * BOW, (y1 + y2) / 2 + ny * length * BOW
    sx, sy = _edge(x1, y1, cx, cy)
    ex, ey = _edge(x2, y2, cx, cy)
    mx, my = (sx + 2 * cx + ex) / 4 + nx * 10, (sy + 2 * cy + ey) / 4 + ny * 10
    anchor = "start" if nx > 0.4 else "end" if nx < -0.4 else "middle"
    step = 16
    first = my + 12 if ny > 0.4 else my - step * (len(labels) - 1) if ny < -0.4 else my - step * (len(labels) - 1) / 2
    colour = VICTIM_COLOUR if victim else INK
    dash = ' stroke-dasharray="7 5"' if victim else ""
    lines = "".join(
        f'<tspan x="{mx:.1f}" y="{first + i * step:.1f}"{" fill=" + chr(34) + MUTED + chr(34) if i == 2 else ""}>'
        f"{html.escape(text)}</tspan>"
        for i, text in enumerate(labels)
    )
    return (
        f'<path d="M{sx:.1f},{sy:.1f} Q{cx:.1f},{cy:.1f} {ex:.1f},{ey:.1f}" fill="none" stroke="{colour}" '
        f'stroke-width="1.8"{dash} marker-end="url(#dl-head)"/>'
        f'<text text-anchor="{anchor}" font-size="13" fill="{colour}" '
        f'font-family="ui-monospace, DejaVu Sans Mono, monospace">{lines}</text>'
    )


def _edge(x: float, y: float, towards_x: float, towards_y: float) -> tuple[float, float]:
    """Where the line from a box's centre towards a point leaves the box."""
    dx, dy = towards_x - x, towards_y - y
    scale = min(BOX_W / 2 / abs(dx) if dx else math.inf, BOX_H / 2 / abs(dy) if dy else math.inf)
    return x + dx * scale, y + dy * scale


def _box(x: float, y: float, name: str, colour: str, victim: bool) -> str:
    """The victim's caption leans away from the figure's middle, where the arrows meet the box."""
    outward = (x > WIDTH / 2) - (x < WIDTH / 2)
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
            f'<text x="{x + outward * 30:.1f}" y="{top + BOX_H + 18:.1f}" text-anchor="middle" font-size="13" '
            f'fill="{VICTIM_COLOUR}" font-family="system-ui, sans-serif">rolled back (1213)</text>'
        )
    return out
