"""`healer gameday validate|new|clean`, strict scenario files, empty selections, and a clean temp folder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from chaos.scenario import SCENARIO_DIR, load
from healer.errors import InvalidInput
from tests.conftest import healer

GOOD = """\
name: x
fleet:
  tickets:
    - {id: T-1, behaviour: succeeds}
expect:
  - count: {kind: dispatch.launched, subject: T-1, min: 1}
"""


def _load(tmp_path, text: str):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p, load(p)


def _problem(tmp_path, text: str) -> str:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    with pytest.raises(InvalidInput) as e:
        load(p)
    return "\n".join(e.value.lines)


@pytest.mark.parametrize(("text", "where", "needle"), [
    # a misspelt checker sub-key is an error, not a check that counts everything
    (GOOD.replace("subject: T-1", "subjct: T-1"), ":6:", "subjct"),
    (GOOD.replace("behaviour: succeeds", "behaviour: fials"), ":4:", "did you mean 'fails'"),
    (GOOD.replace("  - count: {kind: dispatch.launched, subject: T-1, min: 1}", "  - invariant: intents_setled"),
     ":6:", "intents_setled"),
    (GOOD + "faults:\n  - {at: 1m, fault: kill_supervisor, params: {restart_afer: 10m}}\n", ":8:", "restart_afer"),
    (GOOD + "faults:\n  - {at: 1m, fault: kill_supervisor, params: {restart_after: soon}}\n", ":8:", "duration"),
    (GOOD.replace("min: 1", "").replace(", }", "}"), ":6:", "expected a bound"),
    (GOOD + "overrides: {retry: {max_launchs: 3}}\n", ":7:", "overrides.retry.max_launchs"),
    (GOOD + "disable: {switches_off: [busy_chek]}\n", ":7:", "did you mean 'busy_check'"),
    (GOOD + "disable: {actions_off: [drop_labels]}\n", ":7:", "drop_labels"),
    (GOOD + "disable: {retry: {max_launches: 9}}\ndisable_breaks: [no such check]\n", ":8:", "no such check"),
    (GOOD.replace("min: 1}", "min: 1}\n  - notifications: {key: 'a*', max_per_window: 1}"), ":7:", "window"),
    (GOOD + "faults:\n  - {fault: failpoint, failpoint: remedy.no_such_point}\n", ":8:", "remedy.no_such_point"),
    (GOOD.replace("min: 1}", "min: 1}\n  - state: {dispatch_pausd: false}"), ":7:", "did you mean 'dispatch_paused'"),
    # a fault aimed at a ticket the scenario never makes would do nothing: a false pass
    (GOOD + "faults:\n  - {at: 30m, fault: kill_agent, target: Z-9}\n", ":8:",
     "faults[0].target: expected a ticket of the fleet (T-1) or a glob matching one, got 'Z-9'"),
    (GOOD + "faults:\n  - {at: 30m, fault: stale_labels, target: 'X-*', seconds: 1h}\n", ":8:", "got 'X-*'"),
])
def test_every_scenario_problem_is_a_located_line(tmp_path, text, where, needle):
    lines = _problem(tmp_path, text)
    assert where in lines.splitlines()[0] and needle in lines, lines


def test_durations_everywhere_as_in_policies(tmp_path):
    _, sc = _load(tmp_path, GOOD + "faults:\n  - {at: 1m, fault: kill_supervisor, params: {restart_after: 10m}}\n")
    assert sc.faults[0].params["restart_after"] == 600.0
    _, sc = _load(tmp_path, GOOD.replace("behaviour: succeeds", "behaviour: succeeds, params: {duration: 1h30m}"))
    assert sc.fleet.tickets[0].params["duration"] == 5400.0


def test_an_unknown_event_kind_is_warned_with_a_did_you_mean(tmp_path):
    _, sc = _load(tmp_path, GOOD.replace("dispatch.launched", "dispatch.lauched"))
    assert len(sc.warnings) == 1 and ":6:" in sc.warnings[0] and "did you mean 'dispatch.launched'" in sc.warnings[0]
    _, sc = _load(tmp_path, GOOD.replace("dispatch.launched", "dispatch.*"))
    assert sc.warnings == []


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_validate_and_new(tmp_path):
    r = healer("gameday", "validate", str(SCENARIO_DIR))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(": ok (") == len(list(SCENARIO_DIR.glob("*.yaml")))
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("subject", "subjct"))
    r = healer("gameday", "validate", str(SCENARIO_DIR / "red-main.yaml"), str(bad))
    assert r.returncode == 65 and r.stderr.startswith(f"{bad}:6:") and "Traceback" not in r.stderr
    r = healer("gameday", "new", "my-day", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert healer("gameday", "validate", str(tmp_path / "my-day.yaml")).returncode == 0
    assert healer("gameday", "new", "my-day", cwd=tmp_path).returncode == 64  # never overwrites
    r = healer("gameday", "run", "--quiet", str(tmp_path / "my-day.yaml"), env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    r = healer("gameday", "run", "--quiet", "--disable", str(tmp_path / "my-day.yaml"), env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 1 and "every label dropped" in r.stdout and "see the report" not in r.stdout


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_empty_selection_and_disable_without_disable_are_usage_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    r = healer("gameday", "run", str(tmp_path / "empty"))
    assert r.returncode == 64 and "no scenario" in r.stderr
    p = tmp_path / "plain.yaml"
    p.write_text(GOOD)
    r = healer("gameday", "run", "--disable", str(p))
    assert r.returncode == 64 and "has no `disable:`" in r.stderr


@pytest.mark.long  # 32 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_passing_run_leaves_nothing_in_the_temp_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    r = healer("gameday", "run", "--quiet", "zombie-ticket", "busy-worktree", "unknown-files-real", env={**env, "HEALER_GAMEDAY_HOME": ""})
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(tmp.iterdir()) == []
    r = healer("gameday", "run", "--quiet", "--keep", "zombie-ticket", env={**env, "HEALER_GAMEDAY_HOME": ""})
    kept = [p for p in tmp.iterdir()]
    assert r.returncode == 0 and len(kept) == 1 and str(kept[0]) in r.stderr
    shutil.rmtree(kept[0])


def test_clean_removes_what_dead_runs_left(tmp_path):
    tmp = tmp_path / "tmp"
    home = tmp / "home"
    (home / "run-dead").mkdir(parents=True)
    (home / "stray.txt").write_text("left by a killed run\n")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (home / "run-dead" / "owner.json").write_text(json.dumps({"pid": dead.pid, "create_time": 1.0}))
    (home / "run-dead" / "undo.jsonl").write_text("")
    work = tmp / "gameday-x-abc"
    (work / "fleet").mkdir(parents=True)
    (work / "owner.json").write_text(json.dumps({"pid": dead.pid, "create_time": 1.0}))
    live = tmp / "gameday-live-abc"
    (live / "fleet").mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        import psutil

        (live / "owner.json").write_text(json.dumps({"pid": holder.pid, "create_time": psutil.Process(holder.pid).create_time()}))
        r = healer("gameday", "clean", env={"TMPDIR": str(tmp), "HEALER_GAMEDAY_HOME": str(home)})
        assert r.returncode == 0, r.stderr
        assert not home.exists() and not work.exists()
        assert live.exists()  # a live run's folder is not ours to remove
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()


def _quiet_env(tmp_path) -> dict[str, str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return {"TMPDIR": str(tmp), "HEALER_GAMEDAY_HOME": ""}


@pytest.mark.long  # 14 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_workdir_never_deletes_a_folder_it_did_not_make_and_moves_an_earlier_game_day_aside(tmp_path):
    env = _quiet_env(tmp_path)
    keep = tmp_path / "keep"
    mine = keep / "relaunch-storm" / "fleet"
    mine.mkdir(parents=True)
    (mine / "NOTES.txt").write_text("my notes\n")
    r = healer("gameday", "run", "-q", "relaunch-storm", "--workdir", str(keep), env=env)
    assert r.returncode == 64, r.stdout + r.stderr
    assert r.stderr.startswith(f"healer: --workdir {keep}: {keep / 'relaunch-storm'}: not empty") and len(r.stderr.splitlines()) == 1
    assert (mine / "NOTES.txt").read_text() == "my notes\n" and sorted(p.name for p in keep.iterdir()) == ["relaunch-storm"]
    from chaos import engine
    from healer.errors import UsageError

    with pytest.raises(UsageError):  # the library entry point refuses it too
        engine.run(load(SCENARIO_DIR / "relaunch-storm.yaml"), keep / "relaunch-storm")
    assert sorted(p.name for p in mine.iterdir()) == ["NOTES.txt"]
    # a folder an earlier game day made: the next run moves it aside whole, with what a person added to it
    k2 = tmp_path / "k2"
    assert healer("gameday", "run", "-q", "relaunch-storm", "--workdir", str(k2), env=env).returncode == 0
    (k2 / "relaunch-storm" / "fleet" / "mine.txt").write_text("looked into it\n")
    r = healer("gameday", "replay", "relaunch-storm", "--workdir", str(k2), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (k2 / "relaunch-storm.earlier-1" / "fleet" / "mine.txt").read_text() == "looked into it\n"
    assert (k2 / "relaunch-storm" / "fleet" / ".healer").is_dir() and not (k2 / "relaunch-storm" / "fleet" / "mine.txt").exists()
    assert f"aside to {k2 / 'relaunch-storm.earlier-1'}" in r.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.long  # 12 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_unusable_report_and_junit_paths_are_refused_before_the_game_day_runs(tmp_path):
    env = _quiet_env(tmp_path)
    p = tmp_path / "plain.yaml"
    p.write_text(GOOD)
    (tmp_path / "afile").write_text("a file\n")
    for args, needle in ((["--junit", "/proc/x/j.xml"], "--junit /proc/x/j.xml: cannot make the folder /proc/x"),
                         (["--report", "/proc/x"], "--report /proc/x: cannot make the folder /proc/x"),
                         (["--report", str(tmp_path / "rep"), "--junit", str(tmp_path / "rep")], "expected a file name"),
                         (["--report", str(tmp_path / "afile" / "r")], "cannot make the folder")):
        r = healer("gameday", "run", str(p), *args, env=env)
        assert r.returncode == 64, (args, r.stdout + r.stderr)
        assert needle in r.stderr and len(r.stderr.splitlines()) == 1 and "PASS" not in r.stdout + r.stderr, args


@pytest.mark.long  # 9 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_flags_a_chaos_toolkit_experiment_cannot_honour_are_refused(tmp_path):
    exp = tmp_path / "exp.json"
    exp.write_text(json.dumps({
        "version": "1.0.0", "title": "t", "description": "d",
        "steady-state-hypothesis": {"title": "h", "probes": [
            {"type": "probe", "name": "p", "tolerance": 0, "provider": {"type": "process", "path": "true"}}]},
        "method": [{"type": "action", "name": "a", "provider": {"type": "process", "path": "true"}}]}))
    for flags in (["--disable"], ["--seed", "3"], ["--workdir", str(tmp_path / "w")]):
        r = healer("gameday", "run", *flags, str(exp), env=_quiet_env(tmp_path))
        assert r.returncode == 64, r.stdout + r.stderr
        assert r.stderr.startswith(f"healer: {flags[0]}: not for a Chaos Toolkit experiment") and "PASS" not in r.stdout


@pytest.mark.long  # 13 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_bad_schedule_file_is_one_located_line(tmp_path):
    (tmp_path / "bad.json").write_text("{bad\n")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe")
    for name, line in (("bad.json", f"{tmp_path / 'bad.json'}:2:1: (file): expected valid YAML, got a syntax error: "),
                       ("nosuch.json", f"{tmp_path / 'nosuch.json'}: no such schedule file"),
                       ("bin.json", f"{tmp_path / 'bin.json'}:1:1: (file): expected UTF-8 text")):
        r = healer("gameday", "replay", "--schedule", str(tmp_path / name), env=_quiet_env(tmp_path))
        assert r.returncode == 65, r.stderr
        assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(line), r.stderr


def test_a_mistyped_scenario_name_gets_a_did_you_mean():
    r = healer("gameday", "run", "relaunch-strom")
    assert r.returncode == 65
    assert "relaunch-strom: no such scenario file or folder (did you mean 'relaunch-storm'?)" in r.stderr


def test_ctrl_c_on_a_game_day_exits_4_and_leaves_no_work_folder(tmp_path):
    import signal
    import subprocess
    import sys

    from tests.conftest import wait_until

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    p = subprocess.Popen([sys.executable, "-m", "healer", "gameday", "run", "frozen-in-progress", "--quiet"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_until(lambda: list(tmp_path.glob("gameday-frozen-in-progress-*/fleet/.healer")), timeout=60,
                   what="the game day under way")
        p.send_signal(signal.SIGINT)
        _out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 4, err
    assert "interrupted" in err
    assert not list(tmp_path.glob("gameday-*"))


def test_ctrl_c_writes_a_partial_report_and_exits_4(tmp_path, monkeypatch):
    """Ctrl-C of a game day (issue 41): what finished is reported, the interrupted scenario says so, exit 4."""
    import chaos.engine as eng
    from healer.cli import main

    calls: list[str] = []

    def fake(sc, wd=None, **kw):
        calls.append(sc.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return eng.Result(sc, "passed", seed=sc.seed)

    monkeypatch.setattr(eng, "run", fake)
    rep = tmp_path / "rep"
    code = main(["gameday", "run", str(SCENARIO_DIR / "red-main.yaml"), str(SCENARIO_DIR / "zombie-ticket.yaml"),
                 str(SCENARIO_DIR / "stuck-agent.yaml"), "--quiet", "--report", str(rep), "--junit", str(tmp_path / "j.xml")])
    assert code == 4 and calls == ["red-main", "zombie-ticket"]  # the third never ran
    md = (rep / "report.md").read_text()
    assert "| red-main | simulated | PASS |" in md and "| zombie-ticket | simulated | ERROR |" in md
    assert "interrupted (Ctrl-C)" in md and "stuck-agent" not in md
    assert json.loads((rep / "journal.json").read_text())
    assert 'errors="1"' in (tmp_path / "j.xml").read_text()
