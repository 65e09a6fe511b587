"""The HTML report of synthetic clusters in headless Chromium: file size and time until the overview is drawn.

The browser test used to assert "drawn in under 3 s / 5 s"; on a loaded 2-core machine that is a red run that
is not a bug, so the time is measured here instead, side by side for each size, in one browser session:
page load until the breakdown chart and the who-waits-for-whom chart have their SVG, the median of
``--repeats`` loads (the first load, with a cold cache, is reported apart).

    .venv/bin/python bench/report_open.py --ranks 64 1024 --cache /tmp/rankscope-bench-cache
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
SHAPES = {64: (10, 60), 1024: (3, 12)}  # ranks -> (steps, ops per step), as tests/e2e/test_browser_report.py


def report(cache: Path, ranks: int) -> Path:
    """The report of a synthetic run of ``ranks`` ranks (run and report made once, kept in ``cache``)."""
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run
    from rankscope.render.html import render
    from rankscope.synth import generate

    steps, ops = SHAPES.get(ranks, (5, 40))
    root = cache / f"report-r{ranks}"
    out = cache / f"report-r{ranks}.html"
    if not (root / "run.json").exists():
        generate(root, ranks=ranks, steps=steps, ops_per_step=ops, seed=5, jobs=2, overwrite=True)
    run = load_run(root, jobs=2)
    render(run, run_all(run), out)
    return out


def open_times(page: object, url: str, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        page.goto(url)  # type: ignore[attr-defined]
        page.wait_for_selector("#breakdown-chart .main-svg")  # type: ignore[attr-defined]
        page.wait_for_selector("#cluster-chart .main-svg")  # type: ignore[attr-defined]
        times.append(time.perf_counter() - t0)
    return times


def check(page: object, f: Path) -> int:
    """What tests/e2e/test_browser_report.py asserts at 64 ranks, here at every size (the 1,024-rank case
    left the suite, #23): under 10 MB, and the cluster timeline groups its ranks into 3-8 lanes with the
    fastest and the slowest named. Returns the number of lanes."""
    assert f.stat().st_size < 10 * 2**20, f.stat().st_size
    lanes = page.eval_on_selector_all("#cluster-chart .ytick text",  # type: ignore[attr-defined]
                                      "ts => ts.map(t => t.textContent)")
    assert 3 <= len(lanes) <= 8 and any("fastest own time" in x for x in lanes), lanes
    assert any("slowest own time" in x or "straggler verdict" in x for x in lanes), lanes
    return len(lanes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/rankscope-bench-cache"))
    a = ap.parse_args()
    a.cache.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    files = {n: report(a.cache, n) for n in a.ranks}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = b.new_page(viewport={"width": 1300, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        print("| ranks | report size | lanes | first open (s) | open, median of the next (s) |")
        print("|---|---|---|---|---|")
        for n, f in files.items():
            t = open_times(page, f.as_uri(), a.repeats + 1)
            lanes = check(page, f)
            print(f"| {n:,} | {f.stat().st_size / 2**20:.1f} MB | {lanes} | {t[0]:.2f} | "
                  f"{statistics.median(t[1:]):.2f} |")
        assert not errors, errors
        b.close()


if __name__ == "__main__":
    main()
