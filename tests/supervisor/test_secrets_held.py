"""A supervisor takes each notifier's secret out of its environment before it starts anything: a repair agent or
a gate it launches inherits no signing key (healer/notify/secrets.py; the sandboxed end to end: tests/security)."""

from __future__ import annotations

import os
import subprocess
import sys

from healer.clock import system
from healer.notify import secrets
from healer.policy.schema import Policy
from healer.store import open_store
from healer.supervisor import Supervisor
from tests.conftest import make_repo

NAME = "HEALER_TEST_SUP_HOOK_SECRET"


def _policy() -> Policy:
    return Policy.model_validate({"notify": {"notifiers": [
        {"kind": "webhook", "url": "http://127.0.0.1:9/hook", "secret_env": NAME}]}})


def test_a_supervisor_holds_a_notifiers_secret_out_of_what_its_children_inherit(tmp_path, monkeypatch):
    monkeypatch.setenv(NAME, "s3cret-" + os.urandom(4).hex())
    value = os.environ[NAME]
    monkeypatch.setattr(secrets, "_held", {})
    root = make_repo(tmp_path / "fleet")
    store = open_store(root, system())
    try:
        Supervisor(root, _policy(), store, system())
        assert NAME not in os.environ
        assert secrets.get(NAME) == value  # the supervisor's own notifier still signs with it
        child = subprocess.run([sys.executable, "-c", f"import os; print(os.environ.get({NAME!r}, ''))"],
                               capture_output=True, text=True, check=True)
        assert child.stdout.strip() == ""
    finally:
        store.close()


def test_a_dry_run_supervisor_leaves_the_environment_as_it_found_it(tmp_path, monkeypatch):
    """A dry run starts nothing; a Chaos Toolkit probe in the same process keeps its environment."""
    monkeypatch.setenv(NAME, "kept")
    monkeypatch.setattr(secrets, "_held", {})
    root = make_repo(tmp_path / "fleet")
    store = open_store(root, system())
    try:
        Supervisor(root, _policy(), store, system(), dry_run=True)
        assert os.environ.get(NAME) == "kept"
    finally:
        store.close()
