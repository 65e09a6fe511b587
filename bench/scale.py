"""How `rankscope analyze` grows with the number of ranks: process pool vs Dask, local disk vs S3.

For each cluster size a synthetic run (``rankscope.synth``, seed 1, one compute straggler) is
generated once into ``--cache`` (and copied into a bucket of a moto S3 server that this script
starts on 127.0.0.1). Then, interleaved ``--repeats`` times, every (backend, storage) pair runs
``python -m rankscope.cli analyze RUN --json`` in a child process with a cold cache (a fresh
``RANKSCOPE_CACHE`` / the run's analysis/cache removed): wall time, peak RSS of the client process,
peak RSS of the largest worker process (pool workers, or Dask nannies' workers), and the bytes the
client's process tree read (``rchar``: files and sockets). Medians are printed as a Markdown table
and written as JSON beside it.

    .venv/bin/python bench/scale.py --ranks 8 64 256 1024 4096 --repeats 3 --out /tmp/scale.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def ensure_run(cache: Path, ranks: int, steps: int, ops: int) -> Path:
    from rankscope.synth import generate

    path = cache / f"scale-r{ranks}-s{steps}-o{ops}"
    if not (path / "run.json").exists():
        generate(path, ranks=ranks, steps=steps, ops_per_step=ops, seed=1, tp=8 if ranks >= 8 else None,
                 stragglers=[f"{ranks // 2}:compute:1.3"], jobs=2, overwrite=True)
    return path


def trace_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in (run / "ranks").rglob("*.json.gz"))


def measure(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``cmd``; poll its process tree for RSS (every 50 ms) and read bytes."""
    import psutil

    import tempfile

    t0 = time.perf_counter()
    # files, not pipes: nobody reads a pipe while polling, and a full pipe would block the child
    out_f, err_f = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, env=env, stdout=out_f, stderr=err_f, text=True)
    ps = psutil.Process(proc.pid)
    client_rss = worker_rss = 0
    rchar: dict[int, int] = {}
    while proc.poll() is None:
        try:
            client_rss = max(client_rss, ps.memory_info().rss)
            rchar[ps.pid] = ps.io_counters().read_chars
            for c in ps.children(recursive=True):
                try:
                    worker_rss = max(worker_rss, c.memory_info().rss)
                    rchar[c.pid] = c.io_counters().read_chars
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    out_f.seek(0)
    err_f.seek(0)
    out, err = out_f.read(), err_f.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    verdict = json.loads(out)["analyses"]["straggler"]["summary"].get("verdict")
    return {"wall_s": wall, "client_rss_mb": client_rss / 2**20, "worker_rss_mb": worker_rss / 2**20,
            "read_mb": sum(rchar.values()) / 2**20, "verdict": verdict}


def start_s3() -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, endpoint
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("moto server did not start")


def upload(run: Path, endpoint: str, name: str) -> str:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="test", secret="test")
    if not fs.exists("rankscope-bench"):
        fs.mkdir("rankscope-bench")
    if not fs.exists(f"rankscope-bench/{name}/run.json"):
        fs.put(str(run / "run.json"), f"rankscope-bench/{name}/run.json")
        fs.put(str(run / "ranks"), f"rankscope-bench/{name}/ranks", recursive=True)
    return f"s3://rankscope-bench/{name}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 256, 1024, 4096])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--ops", type=int, default=20, help="operators per step per rank (small: fits the disk)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--storage", nargs="+", default=["local", "s3"], choices=["local", "s3"])
    ap.add_argument("--backends", nargs="+", default=["pool", "dask"], choices=["pool", "dask"])
    ap.add_argument("--cache", type=Path, default=Path("/tmp/rankscope-scale"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/rankscope-scale.json"))
    ap.add_argument("--plot", type=Path, default=None, help="also draw wall time vs ranks as an SVG here")
    ap.add_argument("--from-json", type=Path, default=None, help="only print / plot the rows of an earlier run")
    a = ap.parse_args()
    if a.from_json:
        rows = json.loads(a.from_json.read_text())
        print_table(rows)
        if a.plot:
            plot_svg(rows, a.plot)
        return
    a.cache.mkdir(parents=True, exist_ok=True)
    s3 = start_s3() if "s3" in a.storage else None
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
    if s3:
        env["AWS_ENDPOINT_URL"] = s3[1]
    rows: list[dict[str, Any]] = []
    try:
        for n in a.ranks:
            run = ensure_run(a.cache, n, a.steps, a.ops)
            where = {"local": str(run)}
            if s3:
                where["s3"] = upload(run, s3[1], run.name)
            samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for rep in range(a.repeats):
                for storage in a.storage:
                    for backend in a.backends:
                        cache = a.cache / "analysis-cache"
                        shutil.rmtree(cache, ignore_errors=True)
                        shutil.rmtree(run / "analysis", ignore_errors=True)
                        cmd = [sys.executable, "-m", "rankscope.cli", "analyze", where[storage], "--json",
                               "--jobs", str(a.jobs)] + (["--dask", "local"] if backend == "dask" else [])
                        m = measure(cmd, {**env, "RANKSCOPE_CACHE": str(cache)})
                        samples.setdefault((storage, backend), []).append(m)
                        print(f"ranks={n} rep={rep} {storage}/{backend}: {m['wall_s']:.1f} s, "
                              f"client {m['client_rss_mb']:.0f} MB, worker {m['worker_rss_mb']:.0f} MB",
                              file=sys.stderr, flush=True)
            for (storage, backend), ms in samples.items():
                med = {k: statistics.median(m[k] for m in ms) for k in ("wall_s", "client_rss_mb",
                                                                          "worker_rss_mb", "read_mb")}
                rows.append({"ranks": n, "storage": storage, "backend": backend, "trace_mb": trace_bytes(run) / 2**20,
                             "repeats": len(ms), "verdicts": sorted({m["verdict"] for m in ms}), **med})
            a.out.write_text(json.dumps(rows, indent=1))
    finally:
        if s3:
            s3[0].kill()
    print_table(rows)
    if a.plot:
        plot_svg(rows, a.plot)


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| ranks | trace MB | storage | backend | wall s (median) | per-rank ms | client peak RSS MB "
          "| largest worker RSS MB | read MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['ranks']} | {r['trace_mb']:.1f} | {r['storage']} | {r['backend']} | {r['wall_s']:.1f} | "
              f"{1000 * r['wall_s'] / r['ranks']:.1f} | {r['client_rss_mb']:.0f} | {r['worker_rss_mb']:.0f} | "
              f"{r['read_mb']:.1f} |")



def plot_svg(rows: list[dict[str, Any]], out: Path) -> None:
    """Wall time vs ranks on log-log axes, one line per storage/backend (a plain SVG, no plot library)."""
    import math

    w, h, m = 640, 400, 60
    xs = sorted({r["ranks"] for r in rows})
    ys = [r["wall_s"] for r in rows]
    lx0, lx1 = math.log10(min(xs)), math.log10(max(xs))
    ly0, ly1 = math.log10(min(ys)) - 0.1, math.log10(max(ys)) + 0.1

    def px(x: float) -> float:
        return m + (math.log10(x) - lx0) / (lx1 - lx0) * (w - 2 * m)

    def py(y: float) -> float:
        return h - m - (math.log10(y) - ly0) / (ly1 - ly0) * (h - 2 * m)

    colors = {"local/pool": "#1f77b4", "local/dask": "#2ca02c", "s3/pool": "#d62728", "s3/dask": "#ff7f0e"}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="12"><rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">rankscope analyze: wall time vs ranks '
             f'(2 cores, cold cache)</text>']
    for x in xs:
        parts.append(f'<line x1="{px(x):.1f}" y1="{h - m}" x2="{px(x):.1f}" y2="{m}" stroke="#eee"/>'
                     f'<text x="{px(x):.1f}" y="{h - m + 16}" text-anchor="middle">{x}</text>')
    for e in range(math.floor(ly0), math.ceil(ly1) + 1):
        if ly0 <= e <= ly1:
            parts.append(f'<line x1="{m}" y1="{py(10 ** e):.1f}" x2="{w - m}" y2="{py(10 ** e):.1f}" stroke="#eee"/>'
                         f'<text x="{m - 6}" y="{py(10 ** e) + 4:.1f}" text-anchor="end">{10 ** e:g} s</text>')
    parts.append(f'<text x="{w / 2}" y="{h - 18}" text-anchor="middle">ranks (log)</text>')
    for i, (key, color) in enumerate(colors.items()):
        pts = sorted((r["ranks"], r["wall_s"]) for r in rows if f"{r['storage']}/{r['backend']}" == key)
        if not pts:
            continue
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts.append(f'<text x="{m + 10}" y="{m + 16 * i}" fill="{color}">{key}</text>')
    out.write_text("".join(parts) + "</svg>")


if __name__ == "__main__":
    main()
