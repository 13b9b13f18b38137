"""Benchmark: containers (issue 8). Needs a Docker engine; without one, says so on stderr and exits 0.

- `make images` when up to date (target 1 s);
- ContainerRuntime: launch -> running (median of 5, target 1.5 s), status through the SDK
  (median of 20, target 50 ms), stop of a PAUSED container with a 10 s grace (target 3 s:
  it is thawed first, so the grace is not waited out);
- container faults: pause + unpause of 4 containers (target 2 s);
- repair sandbox: the escape agent's whole run with its MCP session (target 10 s);
- the docker test module, wall time (issue 8 acceptance: under 5 minutes).

Prints JSON lines (README "Benchmarks").
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chaos.faults import containers as cf  # noqa: E402
from healer.clock import system  # noqa: E402
from healer.containers import images  # noqa: E402
from healer.containers.client import connect  # noqa: E402
from healer.errors import HealerError  # noqa: E402
from healer.fleet.container_runtime import ContainerRuntime  # noqa: E402
from healer.fleet.runtime import RUNNING, LaunchSpec  # noqa: E402
from healer.repair import container  # noqa: E402

CLOCK = system()
PY = sys.executable
HANG = "import time; time.sleep(120)"


def emit(metric: str, value: float, unit: str, target: float, better: str = "lower") -> None:
    print(json.dumps({"bench": "docker", "metric": metric, "value": round(value, 3), "unit": unit, "target": target,
                      "better": better}), flush=True)


def timed(fn) -> float:
    t0 = CLOCK.monotonic()
    fn()
    return CLOCK.monotonic() - t0


def main() -> int:
    try:
        client = connect(timeout=10)
    except HealerError as e:
        print(f"bench/containers: skipped: {e}", file=sys.stderr)
        return 0
    images.build(client)
    emit("images_up_to_date_s", timed(lambda: images.build(client)), "s", 1.0)

    with tempfile.TemporaryDirectory() as tmp:
        label = f"{tmp}/bench"
        rt = ContainerRuntime(client=client)
        try:
            launches = []
            handles = []
            for i in range(5):
                t0 = CLOCK.monotonic()
                h = rt.launch(LaunchSpec(argv=[PY, "-c", HANG], cwd=tmp, labels={"fleet": label, "ticket": f"B{i}", "run": "r"}))
                while rt.status(h).state != RUNNING:
                    CLOCK.sleep(0.01)
                launches.append(CLOCK.monotonic() - t0)
                handles.append(h)
            emit("launch_to_running_s", statistics.median(launches), "s", 1.5)
            emit("status_ms", statistics.median(timed(lambda: rt.status(handles[0])) * 1000 for _ in range(20)), "ms", 50)
            emit("pause_unpause_4_s", timed(lambda: (cf.pause(label=f"healer.fleet={label}", count=4, seed=1, client=client,
                                                              journal=Path(tmp) / "undo.jsonl"),
                                                     cf.cleanup(label, journal=Path(tmp) / "undo.jsonl", client=client))), "s", 2.0)
            client.containers.get(handles[0].container).pause()
            emit("stop_paused_grace10_s", timed(lambda: rt.stop(handles[0], 10)), "s", 3.0)
        finally:
            for c in client.containers.list(all=True, filters={"label": f"healer.fleet={label}"}):
                c.remove(force=True)

        scratch = Path(tmp) / "scratch"
        fleet = Path(tmp) / "fleet"
        (fleet / ".healer").mkdir(parents=True)
        with open(Path(tmp) / "err", "wb") as err:
            t = timed(lambda: container.run([PY, "-m", "chaos.agents.docker_escape", str(scratch / "r.json")], scratch=scratch,
                                          timeout=60, stderr=err, server_stderr=err,
                                          server_argv=[PY, "-m", "healer", "mcp", "serve", "--root", str(fleet), "--run-id", "B"]))
        emit("sandbox_escape_agent_s", t, "s", 10.0)

    t = timed(lambda: subprocess.run([PY, "-m", "pytest", "-q", str(ROOT / "tests" / "docker")],
                                     cwd=ROOT, capture_output=True, timeout=600))
    emit("docker_tests_wall_s", t, "s", 300.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
