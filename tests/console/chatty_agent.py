"""A stand-in agent for the console's browser tests: launched by the dispatcher through `fleet.loop_command`, it
prints a numbered line every 0.1 s (and one line of markup, which the console must show as text) and never ends by
itself before --hang-max seconds; the console's stop button, or the test, ends it. Free of healer imports."""

from __future__ import annotations

import sys
import threading


def main(argv: list[str]) -> int:
    limit = 120.0
    if "--hang-max" in argv:
        limit = float(argv[argv.index("--hang-max") + 1])
    print('chatty: <script>document.title="pwned"</script><img src=x onerror=alert(1)>', flush=True)
    done = threading.Event()
    n = 0
    while not done.wait(0.1) and n * 0.1 < limit:
        n += 1
        print(f"chatty: line {n}", flush=True)
    return 4


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
