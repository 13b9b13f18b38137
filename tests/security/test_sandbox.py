"""The sandbox itself: network off, a private temp dir that leaves nothing behind, `auto`
falling back with one warning, `bwrap` refused where it cannot run."""

from __future__ import annotations

import os
import socket
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
