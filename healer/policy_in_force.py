"""The policy in force for a fleet: the file given, else the fleet's healer.yaml, else the default, with the
runbooks it includes (`include_runbooks`) read and turned into rules. The CLI (healer/cli/common.py) and the game
days (chaos/) both load it so, through here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from healer.errors import InvalidInput


def read_texts(paths: Sequence[str | Path], base: str | Path | None = None) -> list[tuple[str, str]]:
    """(source, text) for every runbook under `paths` (folders: their *.md, sorted by name).

    Relative paths are taken from `base` (the fleet root). An unreadable path is one clear error (65).
    """
    from healer.policy.yamlpos import YamlProblem, read_capped  # lazy: pulls yaml: 13 ms every command would pay
    from healer.policy.yamlpos import line as yaml_line  # lazy: pulls yaml: the same 13 ms

    out: list[tuple[str, str]] = []
    for raw in paths:
        p = Path(raw)
        if not p.is_absolute() and base is not None:
            p = Path(base) / p
        if p.is_dir():
            files = sorted(f for f in p.glob("*.md") if f.is_file() and f.name.lower() != "readme.md")
        elif p.is_file():
            files = [p]
        else:
            raise InvalidInput(f"{raw}: no such runbook file or folder")
        for f in files:
            try:
                out.append((str(f), read_capped(f).decode("utf-8-sig")))  # its front matter goes to yamlpos.load_one
            except YamlProblem as yp:
                raise InvalidInput(yaml_line(str(f), yp.problem)) from None
            except UnicodeDecodeError:
                raise InvalidInput(f"{f}:1:1: (file): expected UTF-8 text, got undecodable bytes") from None
            except OSError as e:
                raise InvalidInput(f"{f}: cannot read: {e.strerror}") from None
    return out


def policy_with_runbooks(policy, root: str | Path):
    """The policy in force: `include_runbooks` read from `root` and turned into rules (InvalidInput on any problem)."""
    from healer.core.runbooks import rules_from_runbooks, with_rules  # lazy: pulls pydantic, networkx: 261 ms of `healer --help`

    if not policy.include_runbooks:
        return policy
    rules, problems = rules_from_runbooks(read_texts(list(policy.include_runbooks), root))
    if problems:
        raise InvalidInput(problems[0], problems)
    return with_rules(policy, rules)


def policy_for(root: Path, policy: Path | None):
    """The policy in force: the file given, else ROOT/healer.yaml, else the default;
    with `include_runbooks` (relative to the policy file's folder) turned into rules."""
    from healer.policy import load_policy  # lazy: pulls pydantic: 128 ms of `healer --help`

    path = policy if policy is not None else (root / "healer.yaml")
    if policy is None and not path.exists():
        return load_policy(None)
    return policy_with_runbooks(load_policy(path), path.resolve().parent)
