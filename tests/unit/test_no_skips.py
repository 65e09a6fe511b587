"""The suite's one skip is "no CUDA GPU": a missing dev tool fails its test with the command that installs it
(``tests.helpers.require``), so a green run means every oracle ran (issue 23). This scans the tests' source."""
from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SKIP = re.compile(r"\bimportorskip\(|\bpytest\.skip\(|\bmark\.skip(if)?\b|\bxfail\b")
ALLOWED = {("e2e/test_comms_gpu.py", "needs a CUDA GPU")}  # (file, what its skip line must say)


def test_the_only_skip_is_no_cuda_gpu():
    found = []
    for f in sorted(TESTS.rglob("*.py")):
        rel = f.relative_to(TESTS).as_posix()
        if rel == "unit/test_no_skips.py" or rel.startswith("fixtures/"):
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if SKIP.search(line) and not any(rel == a and why in line for a, why in ALLOWED):
                found.append(f"tests/{rel}:{n}: {line.strip()}")
    assert not found, ("skips other than 'no CUDA GPU' (use tests.helpers.require: a missing tool fails with its "
                       "install command):\n" + "\n".join(found))
