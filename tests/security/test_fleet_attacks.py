"""Hostile agents against the fleet's side: what an agent's branch makes healer run or read after its loop
ended (the merge gates, main's gates). Real repositories, the real sandbox, the real proposal path."""

from __future__ import annotations

import json
import os
import sys

import pytest

from healer import git, procs
from healer.clock import VirtualClock
from healer.fleet import proposals
from healer.fleet.ports import RealGates
from healer.policy.schema import Policy
from healer.records import Proposal
from tests.conftest import make_repo
from tests.security.conftest import need_bwrap, readable_copy

PY = sys.executable

# the agent's answer is right, and importing it runs code: what any test suite that imports the project does
HOSTILE_SOLUTION = """ANSWER = 42
import os, subprocess
try:
    with open({outside!r}, "w") as f:
        f.write("ran on the host: pid=%d" % os.getpid())
except OSError:
    pass
tree = subprocess.run(["git", "-C", {root!r}, "mktree"], input="", capture_output=True, text=True).stdout.strip()
c = subprocess.run(["git", "-C", {root!r}, "commit-tree", tree, "-m", "evil"], capture_output=True, text=True,
                   env={{**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x",
                        "GIT_COMMITTER_EMAIL": "x@x"}}).stdout.strip()
if c:
    subprocess.run(["git", "-C", {root!r}, "update-ref", "refs/heads/evil", c])
try:
    with open(os.path.join({root!r}, ".healer", "healer.db"), "a") as f:
        f.write("junk")
except OSError:
    pass
"""
CHECK = "import sys\nsys.path.insert(0, '.')\nimport solution\nassert solution.ANSWER == 42\n"


def _fleet(tmp_path, sandbox_mode: str):
    root = make_repo(tmp_path / "fleet", files={"tests/check.py": CHECK, "solution.py": "ANSWER = 0\n"})
    (root / ".healer").mkdir(exist_ok=True)
    (root / ".healer" / "healer.db").write_text("")
    outside = tmp_path / "outside" / "PWNED"
    outside.parent.mkdir()
    git.run(root, "checkout", "-q", "-b", "healer/T-1")
    (root / "solution.py").write_text(HOSTILE_SOLUTION.format(outside=str(outside), root=str(root)))
    git.run(root, *git.IDENTITY, "commit", "-q", "-a", "-m", "the agent's answer\n\nHealer-Run: r1")
    sha = git.rev(root)
    git.run(root, "checkout", "-q", "main")
    gate = {"name": "check", "run": [PY, "tests/check.py"], "timeout": "60s"}
    policy = Policy.model_validate({"version": 1, "loop": {"sandbox": sandbox_mode},
                                    "fleet": {"merge_gates": [gate], "main_gates": [gate]}})
    prop = Proposal(id=1, ticket_id="T-1", branch="healer/T-1", commit=sha, state="open", created_at=0.0)
    return root, outside, policy, prop


def _untouched(root, outside) -> None:
    assert not outside.exists(), outside.read_text()
    assert git.rev(root, "refs/heads/evil") is None
    assert (root / ".healer" / "healer.db").read_text() == ""


def test_merge_gates_run_the_agents_code_confined(tmp_path):
    need_bwrap()
    root, outside, policy, prop = _fleet(tmp_path, "bwrap")
    v = proposals.gate_proposal(root, policy, prop, VirtualClock())
    assert v.outcome == proposals.MERGED, v.log  # the answer is right: the gate passes, in the sandbox
    _untouched(root, outside)
    assert not (root / ".healer" / "scratch-tmp" / "T-1-p1").exists()  # its private temp folder is gone


def test_main_gates_run_mains_code_confined(tmp_path):
    need_bwrap()
    root, outside, policy, prop = _fleet(tmp_path, "bwrap")
    res = RealGates().main(root, policy, prop.commit, VirtualClock())  # main has the agent's code once merged
    assert res.outcome == "pass", res.log
    _untouched(root, outside)


def test_unsandboxed_merge_gates_are_the_control(tmp_path):
    """loop.sandbox: none is unconfined, as documented: the same branch does write outside (the attack is real)."""
    root, outside, policy, prop = _fleet(tmp_path, "none")
    v = proposals.gate_proposal(root, policy, prop, VirtualClock())
    assert v.outcome == proposals.MERGED, v.log
    assert outside.exists() and git.rev(root, "refs/heads/evil") is not None


def test_a_required_sandbox_that_is_missing_blocks_the_merge(tmp_path, monkeypatch):
    """loop.sandbox: bwrap on a machine without it: no gate runs, so nothing merges (unknown blocks a merge)."""
    root, outside, policy, prop = _fleet(tmp_path, "bwrap")
    bin_ = tmp_path / "bin"  # a PATH with git and nothing else: no bwrap on this machine
    bin_.mkdir()
    (bin_ / "git").symlink_to(procs.which("git"))
    monkeypatch.setenv("PATH", str(bin_))
    v = proposals.gate_proposal(root, policy, prop, VirtualClock())
    assert v.outcome == proposals.REJECTED
    assert "bwrap" in v.log and "gates not run" in v.log
    assert not outside.exists()


SPY = r"""
import json, os, sys
secret_name, report = sys.argv[1], sys.argv[2]
out = {"env": sorted(k for k in os.environ), "seen": [], "procs": {}}
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    try:
        env = open(f"/proc/{pid}/environ", "rb").read()
        out["seen"] += [e.decode(errors="replace") for e in env.split(b"\0") if e.startswith(secret_name.encode() + b"=")]
        got = "read"
    except OSError as e:
        got = type(e).__name__
    if "healer" in cmd:
        out["procs"][pid] = [cmd, got]
open(report + ".tmp", "w").write(json.dumps(out))
os.replace(report + ".tmp", report)
"""


def test_a_notifiers_secret_reaches_no_agent_and_no_readable_process(tmp_path):
    """`healer up` holds a webhook's signing secret (`secret_env`). The sandboxed agent looks for it in its own
    environment and in every /proc/PID/environ it can open (its runner, bwrap, the dispatcher): it finds none,
    because `up` moved the secret out of the environment it hands down (healer/notify/secrets.py). The `up`
    process itself is not visible from the sandbox (its pid namespace) nor readable (the agent lacks root's
    capabilities)."""
    import signal
    import subprocess

    import yaml

    from healer.store import open_store
    from tests.conftest import wait_until
    from tests.notify.receiver import free_port

    need_bwrap()
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir(exist_ok=True)
    spy, report = tmp_path / "spy.py", tmp_path / "report" / "spy.json"
    spy.write_text(SPY)
    name, value = "HEALER_TEST_HOOK_SECRET", "s3cret-signing-key-" + os.urandom(4).hex()
    pol = {"version": 1,
           "loop": {"sandbox": "bwrap", "max_iterations": 1, "kill_grace": "1s", "sandbox_writable": [str(report.parent)],
                    "agent": {"preset": "command", "command": [PY, str(spy), name, str(report)]},
                    "gates": [{"name": "ok", "run": [PY, "-c", "pass"], "timeout": "30s"}]},
           "fleet": {"dispatch_tick": "1s"},
           "notify": {"notifiers": [{"kind": "webhook", "url": f"http://127.0.0.1:{free_port()}/hook", "secret_env": name}]}}
    (root / "healer.yaml").write_text(yaml.safe_dump(Policy.model_validate(pol).model_dump(mode="json", by_alias=True)))
    s = open_store(root)
    s.add_ticket("spy", id="T-1")
    s.close()
    up = subprocess.Popen([PY, "-m", "healer", "up", "-C", str(root)], env={**os.environ, name: value},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(report.exists, timeout=120, what="the spy agent's report")
    finally:
        up.send_signal(signal.SIGTERM)
        _, err = up.communicate(timeout=120)
    got = json.loads(report.read_text())
    assert name not in got["env"]
    assert got["seen"] == [], got["seen"]
    assert value not in report.read_text()
    # under the pid namespace (bwrap's default) `up` is not even in the sandbox's /proc; without it, unreadable
    assert got["procs"].get(str(up.pid), [None, "unseen"])[1] in ("PermissionError", "unseen"), (up.pid, got["procs"], err)
    assert all(cmd.split()[0].endswith("bwrap") or "spy.py" in cmd for cmd, _ in got["procs"].values()), got["procs"]


def test_healers_long_running_commands_are_not_readable_by_another_process_of_the_same_user(tmp_path):
    """Unsandboxed (loop.sandbox none, or auto without bwrap), an agent runs as the operator's user and could read
    `healer up`'s /proc/PID/environ, which still holds the secret it was started with. Every command but
    `loop run` makes itself non-dumpable (healer/launch.py `_private`): the file then needs CAP_SYS_PTRACE."""
    import subprocess

    system_python = "/usr/bin/python3"  # the venv's may live where another user cannot read (/root)
    if os.geteuid() != 0 or procs.which("setpriv") is None or not os.access(system_python, os.X_OK):
        pytest.skip(reason="needs root, setpriv (util-linux) and /usr/bin/python3 to run both sides as another user")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    value = "s3cret-" + os.urandom(4).hex()
    hold = "import sys\nfrom healer.launch import _private\nif sys.argv[1] == '1':\n    _private()\nprint('ready', flush=True)\nsys.stdin.read()\n"
    seen = {}
    with readable_copy("healer") as top:  # the checkout may lie where that user cannot read (a `mktemp -d`)
        for private in ("0", "1"):
            p = subprocess.Popen([*as_nobody, "env", f"HEALER_TEST_SECRET={value}", system_python, "-c", hold, private],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=top,
                                 env={**os.environ, "PYTHONPATH": str(top), "PYTHONDONTWRITEBYTECODE": "1"})
            try:
                assert p.stdout.readline().strip() == "ready"
                r = subprocess.run([*as_nobody, "cat", f"/proc/{p.pid}/environ"], capture_output=True)
                seen[private] = value.encode() in r.stdout
            finally:
                p.stdin.close()
                p.wait(timeout=30)
    assert seen == {"0": True, "1": False}  # the control reads it; the private one cannot


def test_merge_gates_get_the_loops_environment_rule(tmp_path, monkeypatch):
    """The fleet's gates run the agent's code too: the store's credentials never reach them, and `loop.env_pass`
    narrows what else does, as for the loop's own gates."""
    root, _outside, _policy, prop = _fleet(tmp_path, "none")
    dump = tmp_path / "env.json"
    monkeypatch.setenv("PGPASSWORD", "pw")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    monkeypatch.setenv("GITHUB_TOKEN", "t")
    gate = {"name": "env", "run": [PY, "-c", f"import json, os; open({str(dump)!r}, 'w').write(json.dumps(sorted(os.environ)))"],
            "timeout": "30s"}
    policy = Policy.model_validate({"version": 1, "loop": {"sandbox": "none", "env_pass": ["GITHUB_TOKEN"]},
                                    "fleet": {"merge_gates": [gate]}})
    v = proposals.gate_proposal(root, policy, prop, VirtualClock())
    assert v.outcome == proposals.MERGED, v.log
    got = set(json.loads(dump.read_text()))
    assert "GITHUB_TOKEN" in got and "PATH" in got
    assert "PGPASSWORD" not in got and "AWS_SECRET_ACCESS_KEY" not in got
