"""What a person sees on a page of the report or the web UI, read from the rendered DOM in a real browser.

``look(page, root)`` walks one shown view: its visible text (outside ``<code>``, which shows commands),
whether every card, table and chart label fits its box, whether annotations sit off the plot area, the
legend colours of every chart, and how much data the view shows (drawn marks, table rows).
``problems(seen, words)`` turns that into the list of what a person would misread: internal identifiers
(snake_case / camelCase that are not names from the traces), durations not in human units, raw numbers,
and layout faults. ``Colours`` collects legend colours over pages to check one colour per category.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

# Run in the page on a view's root element; returns plain JSON.
LOOK_JS = r"""
(root) => {
  const vis = e => e.checkVisibility({checkOpacity: true, checkVisibilityCSS: true});
  const box = e => e.getBoundingClientRect();
  const cut = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const say = e => (e.textContent || '').trim().slice(0, 50);
  const out = {texts: [], problems: [], legends: [], charts: 0, marks: 0, tables: 0, rows: 0, annotations: 0,
               xticks: {}, equal: []};
  const w = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  while (w.nextNode()) {
    const n = w.currentNode, p = n.parentElement;
    if (!p || !n.textContent.trim() || p.closest('script,style,code,select') || !vis(p)) continue;
    out.texts.push(n.textContent.trim());
  }
  for (const s of root.querySelectorAll('section')) {
    if (vis(s) && s.scrollWidth > s.clientWidth + 1)
      out.problems.push(`card content wider than the card (${s.scrollWidth} > ${s.clientWidth} px): ${say(s)}`);
  }
  for (const d of root.querySelectorAll('.scroll')) {
    if (vis(d) && d.scrollWidth > d.clientWidth + 1)
      out.problems.push(`table wider than its card (${d.scrollWidth} > ${d.clientWidth} px): ${say(d)}`);
  }
  for (const t of root.querySelectorAll('table')) {
    if (!vis(t)) continue;
    out.tables += 1;
    out.rows += t.tBodies.length ? t.tBodies[0].rows.length : t.rows.length;
  }
  for (const e of root.querySelectorAll('.heat-equal')) if (vis(e)) out.equal.push(e.textContent);
  for (const f of root.querySelectorAll('.rs-fig')) {
    if (!vis(f)) continue;
    if (!f.querySelector('.main-svg')) { out.problems.push(`chart ${f.id} not drawn`); continue; }
    out.charts += 1;
    const marks = f.querySelectorAll('.point, .js-line, .heatmaplayer image, .iciclelayer path.surface, ' +
                                     '.boxlayer path.box').length;
    out.marks += marks;
    if (!marks) out.problems.push(`chart ${f.id} shows no data`);
    const fb = box(f), plot = f.querySelector('.nsewdrag'), pb = plot && box(plot);
    const labels = [...f.querySelectorAll('.xtick text, .ytick text, .g-xtitle text, .g-ytitle text, .gtitle, ' +
                                          '.legendtext, .annotation-text, .cbtitle text, .cbaxis text')]
      .filter(l => vis(l) && box(l).width > 0);
    for (const l of labels) {
      const b = box(l);
      if (b.left < fb.left - 1 || b.right > fb.right + 1)
        out.problems.push(`label "${say(l)}" goes outside chart ${f.id}`);
    }
    for (const a of f.querySelectorAll('.annotation')) {
      if (!vis(a)) continue;
      out.annotations += 1;
      if (pb && cut(box(a), pb)) out.problems.push(`label "${say(a)}" lies on the plot area of ${f.id}`);
    }
    const legend = f.querySelector('.legend');
    const ticks = sel => [...f.querySelectorAll(sel)].filter(l => vis(l) && box(l).width > 0);
    if (legend) for (const t of ticks('.xtick text, .ytick text, .g-xtitle text'))
      if (cut(box(legend), box(t))) out.problems.push(`legend of ${f.id} covers the label "${say(t)}"`);
    if (legend && pb && cut(box(legend), pb)) out.problems.push(`legend of ${f.id} covers its plot area`);
    for (const sel of ['.xtick text', '.ytick text']) {
      const bs = ticks(sel).map(box);
      for (let i = 0; i < bs.length; i++) for (let j = i + 1; j < bs.length; j++)
        if (cut(bs[i], bs[j])) { out.problems.push(`tick labels of ${f.id} overlap`); i = bs.length; break; }
    }
    out.xticks[f.id] = ticks('.xtick text').length;
    for (const tr of (f.data || []).filter(t => t.type === 'heatmap')) {  // a matrix of one colour says nothing
      const z = tr.z.flatMap((row, i) => row.filter((v, j) => i !== j && v !== null && v !== undefined));
      if (z.length > 1 && Math.max(...z) - Math.min(...z) <= 0.005 * Math.max(...z.map(Math.abs)))
        out.problems.push(`heatmap ${f.id} is one colour: every pair of ranks has ${z[0]}`);
    }
    for (const t of f.querySelectorAll('.legend .traces')) {
      const name = t.querySelector('.legendtext').textContent;
      let colour = null;
      for (const p of t.querySelectorAll('.legendpoints path')) {
        const st = getComputedStyle(p);
        const fill = p.style.fill || st.fill, stroke = p.style.stroke || st.stroke;
        colour = fill && fill !== 'none' && fill !== 'rgba(0, 0, 0, 0)' ? fill : stroke;
        if (colour && colour !== 'none') break;
      }
      out.legends.push([name, colour]);
    }
  }
  return out;
}
"""

SNAKE = re.compile(r"\b[a-z]+_[a-z_]+\b")
CAMEL = re.compile(r"\b[a-z]+[A-Z][a-zA-Z]+\b")
# torch API names a hint tells the reader to use (real words to type, not internal columns), and the names of
# torch.distributed's collectives, which a note may name when the trace has none of them
ALLOW = {"record_shapes", "profile_memory", "pin_memory", "record_function", "trace_handler", "all_reduce",
         "all_gather", "reduce_scatter", "all_to_all", "all_gather_into_tensor", "reduce_scatter_tensor"}
NUM = r"([-+]?\d[\d,]*(?:\.\d+)?)"
MICRO = re.compile(NUM + r"\s*µs")
NANO = re.compile(NUM + r"\s*ns\b")
RAW = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3}){2,}(?![\d,])|(?<![\d.,])\d{7,}(?![\d.])|\d\.\d+e[+-]?\d+")
SHAPE = re.compile(r"\[[^\[\]]*\]")
CATEGORIES = ("compute", "exposed communication", "data wait", "idle")


def trace_words(*runs: Path) -> set[str]:
    """Names a trace itself carries (operators, kernels, collectives, process groups): shown as they are."""
    from rankscope.model.run import load_run

    words: set[str] = set()
    for root in runs:
        run = load_run(root, jobs=1)
        for r in run.rank_ids[:8]:
            words |= {str(x) for x in run.table(r, "events", columns=["name"]).column("name").unique().to_pylist()}
            words |= {str(x) for x in run.table(r, "collectives", columns=["op"]).column("op").unique().to_pylist()}
        meta = json.loads((root / "run.json").read_text()) if (root / "run.json").exists() else {}
        words |= {str(g.get("desc", "")) for g in meta.get("process_groups", [])}
    return words


def _no_shapes(text: str) -> str:
    """``text`` without its tensor shapes ("[8, 4096]", "[[6291456], []]"): sizes from the trace, shown as is."""
    while (shorter := SHAPE.sub("", text)) != text:
        text = shorter
    return text


def _number(text: str) -> float:
    return abs(float(text.replace(",", "")))


def problems(seen: dict[str, Any], words: set[str]) -> list[str]:
    """What a person would misread in one view (``seen`` from ``LOOK_JS``)."""
    out = list(seen["problems"])
    for t in seen["texts"]:
        for rx in (SNAKE, CAMEL):
            for m in rx.finditer(t):
                w = m.group()
                if w not in ALLOW and not any(w in name for name in words):
                    out.append(f"internal name {w!r} in {t[:80]!r}")
        out += [f"{m.group()} should be in ms: {t[:80]!r}" for m in MICRO.finditer(t) if _number(m.group(1)) >= 1000]
        out += [f"{m.group()} should be in µs: {t[:80]!r}" for m in NANO.finditer(t) if _number(m.group(1)) >= 1000]
        out += [f"raw number {m.group()} in {t[:80]!r}" for m in RAW.finditer(_no_shapes(t))]
    return out


def look(page: Any, root: str) -> dict[str, Any]:
    """``LOOK_JS`` on the element ``root`` of ``page`` (a Playwright page), details opened first."""
    page.eval_on_selector_all(f"{root} details", "ds => ds.forEach(d => d.open = true)")
    return page.eval_on_selector(root, LOOK_JS)


class Colours:
    """Legend colours seen per name, over every chart of every page looked at."""

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = defaultdict(set)
        self.where: dict[str, set[str]] = defaultdict(set)

    def add(self, seen: dict[str, Any], where: str) -> None:
        for name, colour in seen["legends"]:
            if colour:
                self.seen[name].add(colour)
                self.where[name].add(where)

    def problems(self) -> list[str]:
        """A category drawn in two colours, or a category's colour used for something else."""
        out = [f"{n!r} drawn in {sorted(c)} (in {sorted(self.where[n])})" for n, c in self.seen.items() if len(c) > 1]
        for cat in CATEGORIES:
            for colour in self.seen.get(cat, ()):
                others = [n for n, cs in self.seen.items() if n != cat and any(_near(colour, c) for c in cs)]
                if others:
                    out.append(f"{cat!r} ({colour}) looks like the colour of {others}")
        return out


def _near(a: str, b: str, within: float = 60.0) -> bool:
    """Two CSS rgb() colours a reader could take for one another (distance in RGB space)."""
    x, y = (tuple(int(v) for v in re.findall(r"\d+", c)[:3]) for c in (a, b))
    return len(x) == len(y) == 3 and sum((i - j) ** 2 for i, j in zip(x, y)) ** 0.5 < within
