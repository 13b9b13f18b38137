"""No Python module in healer/ or chaos/ over 800 lines (issue 35).

A module that long holds several things a newcomer must find by reading it; split it into modules named for
what each holds (as healer/fleet/dispatch_*.py, healer/remedy/handlers/, healer/store/sql_*.py did).
"""

from __future__ import annotations

from pathlib import Path

from tests.spine.conftest import REPO

LIMIT = 800
PACKAGES = ("healer", "chaos")


def lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def too_long(root: Path, limit: int = LIMIT) -> list[str]:
    """One line per module over `limit` lines under root's packages: its path and its length, longest first."""
    found = [(lines(p), p.relative_to(root).as_posix()) for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]
    return [f"{path}: {n} lines (at most {limit})" for n, path in sorted(found, key=lambda x: (-x[0], x[1])) if n > limit]


def test_no_module_in_healer_or_chaos_is_over_800_lines():
    offenders = too_long(REPO)
    assert not offenders, "split these into modules named for what each holds:\n" + "\n".join(offenders)


def test_an_offender_is_named_with_its_length(tmp_path):
    (tmp_path / "healer" / "sub").mkdir(parents=True)
    (tmp_path / "chaos").mkdir()
    (tmp_path / "healer" / "sub" / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "healer" / "at_limit.py").write_text("x = 1\n" * LIMIT)
    (tmp_path / "chaos" / "longer.py").write_text("x = 1\n" * (LIMIT + 5))
    assert too_long(tmp_path) == ["chaos/longer.py: 805 lines (at most 800)", "healer/sub/long.py: 801 lines (at most 800)"]
