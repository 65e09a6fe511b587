"""rankscope/engine/memory.py (issue 26, peak RSS): what the CLI sets, what it leaves alone, and that pyarrow
still converts pandas objects after its pandas check was answered "no". Each case runs in a fresh Python
(the settings act on libraries not loaded yet)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT.parent / "shared" / "data" / "hta" / "trace_filter"


def _py(code: str, env: dict[str, str] | None = None) -> dict:
    import os

    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                       env={**{k: v for k, v in os.environ.items()
                               if k not in ("ARROW_DEFAULT_MEMORY_POOL", "_RJEM_MALLOC_CONF")},
                            "PYTHONPATH": str(ROOT), **(env or {})})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_cli_analyze_never_loads_pandas_and_pandas_still_converts(tmp_path: Path) -> None:
    assert TRACE.is_dir(), f"missing {TRACE} (the shared HTA traces)"
    import shutil

    run = tmp_path / "run"
    shutil.copytree(TRACE, run)
    out = _py(
        "import io, json, os, sys, contextlib\n"
        "from rankscope.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main(['analyze', {str(run)!r}, '-j', '1'])\n"
        "loaded = 'pandas' in sys.modules\n"
        "import pyarrow as pa, pyarrow.compute as pc, pandas as pd\n"
        "t = pa.Table.from_pandas(pd.DataFrame({'a': [1, 2]}))\n"
        "back = t.to_pandas()['a'].tolist()\n"
        "arr = pa.array(pd.Series([3, 4])).to_pylist()\n"
        "print(json.dumps({'rc': rc, 'pandas_loaded': loaded, 'back': back, 'arr': arr,\n"
        "                  'env': [os.environ.get('ARROW_DEFAULT_MEMORY_POOL'), os.environ.get('_RJEM_MALLOC_CONF')],\n"
        "                  'pool': pa.default_memory_pool().backend_name}))\n")
    assert out["rc"] == 0
    assert out["pandas_loaded"] is False  # pyarrow's soft check was answered without importing pandas
    assert out["back"] == [1, 2] and out["arr"] == [3, 4]  # a real pandas call still works
    assert out["env"] == [None, None]  # main() puts the environment back for an in-process caller
    assert out["pool"] == "system"  # Arrow's pool was chosen while the setting was there


def test_user_settings_win_and_a_notebook_is_left_alone() -> None:
    out = _py(
        "import json, os\n"
        "from rankscope.engine import memory\n"
        "memory.pyarrow_without_pandas()  # no lean_allocators() first: a notebook, untouched\n"
        "import sys\n"
        "first = 'pyarrow' in sys.modules\n"
        "memory.lean_allocators()\n"
        "print(json.dumps({'touched': first, 'pool': os.environ['ARROW_DEFAULT_MEMORY_POOL'],\n"
        "                  'jem': os.environ['_RJEM_MALLOC_CONF']}))\n",
        env={"ARROW_DEFAULT_MEMORY_POOL": "jemalloc"})
    assert out["touched"] is False
    assert out["pool"] == "jemalloc"  # the user's choice is kept
    assert out["jem"].startswith("dirty_decay_ms:0")
