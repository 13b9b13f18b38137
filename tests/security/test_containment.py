"""Process containment (issue 31), by hostile agents of chaos/agents/hostile_procs.py against the real loop:
magic links out of the sandbox (to the host, to a neighbour's worktree), the runner's environment, stragglers
that hop pids, a runner stopped by its agent. Each runs as root and, in CI's second pass, as an unprivileged
user (.ci/run): a test that needs one or the other says so when it skips.

Under bwrap: no escape. Under `none`: nothing committed, every straggler gone before the gates, and a stopped
runner resumed (and reported) by the watchdog."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from healer import cgroups
from healer.policy.schema import Policy
from tests.conftest import PY, git, healer
from tests.loop.conftest import carrying
from tests.security.conftest import assert_contained, events, need_bwrap, run, target_repo

AGENT = str(Path(__file__).resolve().parents[2] / "chaos" / "agents" / "hostile_procs.py")


def _policy(mode: str, *args: str, **loop) -> Policy:
    base = {"max_iterations": 1, "iteration_timeout": "60s", "kill_grace": "500ms", "sandbox": mode,
            "agent": {"command": [PY, AGENT, *args]},
            "gates": [{"name": "tests", "run": ["env", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1", PY, "-m", "pytest", "-q",
                                                "-p", "no:cacheprovider", "tests"], "timeout": "60s"}]}
    base.update(loop)
    return Policy.model_validate({"version": 1, "loop": base})


def _kill_carrying(token: str) -> None:
    """Test hygiene only (a failed test must leave nothing behind): stop, then kill, what carries the token."""
    for _ in range(50):
        left = carrying(token)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
    for pid in carrying(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def neighbour(tmp_path):
    """Another ticket's worktree with a process of it running there (its agent, say)."""
    repo = target_repo(tmp_path / "neighbour")
    proc = subprocess.Popen([PY, "-c", "import signal; signal.pause()"], cwd=repo)
    try:
        yield repo
    finally:
        proc.kill()
        proc.wait()


# -- magic links -------------------------------------------------------------------------------------------

def test_magic_links_reach_neither_the_host_nor_a_neighbour(tmp_path, neighbour):
    """bwrap's monitor lives in the host's mount namespace: as root, /proc/<its pid>/root/<path> used to write
    the host, and /proc/PID/cwd another ticket's worktree. The pid namespace (default) shows the agent only its
    own processes, whose root is the sandbox's; as a user there was never a way. Nothing is written."""
    need_bwrap()
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "outside" / "witness"
    witness.parent.mkdir()
    out, lines = run(repo, _policy("bwrap", "magic", "report.json", str(witness), str(neighbour)))
    assert_contained(repo, out)
    rep = json.loads((repo / "report.json").read_text())
    assert rep["root_writes"] == [] and rep["cwd_writes"] == [] and rep["secrets"] == [], rep
    assert len(rep["seen"]) <= 4, rep  # its own namespace: bwrap's init, the agent; not the runner, not the host
    assert not witness.exists()
    assert not (neighbour / "pwned").exists()
    assert git(neighbour, "status", "--porcelain") == ""


def test_pid_namespace_opt_out_is_refused_to_a_root_runner(tmp_path):
    """`loop.sandbox_pid_namespace: false` would reopen the magic link as root: it is honoured for another
    user only (healer.sandbox.wants_pidns)."""
    from healer import sandbox

    repo = target_repo(tmp_path / "repo")
    prof = sandbox.loop_profile(repo, [], True, pid_namespace=False)
    assert prof.pid_namespace is (os.geteuid() == 0)
    assert "--unshare-pid" in prof.wrap(["true"]) or os.geteuid() != 0


# -- the runner's environment ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["none", "bwrap"])
def test_runner_environ_hides_the_store_password(tmp_path, mode):
    """`loop run` stays dumpable (the supervisor finds runs by their environment): under `none` the agent reads
    /proc/<runner>/environ. healer.launch.hide_secrets wipes PGPASSWORD and HEALER_STORE_URL in that block at
    start; the agent finds neither value anywhere it can look (and none is in its own environment)."""
    if mode == "bwrap":
        need_bwrap()
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "witness"
    pol = tmp_path / "p.yaml"
    pol.write_text(yaml.safe_dump({"version": 1, "loop": _policy(mode, "magic", "report.json", str(witness))
                                   .loop.model_dump(mode="json")}))
    task = tmp_path / "task.md"
    task.write_text("t\n")
    r = healer("loop", "run", "--workdir", str(repo), "--policy", str(pol), "--task", str(task), "--run-id", "env",
               env={"PGPASSWORD": "s3cret-pw", "HEALER_STORE_URL": ""})
    assert r.returncode == 2, (r.stdout, r.stderr)
    rep = json.loads((repo / "report.json").read_text())
    # any process's: under `none` as root the agent reads every environ on the machine, and others (another
    # fleet's daemons) may hold a store URL of their own; what must not be found is this runner's secret
    assert not [s for s in rep["secrets"] if s[2] == "s3cret-pw"], rep
    assert "s3cret-pw" not in (repo / "report.json").read_text()
    if mode == "none":
        assert rep["seen"], rep  # it did look at the runner (its parent)


# -- stragglers and pid hopping ----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["bwrap", "none"])
@pytest.mark.parametrize("cgroup", ["auto", "v2", "v1", "off"])
def test_a_pid_hopping_straggler_is_gone_before_the_gates(tmp_path, mode, cgroup, monkeypatch):
    """The agent exits at once and leaves a setsid'd, double-forked child that forks and exits in a loop (a new
    pid every few ms) and guts the protected test each time: the gates must run only after it is gone, so the
    gutted test is put back and the wrong answer fails. Under bwrap the kernel ends the pid namespace with bwrap;
    under `none` the run's cgroup (v2 cgroup.kill or the v1 freezer, root) or, with none writable, the sweep's
    SIGSTOP walk (healer.procs.ProcessTree._stop_all). Nothing of it is alive when the loop returns."""
    if mode == "bwrap":
        need_bwrap()
    if cgroup != "off":
        monkeypatch.setenv(cgroups.ENV, cgroup)
        probe, why = cgroups.make(f"healer-test-{os.getpid()}")
        if probe is None:
            pytest.skip(reason=f"no writable cgroup of this kind here ({why}): the `off` case covers this machine")
        probe.remove()
    token = f"hop-{os.urandom(6).hex()}"
    repo = target_repo(tmp_path / "repo")
    try:
        r = _cli(tmp_path, repo, _policy(mode, "straggler", token), "attack", env={cgroups.ENV: cgroup})
        assert carrying(token) == [], "a straggler outlived its iteration"
        assert r.returncode not in (0, 70), (r.stdout, r.stderr)
        assert_contained(repo, _Out(r.returncode))
        it = events(repo, "loop.iteration")[0].payload
        assert it["gates"][0]["exit_code"] not in (0, None), it  # the gutted test (if it got that far) put back
    finally:
        _kill_carrying(token)
    assert not any(p.name.startswith("healer-") for p in _group_dirs(repo))


class _Out:
    def __init__(self, code: int) -> None:
        self.exit_code = code


def _cli(tmp_path: Path, repo: Path, pol: Policy, run_id: str, env: dict | None = None, timeout: float = 120):
    """`healer loop run` as the dispatcher starts it (a subreaper, its own process): a test never stops or
    re-parents pytest itself."""
    f = tmp_path / f"{run_id}.yaml"
    f.write_text(yaml.safe_dump({"version": 1, "loop": pol.loop.model_dump(mode="json")}))
    task = tmp_path / "task.md"
    task.write_text("t\n")
    return healer("loop", "run", "--workdir", str(repo), "--policy", str(f), "--task", str(task), "--run-id", run_id,
                  env=env, timeout=timeout)


def _group_dirs(repo: Path, run_id: str = "attack") -> list[Path]:
    """The run's cgroup folders that are still there (removed at the end of the run)."""
    name = cgroups.name_for(repo, run_id)
    m = cgroups.mounts()
    out = []
    for mount, own in [(m.v2, m.own.get(""))] + [(p, m.own.get(c)) for c, p in m.v1.items()]:
        if mount is not None and own is not None and (mount / own.lstrip("/") / name).exists():
            out.append(mount / own.lstrip("/") / name)
    return out


def test_a_runner_killed_mid_iteration_takes_its_agent_with_it(tmp_path):
    """The watchdog (healer/watchdog.py) sees the runner's pipe close when the runner is SIGKILLed, and kills
    the program it was watching at once: the agent does not outlive its runner, even before any resume."""
    need_bwrap()
    token = f"orphan-{os.urandom(6).hex()}"
    repo = target_repo(tmp_path / "repo")
    pol = tmp_path / "p.yaml"
    pol.write_text(yaml.safe_dump({"version": 1, "loop": _policy("bwrap", "stop", token, iteration_timeout="60s")
                                   .loop.model_dump(mode="json")}))
    task = tmp_path / "task.md"
    task.write_text("t\n")
    env = {k: v for k, v in os.environ.items() if k != "HEALER_FAILPOINTS"}
    proc = subprocess.Popen([PY, "-m", "healer", "loop", "run", "--workdir", str(repo), "--policy", str(pol),
                             "--task", str(task), "--run-id", "orphan"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        from tests.conftest import wait_until

        wait_until(lambda: carrying(token), 60, "the agent started")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        wait_until(lambda: not carrying(token), 30, "the agent gone with its runner")
        wait_until(lambda: not _group_dirs(repo, "orphan"), 30, "the run's cgroup removed by the watchdog")
    finally:
        proc.kill()
        _kill_carrying(token)


# -- a runner its agent stops ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["none", "bwrap"])
def test_a_stopped_runner_still_ends_the_iteration_on_time(tmp_path, mode):
    """The agent SIGSTOPs the runner (its parent, the pid in .healer/loop.lock) and hangs, ignoring SIGTERM.
    Under `none` the watchdog resumes the runner and reports it (`loop.runner_stopped`, a finding for the
    fleet's supervisor), and the 2 s deadline still ends the iteration; under bwrap the agent cannot even see
    the runner."""
    if mode == "bwrap":
        need_bwrap()
    token = f"stop-{os.urandom(6).hex()}"
    repo = target_repo(tmp_path / "repo")
    pol = tmp_path / "p.yaml"
    pol.write_text(yaml.safe_dump({"version": 1, "loop": _policy(mode, "stop", token, iteration_timeout="2s")
                                   .loop.model_dump(mode="json")}))
    task = tmp_path / "task.md"
    task.write_text("t\n")
    try:
        r = healer("loop", "run", "--workdir", str(repo), "--policy", str(pol), "--task", str(task), "--run-id",
                   "stopped", timeout=120)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert carrying(token) == []
        state = json.loads((repo / ".healer" / "runs" / "stopped" / "state.json").read_text())
        h = state["history"][0]
        assert h["timed_out"] is True
        assert h["duration"] < 2 + 0.5 + 15, h  # deadline + grace + the watchdog's margin, on a loaded machine
        said = (repo / ".healer" / "runs" / "stopped" / "iter-001" / "agent.out").read_text()
        stops = [e for e in events(repo, "loop.runner_stopped")]
        if mode == "none":
            assert "sent" in said, said
            assert stops and stops[0].payload["times"] >= 1, stops
        else:
            assert "sent" not in said, said  # no runner in its namespace to stop
            assert stops == []
    finally:
        _kill_carrying(token)


# -- loop.limits -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["none", "bwrap"])
def test_the_pids_limit_holds_through_the_runs_cgroup(tmp_path, mode):
    """`loop.limits.pids: 12`: the agent's 40 forks stop at the limit (the kernel's EAGAIN), and the children it
    left waiting are ended with it. Needs a writable pids controller (root here)."""
    if mode == "bwrap":
        need_bwrap()
    probe, why = cgroups.make(f"healer-test-{os.getpid()}", {"pids": 12})
    if probe is None or why is not None:
        if probe is not None:
            probe.remove()
        pytest.skip(reason=f"no writable pids controller here: {why}")
    probe.remove()
    repo = target_repo(tmp_path / "repo")
    report = f"forks-{os.urandom(6).hex()}.json"
    r = _cli(tmp_path, repo, _policy(mode, "forks", "40", report, limits={"pids": 12}), "limits")
    assert r.returncode == 2, (r.stdout, r.stderr)
    made = json.loads((repo / report).read_text())["forks"]
    assert 0 < made < 12, made  # bwrap's monitor and init (and the agent itself) count too
    assert carrying(report) == []


def test_the_default_limits_stop_a_fork_bomb_and_a_memory_hog(tmp_path):
    """No `loop.limits` in the policy (issue 39: 1,500 forks and 2 GiB were allowed): the defaults, 512 pids and
    4 GiB, hold through the run's cgroup in the default sandbox. A real CLI runs under them:
    tests/agents/test_loop.py (the default policy)."""
    need_bwrap()
    probe, why = cgroups.make(f"healer-test-{os.getpid()}", {"pids": 512, "memory": 4 << 30})
    if probe is None or why is not None:
        if probe is not None:
            probe.remove()
        pytest.skip(reason=f"no writable pids and memory controllers here: {why}")
    probe.remove()
    assert Policy().loop.limits.pids == 512 and Policy().loop.limits.memory == 4 << 30
    repo = target_repo(tmp_path / "repo")
    report = f"forks-{os.urandom(6).hex()}.json"
    r = _cli(tmp_path, repo, _policy("bwrap", "forks", "1500", report), "bomb")
    assert r.returncode == 2, (r.stdout, r.stderr)
    made = json.loads((repo / report).read_text())["forks"]
    assert 400 < made < 512, made  # the limit, less bwrap's monitor and init and the agent itself
    assert carrying(report) == []
    report = f"hog-{os.urandom(6).hex()}.json"
    repo = target_repo(tmp_path / "repo2")
    r = _cli(tmp_path, repo, _policy("bwrap", "hog", "6144", report), "hog")
    assert r.returncode == 2, (r.stdout, r.stderr)
    held = json.loads((repo / report).read_text())["mb"]
    assert 1024 <= held <= 4096, held  # ended by the OOM killer at the 4 GiB limit, not at 6 GiB


# -- a fleet of two tickets --------------------------------------------------------------------------------

def test_a_fleet_of_two_tickets_neither_sandbox_reaches_the_other(tmp_path):
    """`healer up` runs two tickets at once, each agent attacking the other's worktree (directly, through
    /proc/PID/cwd of the other's processes, through /proc/PID/root) and the host (a witness file) while both run.
    Under bwrap (default pid namespace) nothing is written, and neither stalls the other: both loops end."""
    from healer.store import open_store
    from tests.conftest import wait_until

    need_bwrap()
    root = target_repo(tmp_path / "fleet")
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    witness = tmp_path / "outside" / "witness"
    witness.parent.mkdir()
    pol = {"version": 1,
           "loop": {**_policy("bwrap", "fleet", str(meeting), str(witness)).loop.model_dump(mode="json"),
                    "sandbox_writable": [str(meeting)], "iteration_timeout": "90s"},
           "fleet": {"dispatch_tick": "1s", "pool_size": 2},
           "retry": {"max_launches": 1}}
    (root / "healer.yaml").write_text(yaml.safe_dump(Policy.model_validate(pol).model_dump(mode="json", by_alias=True)))
    s = open_store(root)
    s.add_ticket("one", id="T-1")
    s.add_ticket("two", id="T-2")
    s.close()
    up = subprocess.Popen([PY, "-m", "healer", "up", "-C", str(root)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(list(meeting.glob("*.done"))) == 2, 180, "both agents' reports")

        def ended() -> int:
            s = open_store(root)
            try:
                return len([e for e in s.events(prefix="loop.") if e.kind == "loop.ended"])
            finally:
                s.close()
        wait_until(lambda: ended() >= 2, 180, "both loops ended")  # neither stalled by the other
    finally:
        up.send_signal(signal.SIGTERM)
        _, err = up.communicate(timeout=120)
    reports = [json.loads(f.read_text()) for f in meeting.glob("T-*.json") if f.stem.count("-") == 1]
    assert len(reports) == 2, list(meeting.iterdir())
    for rep in reports:
        assert rep["siblings"], rep  # each saw the other's worktree folder (the read-only machine shows it)
        assert rep["root_writes"] == [] and rep["cwd_writes"] == [] and rep["secrets"] == [], rep
        assert len(set(rep["seen"])) <= 4, rep
    assert not witness.exists()
    assert not list((root / ".healer" / "worktrees").glob("*/pwned")), err
