"""`python -m benchmarks` end to end, on srcad and Numba only (CI does not depend on the peers): every
workload module builds, checks and times its smallest row, and the report has a row per workload."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = ("eager x*x*x", "Dense", "Dense jacobian", "Dense batch_jacobian", "RK4", "GMM", "LSTM", "BA")


def test_benchmark_command_reports_every_workload(tmp_path):
    out = tmp_path / "RESULTS.md"
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--tiny", "--tools", "srcad,numba", "--reps", "1",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert (tmp_path / "results.png").stat().st_size > 0
    rows = {match.group(1) for match in re.finditer(r"^\| ([^|]+?) \| [^|]+ \| srcad", text, re.M)}
    assert rows == set(WORKLOADS), (rows, text)
    assert "None: every tool ran and agreed." in text, text
