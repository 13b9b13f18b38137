"""`loop.sandbox: container`: the agent and the gates in a Docker container (read-only root, the
worktree and its branch writable, host uid, no network). The short tests here run in `make test`;
every attack of test_loop_attacks.py also runs in a container under `make campaigns`. A Docker
engine is required: missing, these skip with a reason on a workstation and FAIL under CI=true."""

from __future__ import annotations

import os
import sys

from tests.security.conftest import assert_contained, events, need_docker, policy, run, target_repo

PY = sys.executable


def _no_loop_containers(repo) -> None:
    from healer import sandbox
    from healer.containers.client import connect

    left = connect().api.containers(all=True, filters={"label": f"{sandbox.WORKDIR_LABEL}={repo.resolve()}"})
    assert left == [], left


def test_hooks_and_outside_writes_refused_files_owned_by_the_user(tmp_path, monkeypatch):
    need_docker()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    repo = target_repo(tmp_path / "repo")
    witness, beside, in_home = tmp_path / "witness", tmp_path / "beside.txt", home / "pwned.txt"
    in_git = repo / ".git" / "info" / "pwned"
    out, lines = run(repo, policy("container", "hook", str(witness)))
    assert_contained(repo, out)
    assert not witness.exists() and not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert "hooksPath" not in (repo / ".git" / "config").read_text()
    assert events(repo, "loop.started")[0].payload["sandbox"] == "container"
    st = (repo / "solution.txt").stat()  # written inside: owned by the user who runs the loop
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())

    out, _ = run(repo, policy("container", "outside", str(beside), str(in_home), str(in_git)), run_id="out",
                 allow_dirty=True)
    assert_contained(repo, out)
    assert not beside.exists() and not in_home.exists() and not in_git.exists()
    assert "refused" in (repo / ".healer" / "runs" / "out" / "iter-001" / "agent.out").read_text()
    _no_loop_containers(repo)


def test_container_that_cannot_start_ends_the_loop_with_69(tmp_path, monkeypatch):
    """A mount the engine refuses (as bwrap's /var/run/docker.sock was in CI): the container is never
    created. That is the sandbox failing, not an agent without progress: exit 69, loop.sandbox_failed,
    no iteration recorded, nothing left behind."""
    need_docker()
    from healer.containers import images

    real = images.python_mounts
    gone = tmp_path / "gone"
    monkeypatch.setattr(images, "python_mounts", lambda: {**real(), str(gone): {"bind": str(gone), "mode": "ro"}})
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "witness"
    pol = policy("container", "x", max_iterations=3, agent={"command": ["sh", "-c", f"echo ran > {witness}"]})
    out, lines = run(repo, pol)
    assert out.exit_code == 69 and out.iterations == 0, (out, lines)
    assert not witness.exists()
    ev = events(repo, "loop.sandbox_failed")
    assert len(ev) == 1 and ev[0].payload["mode"] == "container" and ev[0].payload["what"] == "the agent"
    assert "bind source path does not exist" in ev[0].payload["stderr"], ev[0].payload
    assert "sandbox container failed to start the agent" in lines[-1]
    assert events(repo, "loop.iteration") == []
    _no_loop_containers(repo)
