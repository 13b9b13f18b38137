"""ContainerRuntime against a real engine: the same port, the same observed states as processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from healer.fleet.container_runtime import ContainerRuntime
from healer.fleet.runtime import EXITED, GONE, PAUSED, RUNNING, UNKNOWN, Handle, LaunchSpec
from tests.conftest import git, make_repo, wait_until
from tests.docker.conftest import require_engine, state_of

pytestmark = pytest.mark.docker
require_engine()
PY = sys.executable


def spec(cwd, code: str, fleet: str, ticket: str = "T1", run: str = "T1-01", **kw) -> LaunchSpec:
    return LaunchSpec(argv=[PY, "-c", code], cwd=str(cwd), labels={"fleet": fleet, "ticket": ticket, "run": run}, **kw)


def test_exit_code_log_labels_and_worktree_write(runtime, dclient, fleet_label, tmp_path):
    wt = tmp_path / "wt"
    wt.mkdir()
    log = tmp_path / "logs" / "agent.log"
    code = ("import os, sys, healer; print('agent in', os.getcwd(), 'ticket', os.environ['HEALER_TICKET']); "
            "open('made-inside.txt', 'w').write('x'); sys.exit(3)")
    h = runtime.launch(spec(wt, code, fleet_label, env={"HEALER_TICKET": "T1"}, log_path=str(log)))
    assert h.kind == "container" and h.container
    attrs = dclient.api.inspect_container(h.container)
    assert attrs["Config"]["Labels"]["healer.fleet"] == fleet_label
    assert attrs["Config"]["Labels"]["healer.ticket"] == "T1"
    assert attrs["Config"]["Labels"]["healer.run"] == "T1-01"
    assert attrs["HostConfig"]["NetworkMode"] == "none"
    st = runtime.wait(h, 30)
    assert (st.state, st.exit_code) == (EXITED, 3)
    assert (wt / "made-inside.txt").read_text() == "x"
    assert (wt / "made-inside.txt").stat().st_uid == os.getuid()  # the agent runs as the invoking user
    assert f"agent in {wt} ticket T1" in log.read_text()
    runtime.forget(h)  # the dispatcher recorded the exit: the container goes, the log stays
    assert state_of(dclient, h.container) == "gone"
    assert runtime.status(h).state == GONE
    assert "agent in" in log.read_text()


def test_kill_pause_stop_look_like_a_process(runtime, dclient, fleet_label, tmp_path):
    hang = "import time; print('up', flush=True); time.sleep(120)"
    a = runtime.launch(spec(tmp_path, hang, fleet_label, "A", "A-01"))
    b = runtime.launch(spec(tmp_path, hang, fleet_label, "B", "B-01"))
    assert runtime.status(a).state == RUNNING
    dclient.containers.get(a.container).kill()  # SIGKILL from outside, as a chaos fault would
    st = wait_until(lambda: (s := runtime.status(a)).state == EXITED and s, what="killed container seen exited")
    assert st.exit_code == -9  # like Popen.returncode of a SIGKILLed child
    dclient.containers.get(b.container).pause()
    assert runtime.status(b).state == PAUSED
    t0 = time.monotonic()
    runtime.stop(b, grace=10)  # a paused container is thawed, then SIGTERMed: no wait for the grace
    assert time.monotonic() - t0 < 8
    assert runtime.status(b).state == EXITED
    assert state_of(dclient, b.container) == "exited"


def test_stop_kills_everything_the_agent_started(runtime, fleet_label, tmp_path):
    token = f"healer-tree-{os.getpid()}-{time.monotonic_ns()}"
    code = ("import subprocess, sys, time, os; "
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{token}'], start_new_session=True); "
            "open('child-started', 'w').write('1'); time.sleep(300)")
    h = runtime.launch(spec(tmp_path, code, fleet_label))
    wait_until(lambda: (tmp_path / "child-started").exists(), what="the agent's escaped child")

    def escapees():
        return [p for p in psutil.process_iter(["cmdline"]) if token in (p.info["cmdline"] or [])]

    wait_until(lambda: escapees(), what="the child visible on the host")
    runtime.stop(h, grace=2)
    assert runtime.status(h).state == EXITED
    wait_until(lambda: not escapees(), timeout=60, what="no process of the container left")


def test_worktree_commit_from_inside_the_container(runtime, fleet_label, tmp_path):
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    wt = root / ".healer" / "worktrees" / "T1"
    git(root, "worktree", "add", "-q", "-b", "healer/T1", str(wt), "main")
    code = ("import subprocess; open('work.txt', 'w').write('done\\n'); "
            "subprocess.run(['git', 'add', 'work.txt'], check=True); "
            "subprocess.run(['git', 'commit', '-q', '-m', 'agent step'], check=True)")
    env = {"HEALER_ROOT": str(root), "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@healer.invalid",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@healer.invalid"}
    h = runtime.launch(spec(wt, code, fleet_label, env=env, log_path=str(tmp_path / "c.log")))
    st = runtime.wait(h, 60)
    assert (st.state, st.exit_code) == (EXITED, 0), (tmp_path / "c.log").read_text()
    assert git(root, "log", "-1", "--format=%s", "healer/T1") == "agent step"


@pytest.mark.parametrize("network,expect", [("none", 7), ("host", 0)])
def test_network_mode_none_or_host(dclient, fleet_label, tmp_path, network, expect):
    from healer.policy.schema import Policy

    runtime = ContainerRuntime.from_policy(Policy.model_validate({"fleet": {"container_network": network}}), client=dclient)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    try:
        code = ("import socket, sys\n"
                "try:\n"
                f"    socket.create_connection(('127.0.0.1', {port}), timeout=2); sys.exit(0)\n"
                "except OSError:\n"
                "    sys.exit(7)\n")
        h = runtime.launch(spec(tmp_path, code, fleet_label))
        assert runtime.wait(h, 30).exit_code == expect
    finally:
        srv.close()
        for c in runtime.children():
            runtime.remove(c)


def test_unknown_when_the_engine_does_not_answer(tmp_path):
    import docker

    dead = docker.DockerClient(base_url=f"unix://{tmp_path}/no-engine.sock", version="1.41", timeout=2)
    rt = ContainerRuntime(client=dead)
    assert rt.status(Handle(kind="container", container="abc")).state == UNKNOWN  # fail-open, never "dead"
    assert rt.status(Handle(kind="container", container=None)).state == GONE


def test_runtime_for_picks_containers_lazily():
    from healer.fleet.runtimes import runtime_for
    from healer.policy.schema import Policy

    rt = runtime_for(Policy.model_validate({"fleet": {"runtime": "container", "image": "healer-python"}}))
    assert rt.kind == "container" and isinstance(rt, ContainerRuntime)


def test_a_process_fleet_never_loads_docker():
    """Only what runs containers imports the docker SDK (its start-up, ~60 ms, is not a process fleet's to pay):
    with the package hidden, the CLI, the dispatcher with its process runtime, the supervisor and the loop import
    and the CLI's container commands load."""
    code = ("import sys; sys.modules['docker'] = None\n"
            "import healer.cli, healer.fleet.dispatcher, healer.supervisor, healer.loop.runner, healer.launch\n"
            "import healer.cli.containers, chaos.faults.containers\n"
            "from healer.fleet.runtimes import runtime_for\n"
            "from healer.policy.schema import Policy\n"
            "assert runtime_for(Policy.model_validate({})).kind == 'process'\n"
            "print('ok')")
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_images_module_builds_idempotently(dclient):
    from healer.containers import images

    what, image_id = images.build(dclient)
    assert what == "up to date"
    assert dclient.images.get("healer-python").labels[images.HASH_LABEL] == images.content_hash()
    out = subprocess.run([PY, "-m", "healer.containers.images"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("healer-python: up to date"), out.stderr
    root = dclient.containers.run("healer-python", [PY, "-c", "import os; print(' '.join(sorted(os.listdir('/'))))"],
                                  volumes=images.python_mounts(), network_mode="none", environment=images.python_path_env(),
                                  remove=True)
    listed = set(root.decode().split())
    assert {"usr", "tmp", "etc", "proc", "dev", "sys", "bin", "lib"} <= listed


def test_same_path_mounts_cover_interpreter_and_source():
    from healer.containers import images

    mounts = images.python_mounts()
    assert "/usr" in mounts and all(m["mode"] == "ro" for m in mounts.values())
    import healer

    src = str(Path(healer.__file__).resolve())
    assert any(src.startswith(p.rstrip("/") + "/") for p in mounts)
    assert any(os.path.realpath(sys.executable).startswith(p.rstrip("/") + "/") for p in mounts)


def test_a_restarted_dispatcher_still_gets_the_output(dclient, fleet_label, tmp_path):
    """The launching process is gone (its log pump with it): another runtime copies the output before removing."""
    log = tmp_path / "agent.log"
    first = ContainerRuntime(client=dclient)
    h = first.launch(spec(tmp_path, "print('said before the end')", fleet_label, log_path=str(log)))
    wait_until(lambda: state_of(dclient, h.container) == "exited", what="the agent to end")
    first._logs.clear()  # as if the process that launched it had died
    later = ContainerRuntime(client=dclient)
    assert later.status(h).state == EXITED
    later.forget(h)
    assert state_of(dclient, h.container) == "gone"
    assert "said before the end" in log.read_text()
