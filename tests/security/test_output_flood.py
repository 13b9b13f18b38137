"""An output flood (issue 39, item 4): 1 GiB on stdout and 256 MiB on stderr used to be kept whole in the run
folder. Each captured stream (the agent's stdout and stderr, each gate's log) now keeps loop.output_cap bytes:
the head and the tail, a marker line saying how much was cut (loop.output_truncated). The spend meter still
reads every line (a usage line in the cut middle is counted), and the runner's memory stays bounded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from healer.loop import tap as tap_mod
from tests.loop.conftest import events, loop_commits, loop_repo, run_dir, solved_gate, state, write_policy
from tests.security.conftest import need_bwrap

MiB = 1 << 20
# 200 MiB on stdout with a usage line (1,000,000 input tokens: $3 at Sonnet's price) in the middle and the CLI's
# result at the end, 50 MiB on stderr, as fast as the pipes take them; the task solved on the way
FLOOD = """\
import json, os, sys
MiB = 1 << 20
line = b"x" * (MiB - 1) + b"\\n"
os.write(1, b"OUT-HEAD\\n")
os.write(2, b"ERR-HEAD\\n")
for i in range(200):
    os.write(1, line)
    if i == 100:
        os.write(1, json.dumps({"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet-4-5",
                 "usage": {"input_tokens": 1000000, "output_tokens": 0}}}).encode() + b"\\n")
    if i < 50:
        os.write(2, line)
open("attempt.txt", "w").write("SOLVED\\n")
os.write(2, b"ERR-TAIL\\n")
os.write(1, b"OUT-TAIL\\n" + json.dumps({"type": "result", "subtype": "success", "result": "done"}).encode() + b"\\n")
"""
# a gate that floods its log too (30 MiB), then judges
GATE_FLOOD = "import sys\nsys.stdout.write('GATE-HEAD\\n' + ('g' * 1023 + '\\n') * 30 * 1024 + 'GATE-TAIL\\n')\n"


def test_an_output_flood_keeps_head_and_tail_under_the_cap(tmp_path):
    need_bwrap()
    repo = loop_repo(tmp_path / "repo")
    flood = tmp_path / "flood.py"
    flood.write_text(FLOOD)
    gflood = tmp_path / "gate_flood.py"
    gflood.write_text(GATE_FLOOD)
    cap = 4 * MiB
    pol = write_policy(tmp_path / "p.yaml", iteration_timeout="120s", output_cap=cap, spend_cap_usd=50.0,
                       agent={"preset": "command", "command": [sys.executable, str(flood)]},
                       gates=[{"name": "noisy", "run": [sys.executable, str(gflood)], "timeout": "60s"}, solved_gate()])
    task = tmp_path / "task.md"
    task.write_text("# Task\n\nMake the gates pass.\n")
    # the runner's peak memory: the loop as a child of a small wrapper that reports its children's largest RSS
    wrap = ("import resource, subprocess, sys\nr = subprocess.run(sys.argv[1:])\n"
            "print('MAXRSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
            "sys.exit(r.returncode)\n")
    cp = subprocess.run([sys.executable, "-c", wrap, sys.executable, "-m", "healer", "loop", "run", "--policy", str(pol),
                         "--workdir", str(repo), "--task", str(task), "--run-id", "flood"],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr  # the loop ended normally: gates green, committed
    assert len(loop_commits(repo)) == 1
    idir = run_dir(repo, "flood") / "iter-001"
    slack = 512  # the marker line
    out, err = (idir / "agent.out").read_bytes(), (idir / "agent.err").read_bytes()
    assert len(out) <= cap + slack and len(err) <= cap + slack
    assert out.startswith(b"OUT-HEAD\n") and out.rstrip().endswith(b'"result": "done"}')
    assert err.startswith(b"ERR-HEAD\n") and err.endswith(b"ERR-TAIL\n")
    assert b"bytes cut here (loop.output_cap" in out and b"bytes cut here (loop.output_cap" in err
    glog = next(idir.glob("gate-1-*.log")).read_bytes()
    assert len(glog) <= cap + slack and glog.startswith(b"GATE-HEAD") and glog.endswith(b"GATE-TAIL\n")
    total = sum(p.stat().st_size for p in run_dir(repo, "flood").rglob("*") if p.is_file())
    assert total < 4 * cap + 4 * MiB, total  # three capped streams and the run's own small files
    cut = {e.payload["stream"]: e.payload for e in events(repo, "loop.output_truncated", subject="flood")}
    assert set(cut) == {"agent stdout", "agent stderr", "gate noisy"}, cut
    o = cut["agent stdout"]
    assert o["bytes"] > 200 * MiB and o["kept"] <= cap and o["cut"] == o["bytes"] - o["kept"] and o["cap"] == cap
    assert cut["agent stderr"]["bytes"] > 50 * MiB
    (h,) = state(repo, "flood")["history"]
    assert h["cost_usd"] == pytest.approx(3.0)  # the usage line in the cut middle was counted all the same
    rss_kb = int(cp.stderr.rsplit("MAXRSS_KB", 1)[1].split()[0])
    print("runner and programs, peak RSS (KiB):", rss_kb)
    assert rss_kb < 200 * 1024, rss_kb  # the 250 MiB never sat in memory


def test_capped_keeps_the_head_and_tail_in_bounded_memory(tmp_path):
    p = tmp_path / "f"
    with open(p, "wb") as f:
        c = tap_mod.Capped(f, 100)
        for i in range(1000):
            c.write(b"%04d\n" % i)
            assert c.ring_bytes <= 50 + 5  # the tail's ring: half the cap and one write at most
        c.close()
    data = p.read_bytes()
    assert data.startswith(b"0000\n0001\n") and data.endswith(b"0998\n0999\n")
    head, marker, tail = data[:50], data[50:-50], data[-50:]
    assert b"4900 bytes cut here" in marker and len(head) == len(tail) == 50
    assert c.truncated() == {"bytes": 5000, "kept": 100, "cut": 4900, "cap": 100}


def test_under_the_cap_nothing_is_cut(tmp_path):
    p = tmp_path / "f"
    with open(p, "wb") as f:
        c = tap_mod.Capped(f, 100)
        c.write(b"a" * 60)
        c.write(b"b" * 40)
        c.close()
    assert p.read_bytes() == b"a" * 60 + b"b" * 40 and c.truncated() is None


def test_a_fleet_gate_flood_is_capped_too(tmp_path):
    """The fleet's merge and main gates run the agent's merged code: their output is capped the same way (the
    dispatcher holds it in memory and in the proposal's gate log)."""
    from healer.fleet.gates import PASS, run_gates
    from healer.policy.schema import Gate

    g = Gate(name="noisy", run=[sys.executable, "-c", GATE_FLOOD])
    res = run_gates([g], tmp_path, output_cap=MiB, grace=1.0)
    assert res.outcome == PASS, res.log[-300:]
    assert len(res.log) < MiB + 4096
    assert "GATE-HEAD" in res.log[:200] and "GATE-TAIL" in res.log[-200:] and "bytes cut here" in res.log
