"""The real world's clock_jump: a process started with HEALER_CLOCK_OFFSET_FILE reads its wall clock through
healer/clock.py plus the file's offset, and sees a change of the file without restarting; monotonic time does not jump."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = """
import sys, time
from healer.clock import system
c = system()
print(c.now() - time.time(), flush=True)
sys.stdin.readline()                      # the test rewrites the file meanwhile
m0 = c.monotonic(); time.sleep(0.1)       # past the 50 ms re-read
print(c.now() - time.time(), c.monotonic() - m0, flush=True)
"""


def test_a_child_reads_the_offset_and_sees_it_change(tmp_path):
    f = tmp_path / "clock-offset"
    f.write_text("3600\n")
    p = subprocess.Popen([sys.executable, "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "HEALER_CLOCK_OFFSET_FILE": str(f)})
    try:
        # the offsets are hours, the tolerances seconds: a loaded machine may pause the probe between two
        # clock reads (or oversleep the 0.1 s) by a few seconds, never by an hour
        assert abs(float(p.stdout.readline()) - 3600) < 30
        f.write_text("-7200\n")
        p.stdin.write("go\n")
        p.stdin.flush()
        offset, mono = (float(x) for x in p.stdout.readline().split())
        assert abs(offset + 7200) < 30
        assert 0.09 <= mono < 60  # monotonic time went on, without the 9000 s wall-clock jump
    finally:
        p.kill()
        p.wait()


def test_without_the_variable_the_system_clock_is_plain():
    from healer import clock

    assert "HEALER_CLOCK_OFFSET_FILE" in os.environ or type(clock.system()) is clock.SystemClock
