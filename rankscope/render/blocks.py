"""HTML building blocks every page shares (the report's views, the diff, the web UI's rank page): escaped
text, sortable tables of declared columns in human units, findings with their evidence. No page here."""
from __future__ import annotations

import html
from typing import Any

from rankscope.analysis.base import Result

MAX_ROWS = 200


def esc(v: Any) -> str:
    """Escape any value for HTML text or attribute context."""
    return html.escape(str(v), quote=True)


def fmt(v: Any) -> str:
    """A compact human form of a table cell."""
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}: {fmt(x)}" for k, x in v.items())
    return "" if v is None else str(v)


def table_html(rows: list[dict[str, Any]], cols: list[str] | None = None, *, hot: set[int] | None = None,
               limit: int = MAX_ROWS, total: int | None = None, sort_keys: list[dict[str, Any]] | None = None) -> str:
    """A sortable table of at most ``limit`` rows; rows whose index is in ``hot`` are highlighted.
    ``sort_keys`` (per row, per column) are the raw numbers a column sorts by when its text has units."""
    cols = cols or (list(rows[0]) if rows else [])
    # words (names, shapes, groups) read from the left; numbers with units line up on the right
    text = {c for c in cols if sort_keys and not any(c in k for k in sort_keys)}
    head = "".join(f'<th{" class=t" if c in text else ""}>{esc(c)}</th>' for c in cols)

    def td(i: int, c: str, v: Any) -> str:
        k = sort_keys[i].get(c) if sort_keys else None
        attr = f' data-v="{k!r}"' if isinstance(k, (int, float)) and not isinstance(k, bool) else ""
        return f'<td{attr}{" class=t" if c in text else ""}>{esc(fmt(v))}</td>'

    body = "".join(
        f'<tr{" class=hot" if hot and i in hot else ""}>' + "".join(td(i, c, r.get(c)) for c in cols)
        + "</tr>" for i, r in enumerate(rows[:limit]))
    total = len(rows) if total is None else total
    more = (f'<p class="muted">first {limit:,} of {total:,} rows; the full table is in '
            "<code>rankscope analyze --json</code></p>" if total > limit else "")
    return f'<div class="scroll"><table class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{more}'


def findings_html(result: Result) -> str:
    """Findings as a list: severity, title, ranks, and the evidence as labelled facts in human units."""
    from rankscope.intlist import format_int_list

    items = []
    for f in result.findings:
        ranks = f" (ranks {esc(format_int_list(sorted(f.ranks)))})" if len(f.ranks) > 1 else ""
        conf = f" · confidence {f.confidence:.0%}" if f.confidence is not None else ""
        items.append(f'<li><span class="sev-{esc(f.severity.value)}">{esc(f.severity.value)}</span> '
                     f"{esc(f.title)}{ranks}{conf}{evidence_html(f.evidence)}</li>")
    return f"<ul>{''.join(items)}</ul>" if items else ""


def evidence_html(ev: dict[str, Any]) -> str:
    """Evidence behind a disclosure, as labelled facts (the raw evidence is in the JSON output)."""
    from rankscope.render.declare import evidence_facts

    facts = evidence_facts(ev)
    if not facts:
        return ""
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in facts)
    return f'<details class="muted"><summary>evidence</summary><table class="facts">{rows}</table></details>'


def declared_table(rows: list[dict[str, Any]], cols: Any, *, hot: set[int] | None = None, limit: int = MAX_ROWS) -> str:
    """A sortable table of the declared columns (labels and human units) of ``rows``."""
    from rankscope.render.declare import cell

    cols = [c for c in cols if rows and c.key in rows[0]]
    shown = [{c.label: cell(r.get(c.key), c.unit) for c in cols} for r in rows[:limit]]
    keys = [{c.label: r.get(c.key) for c in cols if c.unit not in ("text", "ranks")} for r in rows[:limit]]
    return table_html(shown, [c.label for c in cols], hot=hot, limit=limit, total=len(rows), sort_keys=keys)
