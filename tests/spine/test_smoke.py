from tests.conftest import healer


def test_policy_show_default_validates(tmp_path):
    r = healer("policy", "show")
    assert r.returncode == 0, r.stderr
    p = tmp_path / "p.yaml"
    p.write_text(r.stdout)
    v = healer("policy", "validate", str(p))
    assert v.returncode == 0, v.stderr


def test_unknown_command_is_usage_error():
    r = healer("no-such-command")
    assert r.returncode == 64
    assert "Traceback" not in r.stderr
