"""Nothing freezes itself (issue 40, item 3), with real processes in real cgroups (v1 freezer and v2).

In a restart campaign a resumed `healer loop run` stayed FROZEN in its own run's v1 freezer group for 55
minutes: a killer SIGKILLed between its freeze and its thaw had left the group FROZEN; the resumed runner found
it empty (its kill then did nothing, not even a thaw) and stepped into it to start its agent. These tests build
each window on purpose: a kill while the runner is stepping in, a killer killed mid-freeze, a killed run nobody
resumes, a killed run without any cgroup; then assert no process of the test is left frozen or stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from healer import cgroups, procs
from tests.conftest import PY, wait_until
from tests.loop.conftest import carrying, events, loop_repo, write_policy

# A stand-in runner (or killer): makes a run group, starts a sleeper in it, then does what the test asks.
RUNNER = r'''
import os, signal, sys, time
from pathlib import Path
from healer import cgroups, procs

name, mode = sys.argv[1:3]
token = os.environ.pop("STAND_TOKEN")  # not in our own command line: only the sleeper carries it
g, why = cgroups.make(name)
if g is None:
    print("none", why, flush=True)
    sys.exit(3)
p, _ = procs.spawn([sys.executable, "-c", "import time; time.sleep(600)", token], cwd="/", group=g)
print(g.kind, g.top, p.pid, flush=True)

def freeze():
    if g.kind == "v1":
        (g.top / "freezer.state").write_text("FROZEN")
        while (g.top / "freezer.state").read_text().strip() != "FROZEN":
            time.sleep(0.005)
    else:
        (g.top / "cgroup.freeze").write_text("1")

if mode == "crash-frozen":  # a killer SIGKILLed between its freeze and its thaw; its sleeper left frozen inside
    freeze()
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "crash-frozen-empty":  # the same after its SIGKILLs went out: the group frozen and empty
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    while g.pids():
        time.sleep(0.005)
    freeze()
    os.kill(os.getpid(), signal.SIGKILL)
for line in sys.stdin:  # mode "hold": step in and out on demand, as the loop runner does to start a program
    word = line.split()
    if word and word[0] == "hold":
        with g.holding():
            print("in", flush=True)
            time.sleep(float(word[1]))
        print("out", flush=True)
    else:
        break
g.kill()
g.remove()
'''


def _kind(request, monkeypatch) -> str:
    kind = request.param
    monkeypatch.setenv(cgroups.ENV, kind)
    probe, why = cgroups.make(f"healer-test-probe-{os.getpid()}")
    if probe is None:
        if os.environ.get("CI") == "true" and os.geteuid() == 0 and kind == "v1":
            pytest.fail(f"CI runs as root with a v1 freezer: {why}")
        pytest.skip(reason=f"no writable cgroup {kind} here ({why}): the unprivileged path is "
                           "test_the_agent_tree_of_a_killed_run_is_ended_by_the_next_start_without_cgroups")
    probe.remove()
    return kind


@pytest.fixture(params=["v1", "v2"])
def kind(request, monkeypatch) -> str:
    return _kind(request, monkeypatch)


class Pen:
    """A private parent group for the test's processes (healer-test-*, never a run group's name): what a test
    leaves stale is swept by its own starts only, not by a `loop run` of a test running beside it, and its
    sweeps see none of theirs."""

    def __init__(self, kind: str) -> None:
        m = cgroups.mounts()
        mount, own = (m.v1["freezer"], m.own.get("freezer")) if kind == "v1" else (m.v2, m.own.get(""))
        self.kind = kind
        self.dir = Path(mount) / (own or "/").lstrip("/") / f"healer-test-pen-{os.getpid()}-{os.urandom(3).hex()}"
        os.mkdir(self.dir)

    def enter(self) -> None:
        """A preexec_fn: the child starts in the pen."""
        with open(self.dir / "cgroup.procs", "w") as f:
            f.write("0")

    def close(self) -> None:
        for child in [d for d in self.dir.iterdir() if d.is_dir()]:
            g = cgroups.Group(self.kind, [child])
            try:
                g._thaw()
                g.kill(wait=10)
                os.rmdir(child)
            except OSError:
                pass
        for pid in cgroups._pids(self.dir / "cgroup.procs"):  # the test's own children, if a test failed
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        wait_until(lambda: not cgroups._pids(self.dir / "cgroup.procs"), 30, "the pen empty")
        os.rmdir(self.dir)


@pytest.fixture
def pen(kind):
    p = Pen(kind)
    try:
        yield p
    finally:
        p.close()


def loop_run(repo: Path, policy: Path, run_id: str, kind: str, pen: Pen | None) -> subprocess.CompletedProcess:
    task = repo.parent / "task.md"
    task.write_text("t\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HEALER_ROOT", "HEALER_AGENT_ID", "HEALER_FAILPOINTS")}
    env[cgroups.ENV] = kind
    return subprocess.run([PY, "-m", "healer", "loop", "run", "--policy", str(policy), "--workdir", str(repo),
                           "--task", str(task), "--run-id", run_id], capture_output=True, text=True, env=env,
                          timeout=90, preexec_fn=pen.enter if pen is not None else None)


class Stand:
    """The stand-in runner as a child process (its own session: a test never stops or freezes pytest)."""

    def __init__(self, tmp_path: Path, name: str, mode: str, kind: str, pen: Pen) -> None:
        self.token = f"frz-{os.urandom(6).hex()}"
        script = tmp_path / "stand.py"
        script.write_text(RUNNER)
        env = {**os.environ, cgroups.ENV: kind, "STAND_TOKEN": self.token}
        self.proc = subprocess.Popen([PY, str(script), name, mode], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, start_new_session=True,
                                     cwd=Path(__file__).resolve().parents[2], preexec_fn=pen.enter)
        first = self.proc.stdout.readline().split()
        assert first and first[0] in ("v1", "v2"), first
        self.kind, self.top, self.sleeper = first[0], Path(first[1]), int(first[2])

    def say(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def hear(self) -> str:
        return self.proc.stdout.readline().strip()

    def cleanup(self) -> None:
        """Test hygiene only: thaw, then kill, whatever a failed test left."""
        group = cgroups.Group(self.kind, [self.top])
        if self.top.exists():
            try:
                group._thaw()
            except OSError:
                pass
        for pid in [self.proc.pid, *carrying(self.token)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait(timeout=30)
        wait_until(lambda: not carrying(self.token), 30, "the stand-in's sleeper gone")
        if self.top.exists():
            try:
                os.rmdir(self.top)
            except OSError:
                pass


def state_of(pid: int) -> str:
    """The process's state letter from /proc/PID/status ("" when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    return line.split()[1]
    except OSError:
        pass
    return ""


def assert_nothing_frozen(*pids: int, groups: tuple[cgroups.Group, ...] = ()) -> None:
    """No process of the test asleep in D (a v1-frozen task) or stopped (T), and no group of it frozen."""
    for pid in pids:
        assert state_of(pid) not in ("D", "T", "t"), f"pid {pid} left in state {state_of(pid)}"
    for g in groups:
        if g.top.exists():
            assert not g.frozen(), f"{g.top} left frozen"


def _policy(tmp_path: Path, agent: list[str], **loop) -> Path:
    return write_policy(tmp_path / "p.yaml", sandbox="none", max_iterations=1, iteration_timeout="30s",
                        kill_grace="300ms", agent={"command": agent},
                        gates=[{"name": "ok", "run": [PY, "-c", "pass"], "timeout": "20s"}], **loop)


NOOP = [PY, "-c", "open('attempt.txt', 'a').write('x')"]


# -- a kill while the runner is stepping in ---------------------------------------------------------------

def test_a_kill_waits_for_the_runner_stepping_in_and_never_freezes_it(tmp_path, kind, pen):
    """The runner is inside its group (starting a program) when a kill of the group comes (its old watchdog, a
    sweep): the kill waits on the step lock until the runner is out, then ends the group's programs; the runner
    is never frozen, never killed. Before issue 40 the kill froze the group with the runner in it and SIGKILLed
    every task it listed, the runner among them."""
    s = Stand(tmp_path, f"{cgroups.PREFIX}test-{os.urandom(4).hex()}", "hold", kind, pen)
    try:
        s.say("hold 1.0")
        assert s.hear() == "in"
        group = cgroups.Group(s.kind, [s.top])
        assert s.proc.pid in group.pids()  # inside: a freeze now would take it along
        killed = group.kill()
        assert s.sleeper in killed and s.proc.pid not in killed
        assert s.hear() == "out"
        assert s.proc.poll() is None, "the runner was killed by a kill of its group"
        assert_nothing_frozen(s.proc.pid, groups=(group,))
        assert not carrying(s.token)
        s.say("hold 0")  # it can still step in and out: nothing left frozen
        assert s.hear() == "in" and s.hear() == "out"
        s.say("exit")
        assert s.proc.wait(timeout=30) == 0
        assert not s.top.exists()  # removed at its end
    finally:
        s.cleanup()


def test_a_kill_never_freezes_a_group_holding_itself_or_its_parent(tmp_path, kind, pen):
    """A process that kills a group it is in (or its parent is in: the watchdog's runner) does not freeze it,
    nor cgroup.kill it: it SIGKILLs the others one by one."""
    s = Stand(tmp_path, f"{cgroups.PREFIX}test-{os.urandom(4).hex()}", "hold", kind, pen)
    script = tmp_path / "inside.py"
    script.write_text("import sys\nfrom pathlib import Path\nfrom healer import cgroups\n"
                      "g = cgroups.Group(sys.argv[1], [Path(sys.argv[2])])\n"
                      "with g.holding():\n    print(sorted(g.kill(wait=5)))\n")
    try:
        r = subprocess.run([PY, str(script), s.kind, str(s.top)], capture_output=True, text=True, timeout=60,
                           cwd=Path(__file__).resolve().parents[2])
        # (before, the killer froze itself: this run hung until the timeout)
        assert r.returncode == 0, r.stderr
        assert str(s.sleeper) in r.stdout
        wait_until(lambda: not carrying(s.token), 30, "the sleeper killed")
        assert_nothing_frozen(s.proc.pid, groups=(cgroups.Group(s.kind, [s.top]),))
    finally:
        s.cleanup()


# -- a killer SIGKILLed between its freeze and its thaw ---------------------------------------------------

def test_a_group_left_frozen_and_empty_is_thawed_by_the_next_run_of_that_id(tmp_path, kind, pen):
    """The 55-minute freeze itself: a killer SIGKILLed after its SIGKILLs and before its thaw left the run's
    group FROZEN and empty. The next runner of that run id (a resume) takes the same group: it must thaw it
    before it steps in to start its agent (before issue 40 it froze itself there, for good)."""
    repo = loop_repo(tmp_path / "repo")
    name = cgroups.name_for(repo, "T-3-01")
    s = Stand(tmp_path, name, "crash-frozen-empty", kind, pen)
    group = cgroups.Group(s.kind, [s.top])
    try:
        assert s.proc.wait(timeout=30) == -signal.SIGKILL
        assert group.frozen() and not group.pids()
        r = loop_run(repo, _policy(tmp_path, NOOP), "T-3-01", kind, pen)
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert not s.top.exists(), "the run's group is removed at its end"
    finally:
        s.cleanup()


def test_a_start_thaws_and_ends_a_killed_runs_group_that_nobody_resumes(tmp_path, kind, pen):
    """A killed killer left another run's group FROZEN with its agent inside (state D), and that run is never
    resumed: the next healer start anywhere on the machine (here a `loop run` of another tree) thaws it, kills
    what is in it and removes it, and says so in an event."""
    s = Stand(tmp_path, f"{cgroups.PREFIX}00000000-dead-{os.urandom(4).hex()}", "crash-frozen", kind, pen)
    group = cgroups.Group(s.kind, [s.top])
    try:
        assert s.proc.wait(timeout=30) == -signal.SIGKILL
        assert group.frozen() and s.sleeper in group.pids()
        if s.kind == "v1":
            wait_until(lambda: state_of(s.sleeper) == "D", 30, "the sleeper frozen")
        repo = loop_repo(tmp_path / "repo")
        r = loop_run(repo, _policy(tmp_path, NOOP), "fresh", kind, pen)
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert not carrying(s.token), "the killed run's agent outlived the next start"
        assert not s.top.exists(), "the stale group is still there"
        swept = [e.payload for e in events(repo) if e.kind == "loop.leftovers_killed" and e.payload.get("stale")]
        assert [(p["thawed"], s.sleeper in p["killed"]) for p in swept if p["cgroup"] == s.top.name] == [(True, True)]
        assert_nothing_frozen(s.sleeper)
    finally:
        s.cleanup()


def test_a_live_runs_group_is_never_swept(tmp_path, kind, pen):
    """A sweep ends only groups whose run lock is free: a live runner's group, its programs and the runner stay
    as they are, thawed."""
    s = Stand(tmp_path, f"{cgroups.PREFIX}00000000-live-{os.urandom(4).hex()}", "hold", kind, pen)
    try:
        r = subprocess.run([PY, "-c", "from healer.loop import leftovers\n"
                                      "print([g.name for g in leftovers.at_start().groups])"],
                           capture_output=True, text=True, timeout=60, preexec_fn=pen.enter,
                           env={**os.environ, cgroups.ENV: kind})
        assert r.returncode == 0 and s.top.name not in r.stdout, (r.stdout, r.stderr)
        assert s.top.exists() and s.sleeper in cgroups.Group(s.kind, [s.top]).pids()
        assert carrying(s.token) and s.proc.poll() is None
        assert_nothing_frozen(s.proc.pid, s.sleeper, groups=(cgroups.Group(s.kind, [s.top]),))
        s.say("exit")
        assert s.proc.wait(timeout=30) == 0
    finally:
        s.cleanup()


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_killed_runners_watchdog_spares_the_group_of_its_resume(tmp_path, kind, pen):
    """The old runner's watchdog cleans up after it only under the group's run lock: once a resume of the run
    holds the group, its programs are not the old watchdog's to end (nor its folder to remove)."""
    name = f"{cgroups.PREFIX}00000000-resume-{os.urandom(4).hex()}"
    s = Stand(tmp_path, name, "hold", kind, pen)
    try:
        spec = s.kind + " " + os.fsencode(str(s.top)).hex()
        from healer import watchdog
        from healer.clock import system

        watchdog._remove_group(spec, system())  # what the old watchdog does when its runner's pipe closes
        assert s.top.exists() and carrying(s.token), "the old watchdog ended a live resume's group"
    finally:
        s.cleanup()


# -- without any writable cgroup: process trees ------------------------------------------------------------

def test_the_agent_tree_of_a_killed_run_is_ended_by_the_next_start_without_cgroups(tmp_path):
    """No cgroup (an unprivileged user, HEALER_CGROUP=off): a runner and its watchdog SIGKILLed together (their
    process group) leave the agent running in its own session. The next `loop run` in that tree, of another run
    id (a new attempt, not a resume), ends it: by its recorded pid and start mark and its tree marker, never a
    stranger's process. Before issue 40 only a resume of the killed run did."""
    repo = loop_repo(tmp_path / "repo")
    token = f"lft-{os.urandom(6).hex()}"
    pol = _policy(tmp_path, [PY, "-c", "import time; time.sleep(600)", token])
    env = {k: v for k, v in os.environ.items() if k not in ("HEALER_ROOT", "HEALER_AGENT_ID", "HEALER_FAILPOINTS")}
    env[cgroups.ENV] = "off"
    task = tmp_path / "task.md"
    task.write_text("t\n")
    runner = subprocess.Popen([PY, "-m", "healer", "loop", "run", "--policy", str(pol), "--workdir", str(repo),
                               "--task", str(task), "--run-id", "killed"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    stranger = subprocess.Popen([PY, "-c", "import time; time.sleep(600)", token + "-stranger"])
    try:
        wait_until(lambda: [p for p in carrying(token) if p != stranger.pid], 60, "the agent started")
        agents = [p for p in carrying(token) if p != stranger.pid]
        os.killpg(runner.pid, signal.SIGKILL)  # the runner and its watchdog, as a killed `up`'s group kill does
        runner.wait(timeout=30)
        assert [p for p in carrying(token) if p != stranger.pid] == agents  # left running, in its own session
        r = loop_run(repo, _policy(tmp_path, NOOP), "next", "off", None)
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert [p for p in carrying(token) if p != stranger.pid] == [], "the killed run's agent outlived the next start"
        assert stranger.poll() is None, "a process healer did not start was killed"
        ended = [e.payload for e in events(repo) if e.kind == "loop.leftovers_killed" and e.payload.get("run")]
        assert [(p["run"], set(agents) <= set(p["killed"])) for p in ended] == [("killed", True)]
        assert_nothing_frozen(stranger.pid)
    finally:
        stranger.kill()
        stranger.wait()
        for pid in carrying(token):
            os.kill(pid, signal.SIGKILL)


def test_the_sigstop_sweep_never_leaves_a_process_stopped(tmp_path, monkeypatch):
    """Without a cgroup a tree is caught standing still (SIGSTOP) before its SIGKILL: whatever comes between the
    two (here an exception), no member is left stopped."""
    token = f"stp-{os.urandom(6).hex()}"
    proc, tree = procs.spawn([PY, "-c", "import time; time.sleep(600)", token], cwd=tmp_path)
    try:
        wait_until(lambda: carrying(token), 30, "the tree started")

        def boom(sig):
            raise RuntimeError("between the SIGSTOP and the SIGKILL")

        monkeypatch.setattr(tree, "signal_all", boom)
        with pytest.raises(RuntimeError):
            tree.kill(0.1)
        assert state_of(proc.pid) not in ("T", "t", ""), f"left in state {state_of(proc.pid)}"
    finally:
        proc.kill()
        proc.wait()


def test_a_sweep_touches_no_group_of_another_name(tmp_path, kind, pen):
    """Only healer's own run groups (healer-run-*) are ever swept; a stale group of another name (an older
    healer's, anyone's) is left as it is."""
    other = pen.dir / f"healer-0000abcd-other-{os.urandom(4).hex()}"
    os.mkdir(other)
    r = subprocess.run([PY, "-c", "from healer.loop import leftovers; leftovers.at_start()"], capture_output=True,
                       text=True, timeout=60, preexec_fn=pen.enter, env={**os.environ, cgroups.ENV: kind})
    assert r.returncode == 0, r.stderr
    assert other.exists()


if sys.platform != "linux":  # pragma: no cover
    pytest.skip(reason="cgroups and /proc are Linux's", allow_module_level=True)


def test_a_dispatch_start_ends_a_killed_runs_group_and_agent_tree(tmp_path, kind, pen, fleet_factory):
    """`healer dispatch` (as `up` and `supervise`) ends what killed runs left before anything else: a stale run
    group left FROZEN with its agent inside, and, in a ticket's worktree, the agent tree of a run whose runner is
    gone (recorded pid + start mark + tree marker), while a process that only looks alike stays."""
    s = Stand(tmp_path, f"{cgroups.PREFIX}00000000-disp-{os.urandom(4).hex()}", "crash-frozen", kind, pen)
    f = fleet_factory(sub="fleet")
    wt = f.root / ".healer" / "worktrees" / "T-9"
    run = wt / ".healer" / "runs" / "T-9-01"
    run.mkdir(parents=True)
    token = f"dsp-{os.urandom(6).hex()}"
    marker = os.urandom(16).hex()
    agent = subprocess.Popen([PY, "-c", "import time; time.sleep(600)", token], env={**os.environ, procs.MARKER: marker},
                             start_new_session=True)
    look_alike = subprocess.Popen([PY, "-c", "import time; time.sleep(600)", token], start_new_session=True)
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    try:
        wait_until(lambda: procs.mark(agent.pid) and len(carrying(token)) == 2, 30, "the agents started")
        dead_run(run, dead.pid, marker, agent.pid)
        env = {k: v for k, v in os.environ.items() if k not in ("HEALER_ROOT", "HEALER_AGENT_ID", "HEALER_FAILPOINTS")}
        env[cgroups.ENV] = kind
        r = subprocess.run([PY, "-m", "healer", "dispatch", "--once", "--root", str(f.root)], capture_output=True,
                           text=True, env=env, timeout=120, preexec_fn=pen.enter)
        assert "leftovers of killed runs" in r.stderr, (r.returncode, r.stdout, r.stderr)
        assert agent.wait(timeout=30) in (-signal.SIGTERM, -signal.SIGKILL)
        assert look_alike.poll() is None, "a process healer did not start was killed"
        assert not s.top.exists() and s.sleeper not in carrying(s.token)
    finally:
        for p in (agent, look_alike):
            p.kill()
            p.wait()
        s.cleanup()


def dead_run(run: Path, runner_pid: int, marker: str, agent_pid: int) -> None:
    """A run folder as a SIGKILLed runner leaves it: not ended, its runner gone, its agent's record written."""
    run.mkdir(parents=True, exist_ok=True)
    run.joinpath("state.json").write_text(json.dumps({
        "run_id": run.name, "workdir": str(run.parents[2]), "task": "t", "task_file": "t", "policy_file": None,
        "loop": {}, "heartbeat_every": 30, "agent_argv": [], "preset": "command", "max_iterations": 1, "started_at": 0,
        "status": "running", "pid": runner_pid, "pid_started": "0:0"}))
    run.joinpath("agent.json").write_text(json.dumps({"n": 1, "marker": marker, "pid": agent_pid,
                                                      "pid_start": procs.mark(agent_pid)}))


def test_a_daemon_start_leaves_a_tree_whose_loop_lock_is_held(tmp_path, monkeypatch):
    """A worktree whose loop lock someone holds has a live runner (a resume may be starting there): the daemons'
    start leaves its runs alone; once the lock is free, the dead run's agent is ended."""
    import fcntl

    from healer.loop import leftovers

    monkeypatch.setenv(cgroups.ENV, "off")
    wt = tmp_path / "wt"
    marker = os.urandom(16).hex()
    agent = subprocess.Popen([PY, "-c", "import time; time.sleep(600)"], env={**os.environ, procs.MARKER: marker},
                             start_new_session=True)
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    try:
        wait_until(lambda: procs.mark(agent.pid), 30, "the agent started")
        dead_run(wt / ".healer" / "runs" / "R-1", dead.pid, marker, agent.pid)
        fd = os.open(wt / ".healer" / "loop.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert leftovers.at_start([wt], grace=0.2).trees == []
        assert agent.poll() is None
        os.close(fd)
        ended = leftovers.at_start([wt], grace=0.2).trees
        assert [(t["run_id"], agent.pid in t["killed"]) for t in ended] == [("R-1", True)]
        assert not procs.alive(agent.pid)  # (reaped by the kill itself: this test is its parent)
    finally:
        agent.kill()
        agent.wait()
