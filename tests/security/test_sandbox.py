"""The sandbox itself: network off, a private temp dir that leaves nothing behind, `auto`
falling back with one warning, `bwrap` refused where it cannot run."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading

import pytest

from healer import sandbox
from healer.errors import InvalidInput
from tests.security.conftest import need_bwrap, policy, run, target_repo


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
    monkeypatch.setattr(sandbox.shutil, "which", lambda _name: None)
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
