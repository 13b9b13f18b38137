"""The pure rules of gates judged from what ran (healer/loop/gatecheck.py), one by one: what is a pytest gate, the
environment, the gate files' comparison (a pytest section, not the whole pyproject.toml), the tests due, the
report's verdict. The loop and fleet tests with hostile agents are test_gate_cheats.py."""

from __future__ import annotations

from healer.loop import gatecheck as gc

PY = "/usr/bin/python3"


def test_pytest_gates_are_recognised_behind_env_and_interpreter_options():
    assert gc.pytest_call(["pytest", "-q"]).module is False
    c = gc.pytest_call(["env", "A=1", "-u", "B", PY, "-X", "dev", "-B", "-m", "pytest", "tests"])
    assert c is not None and c.module and c.args == ("tests",)
    assert gc.pytest_call([PY, "-c", "import pytest"]) is None
    assert gc.pytest_call(["make", "test"]) is None and gc.pytest_call([PY, "tests/check.py"]) is None
    argv = gc.pytest_argv(c, tree="/t", config="/t/pyproject.toml", report="/r.xml", path_entries=["/t"])
    assert argv[:8] == ["env", "A=1", "-u", "B", PY, "-P", "-X", "dev"]
    assert "-c" in argv and "/t/pyproject.toml" in argv and "--junitxml=/r.xml" in argv and "--rootdir=/t" in argv


def test_the_policys_own_config_and_report_options_are_replaced():
    c = gc.pytest_call(["pytest", "-c", "evil.ini", "--junitxml=x.xml", "--rootdir", "/", "tests"])
    argv = gc.pytest_argv(c, tree="/t", config="/t/evil.ini", report="/r.xml", path_entries=[])
    assert "x.xml" not in " ".join(argv) and argv.count("-c") == 1 and "/" not in argv[1:-1]
    assert gc.policy_config(c.args) == "evil.ini"


def test_the_environment_loses_what_the_tree_could_steer():
    env = gc.neutral_env({"PATH": "/t/bin:.:/usr/bin::bin", "PYTHONPATH": "/t/src", "PYTEST_ADDOPTS": "--co",
                          "BASH_ENV": "/t/x", "HOME": "/h"}, "/t")
    assert env == {"PATH": "/usr/bin", "HOME": "/h", "PYTHONNOUSERSITE": "1"}


def test_named_files_and_makefiles():
    assert gc.named_files(["sh", "-e", "run_tests.sh", "-x"]) == ["sh", "run_tests.sh"]
    assert gc.named_files(["sh", "-c", "check"]) == ["sh"] and gc.named_files(["node", "-e", "1", "x.js"]) == ["node"]
    assert gc.named_files(["bash", "-x", "run_tests.sh", "out.txt"]) == ["bash", "run_tests.sh"]
    assert gc.named_files([PY, "-X", "dev", "tests/check.py", "attempt.txt"]) == [PY, "tests/check.py"]
    assert gc.named_files([PY, "-m", "mod", "x"]) == [PY]
    got = gc.named_files(["make", "-f", "ci.mk", "test", "V=1"])
    assert {"Makefile", "makefile", "GNUmakefile", "ci.mk"} <= set(got) and "test" not in got
    assert gc.named_files(["env", "X=1", "./t.sh", "data.txt"]) == ["t.sh"]


def test_only_the_pytest_section_of_a_shared_config_counts():
    base = {"pyproject.toml": b"[project]\nname='a'\n[tool.pytest.ini_options]\naddopts='-q'\n"}
    dep = {"pyproject.toml": b"[project]\nname='a'\ndependencies=['b']\n[tool.pytest.ini_options]\naddopts='-q'\n"}
    co = {"pyproject.toml": b"[project]\nname='a'\n[tool.pytest.ini_options]\naddopts='--co'\n"}
    assert gc.config_differences(base, dep) == []
    assert gc.config_differences(base, co) == ["pyproject.toml: its pytest section differs from the base's"]
    assert gc.config_differences({"setup.cfg": b"[metadata]\nname=a\n"},
                                 {"setup.cfg": b"[metadata]\nname=a\n[tool:pytest]\naddopts=--co\n"})
    # pytest.ini counts even empty (pytest takes it as the config), a conftest whole, a link is never read
    assert gc.config_differences({"pytest.ini": None}, {"pytest.ini": b""})
    assert gc.config_differences({"conftest.py": b"x=1\n"}, {"conftest.py": "a symbolic link"}) == [
        "conftest.py: a symbolic link where the base has a file"]
    assert gc.config_differences({"src/conftest.py": b"x"}, {"src/conftest.py": None}) == [
        "src/conftest.py: removed (the base has it)"]


def test_the_tests_due_are_read_from_the_protected_source():
    src = ("import pytest\n\ndef test_a():\n    pass\n\n@pytest.mark.skipif(True, reason='x')\ndef test_b():\n    pass\n\n"
           "class TestC:\n    def test_d(self):\n        pass\n\nclass TestNot:\n    def __init__(self):\n        pass\n"
           "    def test_e(self):\n        pass\n\nclass Case(unittest.TestCase):\n    def test_f(self):\n        pass\n"
           "\ndef helper():\n    pass\n")
    got = {e.nodeid: e.may_skip for e in gc.expected_tests("tests/test_x.py", src)}
    assert got == {"tests/test_x.py::test_a": False, "tests/test_x.py::test_b": True,
                   "tests/test_x.py::TestC::test_d": False, "tests/test_x.py::Case::test_f": False}
    assert gc.expected_tests("tests/bad.py", "def (") == []
    marked = "import pytest\nneeds_db = pytest.mark.skipif(True, reason='db')\n\n@needs_db\ndef test_q():\n    pass\n"
    assert gc.expected_tests("t/test_m.py", marked) == [gc.Expected("t/test_m.py::test_q", True)]
    due = [gc.Expected("tests/a/test_x.py::test_a"), gc.Expected("other/test_y.py::test_b")]
    assert gc.skipping_conftests(due, {"tests/conftest.py": "item.add_marker(pytest.mark.skip)"}) == [
        gc.Expected("tests/a/test_x.py::test_a", True), gc.Expected("other/test_y.py::test_b")]
    assert gc.test_files(["tests/test_x.py", "tests/helper.py", "tests/sub/y_test.py", "other/test_z.py"],
                         ["tests"], ["test_*.py", "*_test.py"]) == ["tests/sub/y_test.py", "tests/test_x.py"]
    assert gc.selected_roots([], "pyproject.toml", "[tool.pytest.ini_options]\ntestpaths=['spec']\n") == ["spec"]
    assert gc.narrowed(["-k", "fast"]) and gc.narrowed(["tests/a.py::t"]) and not gc.narrowed(["-q", "tests"])


def _report(*cases: str) -> bytes:
    return ("<testsuites><testsuite>" + "".join(cases) + "</testsuite></testsuites>").encode()


def test_the_verdict_is_the_reports():
    due = [gc.Expected("tests/test_x.py::test_a"), gc.Expected("tests/test_x.py::TestC::test_d", may_skip=True)]
    ok = '<testcase classname="tests.test_x" name="test_a"/>'
    missing = gc.judge(_report(ok), due, 0)  # test_d may be skipped, but it must be in the report
    assert missing.outcome == gc.FAIL and "TestC::test_d (a protected test) is not in the report" in missing.why
    skipped_d = '<testcase classname="tests.test_x.TestC" name="test_d"><skipped/></testcase>'
    assert gc.judge(_report(ok, skipped_d), due, 0).outcome == gc.PASS
    param = '<testcase classname="tests.test_x" name="test_a[1-2]"/>'
    assert gc.judge(_report(param, skipped_d), due, 0).outcome == gc.PASS
    skipped_a = '<testcase classname="tests.test_x" name="test_a"><skipped/></testcase>'
    assert "was skipped" in gc.judge(_report(skipped_a, skipped_d, '<testcase classname="o" name="t"/>'), due, 0).why
    assert gc.judge(None, due, 0).why.startswith("no test report")
    assert gc.judge(b"<testsuites", due, 0).why.startswith("test report not well formed")
    assert gc.judge(_report(), due, 0).why.startswith("no test passed")
    failed = '<testcase classname="tests.test_x" name="test_a"><failure/></testcase>'
    assert gc.judge(_report(failed), due, 0).outcome == gc.FAIL
    assert "exited 1" in gc.judge(_report(ok, skipped_d), due, 1).why
    assert gc.judge(_report('<testcase classname="o" name="t"/>'), due, 0, check_expected=False).outcome == gc.PASS
