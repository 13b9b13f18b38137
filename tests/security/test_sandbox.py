"""The sandbox itself: network off, a private temp dir that leaves nothing behind, `auto`
falling back with one warning, `bwrap` refused where it cannot run."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import yaml

from healer import sandbox
from healer.errors import InvalidInput
from healer.policy.schema import Policy
from tests.conftest import healer
from tests.security.conftest import events, need_bwrap, policy, run, target_repo


def test_network_off_and_private_tmp(tmp_path):
    need_bwrap()
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(15)
    got: list[bytes] = []

    def accept():
        try:
            c, _ = srv.accept()
            got.append(c.recv(64))
            c.close()
        except OSError:
            pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    repo = target_repo(tmp_path / "repo")
    port = str(srv.getsockname()[1])
    out, _ = run(repo, policy("bwrap", "net", port, "net.txt", sandbox_network=False))
    assert out.exit_code not in (0, 70)
    assert (repo / "net.txt").read_text().startswith("refused")
    srv.close()
    t.join(5)
    assert got == []

    name = f"healer-sbx-test-{os.getpid()}"
    out, _ = run(repo, policy("bwrap", "tmp", name), run_id="tmp", allow_dirty=True)
    assert out.exit_code not in (0, 70)
    assert not os.path.exists(os.path.join(tempfile.gettempdir(), name))  # neither $TMPDIR nor /tmp reached the host



def test_auto_warns_once_and_bwrap_refused_without_bubblewrap(monkeypatch):
    monkeypatch.setattr(sandbox, "_which", lambda _name: None)  # no bwrap (nor docker) on PATH
    monkeypatch.setattr(sandbox, "_warned", set())
    mode, warn = sandbox.resolve("auto")
    assert mode == "none" and warn and "bubblewrap" in warn
    assert sandbox.resolve("auto") == ("none", None)  # once
    assert sandbox.resolve("none") == ("none", None)
    with pytest.raises(InvalidInput) as e:
        sandbox.resolve("bwrap")
    assert e.value.exit_code == 65 and "bwrap" in str(e.value)


def test_daemon_socket_reached_through_a_link_is_masked_and_the_sandbox_still_starts(tmp_path, monkeypatch):
    """CI regression: with dockerd running, /var/run/docker.sock (a link to /run) made every
    sandboxed agent fail to start ("Can't create file at /var/run/docker.sock") and the loop
    ran its iterations on an agent that never ran. Masks go on real paths, once each."""
    need_bwrap()
    import subprocess

    real_dir = tmp_path / "run"
    real_dir.mkdir()
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "run").symlink_to(real_dir)
    sock_path = real_dir / "daemon.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(sock_path))
    srv.listen(1)
    try:
        monkeypatch.setattr(sandbox, "SOCKETS", (str(tmp_path / "var" / "run" / "daemon.sock"), str(sock_path)))
        monkeypatch.setattr(sandbox, "_probe", {})
        assert sandbox.unavailable() is None
        prof = sandbox.Profile(workdir=tmp_path)
        probe = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
                 f"try:\n s.connect({str(sock_path)!r}); sys.exit(9)\nexcept OSError: sys.exit(0)\n")
        r = subprocess.run(prof.wrap([sys.executable, "-c", probe]), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr  # started, and the socket is not reachable inside
    finally:
        srv.close()


# -- a sandbox that fails to start is never an agent that ran ------------------------------------

def _witness_policy(mode: str, witness: Path, **loop):
    """An agent that only leaves a witness file: it ran, or it did not."""
    from tests.security.conftest import PY

    return Policy.model_validate({"version": 1, "loop": {
        "max_iterations": 3, "iteration_timeout": "60s", "kill_grace": "1s", "sandbox": mode,
        "sandbox_writable": [str(witness.parent)],
        "agent": {"command": [PY, "-c", f"open({str(witness)!r}, 'a').write('ran\\n')"]},
        "gates": [{"name": "never", "run": [PY, "-c", "raise SystemExit(1)"], "timeout": "30s"}], **loop}})


def test_bwrap_that_cannot_set_up_ends_the_loop_with_69(tmp_path, monkeypatch):
    """CI regression, with the real bwrap: a mount it cannot make (as /var/run/docker.sock was) used to
    look like an agent that made no progress, and the loop burned its iterations until "stalled"."""
    need_bwrap()
    assert sandbox.unavailable() is None  # probed before the breakage: `bwrap` is chosen
    monkeypatch.setattr(sandbox, "socket_masks", lambda: ["--ro-bind", "/dev/null", "/var/run/healer-no-such.sock"])
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "w" / "witness"
    out, lines = run(repo, _witness_policy("bwrap", witness))
    assert out.exit_code == 69 and out.iterations == 0, (out, lines)
    assert not witness.exists()  # the agent never ran
    assert lines[-1].startswith(f"loop {out.run_id}: exit 69") and "Can't create file" in lines[-1], lines
    ev = events(repo, "loop.sandbox_failed")
    assert len(ev) == 1 and ev[0].payload["mode"] == "bwrap" and ev[0].payload["what"] == "the agent"
    assert "bwrap: Can't create file at /var/run/healer-no-such.sock" in ev[0].payload["stderr"]
    assert events(repo, "loop.iteration") == []
    assert json.loads(out.result_path.read_text())["exit_code"] == 69


def test_shimmed_bwrap_failing_like_ci_is_one_line_and_69(tmp_path):
    """The CLI, with a `bwrap` on PATH that passes the probe and then fails every real run exactly as
    the real one did in CI: one line on stderr, exit 69, no traceback, no iteration."""
    need_bwrap()
    real = shutil.which("bwrap")
    shim = tmp_path / "bin" / "bwrap"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\ncase \" $* \" in *' --chdir '*) ;; *) exec {real} \"$@\" ;; esac\n"
                    "echo \"bwrap: Can't create file at /var/run/docker.sock: No such file or directory\" >&2\n"
                    "exit 1\n")
    shim.chmod(0o755)
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "w" / "witness"
    pol = tmp_path / "policy.yaml"
    pol.write_text(yaml.safe_dump(_witness_policy("bwrap", witness).model_dump(mode="json")))
    task = tmp_path / "task.md"
    task.write_text("make tests pass\n")
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}"}
    r = healer("loop", "run", "--workdir", str(repo), "--policy", str(pol), "--task", str(task), env=env)
    assert r.returncode == 69, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and not witness.exists()
    assert "sandbox bwrap failed to start the agent: bwrap: Can't create file at /var/run/docker.sock" in r.stdout + r.stderr
    assert "iteration 1/" not in r.stdout
    assert not (Path(os.environ["HEALER_CACHE_DIR"]) / sandbox.PROBE_FILE).exists()  # the passed probe is forgotten


RACE = ('bwrap: Can\'t bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount '
        '"/newroot/var/lib/docker/overlay2/ea1f88-init/merged": Invalid argument')


@pytest.mark.parametrize("fails", [2, 99])
def test_a_mount_that_moved_under_bwrap_is_tried_again(tmp_path, fails):
    """Seen in a full run beside Docker's tests: a container's overlay mounted or unmounted while bwrap copied the
    host's mount table, and bwrap refused the remount. The program never started, so healer starts it again (three
    tries in all); a race that does not settle is the sandbox's failure, 69 with the line, as any other."""
    need_bwrap()
    real = shutil.which("bwrap")
    count, said = tmp_path / "count", tmp_path / "said"
    said.write_text(RACE + "\n")
    shim = tmp_path / "bin" / "bwrap"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\ncase \" $* \" in *' --chdir '*) ;; *) exec {real} \"$@\" ;; esac\n"
                    f"n=$(cat {count} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {count}\n"
                    f"[ $n -gt {fails} ] && exec {real} \"$@\"\n"
                    f"cat {said} >&2\nexit 1\n")
    shim.chmod(0o755)
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "w" / "witness"
    pol = tmp_path / "policy.yaml"
    pol.write_text(yaml.safe_dump(_witness_policy("bwrap", witness, max_iterations=1).model_dump(mode="json")))
    task = tmp_path / "task.md"
    task.write_text("make tests pass\n")
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}"}
    r = healer("loop", "run", "--workdir", str(repo), "--policy", str(pol), "--task", str(task), env=env)
    assert "Traceback" not in r.stderr
    if fails == 2:  # the third try started it: the agent ran, the (red) gate decided
        assert r.returncode != 69 and witness.read_text() == "ran\n", (r.stdout, r.stderr)
    else:
        assert r.returncode == 69 and not witness.exists(), (r.stdout, r.stderr)
        assert "Unable to apply mount flags" in r.stdout + r.stderr
        assert int(count.read_text()) == sandbox.MOUNT_RACE_TRIES


# -- a probe that passed, remembered ------------------------------------------------------------------------

def test_a_passed_probe_is_remembered_and_nothing_else_is(tmp_path, monkeypatch):
    """The probe costs a bwrap process per `healer loop run`: once it passed, the next process knows from
    healer's cache (read-only in the sandbox) while this bwrap, this boot, the user, the namespace settings
    and the sockets to mask stay the same. A failed probe is never remembered."""
    need_bwrap()
    monkeypatch.setenv("HEALER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sandbox, "_probe", {})
    assert sandbox.unavailable() is None  # probed for real, and remembered
    assert (tmp_path / "cache" / sandbox.PROBE_FILE).exists()
    started = []
    real_popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a) or real_popen(*a, **k))
    monkeypatch.setattr(sandbox, "_probe", {})
    sandbox.probe_early()
    assert sandbox.unavailable() is None and started == []  # no process to prove it again
    # another bwrap (a shim on PATH, failing the probe): probed, refused, not remembered
    shim = tmp_path / "bin" / "bwrap"
    shim.parent.mkdir()
    shim.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(sandbox, "_probe", {})
    why = sandbox.unavailable()
    # two probes: with a user namespace of its own (sandbox.USERNS), then without
    assert why is not None and "Permission denied" in why and len(started) == 2
    monkeypatch.setattr(sandbox, "_probe", {})
    assert sandbox.unavailable() is not None and len(started) == 4  # asked again: a failure is never remembered
    # a changed namespace setting (or boot, user, bwrap file, sockets) is another key: probed again
    monkeypatch.setenv("PATH", os.environ["PATH"].split(":", 1)[1])
    monkeypatch.setattr(sandbox, "_probe", {})
    monkeypatch.setattr(sandbox, "_KNOBS", sandbox._KNOBS + (str(tmp_path / "knob"),))
    (tmp_path / "knob").write_text("1\n")
    assert sandbox.unavailable() is None and len(started) == 5
    sandbox.forget_probe()
    assert not (tmp_path / "cache" / sandbox.PROBE_FILE).exists()


def test_missing_gate_program_in_bwrap_is_a_failing_gate_not_a_broken_sandbox(tmp_path):
    """`bwrap: execvp ./check.sh` is the program's absence (the agent may write it later): exit 127 for
    that gate, as unsandboxed. The agent's `kill -9 $PPID` reaches only its pid namespace's init (bwrap's, which
    the kernel keeps from a SIGKILL sent inside): the agent ends by itself, exit 0. The loop goes on."""
    need_bwrap()
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "w" / "witness"
    pol = _witness_policy("bwrap", witness, max_iterations=2,
                          gates=[{"name": "check", "run": ["./check.sh"], "timeout": "30s"}],
                          agent={"command": ["sh", "-c", f"echo ran >> {witness}; kill -9 $PPID"]})
    out, lines = run(repo, pol)
    assert out.exit_code in (2, 3) and out.iterations == 2, (out, lines)
    assert witness.read_text() == "ran\nran\n"
    assert events(repo, "loop.sandbox_failed") == []
    it = events(repo, "loop.iteration")[0].payload
    assert it["gates"][0]["exit_code"] == 127 and it["agent_exit"] == 0


def test_policy_cache_stays_read_only_under_a_writable_cache_folder(tmp_path, monkeypatch):
    """A policy that makes ~/.cache writable (pip, npm) must not let the agent write healer's cache
    of validated policies: the next run would start from the agent's policy."""
    need_bwrap()
    dot_cache = tmp_path / "dotcache"
    monkeypatch.setenv("HEALER_CACHE_DIR", str(dot_cache / "healer"))
    repo = target_repo(tmp_path / "repo")
    prof = sandbox.loop_profile(repo, [str(dot_cache)], True)
    poisoned = dot_cache / "healer" / "policies.json"
    with sandbox.Session(prof) as p:
        subprocess.run(p.wrap(["sh", "-c", f"echo '{{}}' > {poisoned}; echo ok > {dot_cache}/pip-cache"]),
                       capture_output=True, timeout=60)
    assert not poisoned.exists()
    assert (dot_cache / "pip-cache").read_text() == "ok\n"  # the rest of the writable folder stays writable


def test_pid_namespace_hides_the_runner_and_the_deadline_still_kills_the_tree(tmp_path):
    """`sandbox_pid_namespace: true` (bwrap --unshare-pid): the agent sees only its own processes, and
    the deadline still kills a hung agent that ignores SIGTERM and double-forks (the CLI runner, a
    subreaper, as the fleet runs it): nothing is left with its cwd in the worktree."""
    need_bwrap()
    from healer import procs
    from tests.security.conftest import PY

    hang = Path(__file__).resolve().parents[2] / "chaos" / "agents" / "loop_hang.py"
    repo = target_repo(tmp_path / "repo")
    pol = tmp_path / "policy.yaml"
    pol.write_text(yaml.safe_dump({"version": 1, "loop": {
        "max_iterations": 1, "iteration_timeout": "3s", "kill_grace": "500ms", "sandbox": "bwrap",
        "sandbox_pid_namespace": True,
        "agent": {"command": ["sh", "-c", f"ls /proc > seen.txt; exec {PY} {hang} hang.pids"]},
        "gates": [{"name": "never", "run": [PY, "-c", "raise SystemExit(1)"], "timeout": "30s"}]}}))
    task = tmp_path / "task.md"
    task.write_text("t\n")
    r = healer("loop", "run", "--workdir", str(repo), "--policy", str(pol), "--task", str(task), "--run-id", "pidns")
    assert r.returncode == 2, (r.stdout, r.stderr)
    seen = [p for p in (repo / "seen.txt").read_text().split() if p.isdigit()]
    assert len(seen) <= 4, seen  # bwrap's init, sh, ls: not the runner, not the machine
    assert len((repo / "hang.pids").read_text().split()) >= 2  # the hung tree did start (namespace pids)
    state = json.loads((repo / ".healer" / "runs" / "pidns" / "state.json").read_text())
    assert state["history"][0]["timed_out"] is True
    assert procs.busy_pids(repo) == []
