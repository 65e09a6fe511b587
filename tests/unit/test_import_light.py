import subprocess
import sys


def test_import_rankscope_is_light():
    code = ("import sys, rankscope; heavy = [m for m in ('torch', 'polars', 'pyarrow', 'plotly', 'numpy') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"import rankscope pulled in: {out}"


def test_cli_help_lists_verbs():
    out = subprocess.run([sys.executable, "-m", "rankscope.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for verb in ("demo", "analyze", "report", "version"):
        assert verb in out.stdout


def test_cli_usage_error_exit_code():
    out = subprocess.run([sys.executable, "-m", "rankscope.cli", "analyze"], capture_output=True, text=True)
    assert out.returncode == 2


def test_cli_missing_run_is_one_clear_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rankscope.cli", "analyze", str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "no such file or directory" in lines[0]
