"""CLI: healer policy validate|show|schema|import."""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml

from healer import errors
from healer.cli.common import err_console, find_root, policy_with_runbooks

policy_app = typer.Typer(help="Validate, show and convert loop policies.", no_args_is_help=True)


@policy_app.command("validate")
def validate(files: list[Path] = typer.Argument(..., help="Policy files to check.")) -> None:
    """Exit 0 when every file is valid; 65 with one located line per problem otherwise."""
    from healer.policy import load_policy  # lazy: pulls pydantic: 118 ms of `healer --help`

    bad = 0
    for f in files:
        try:
            pol = load_policy(f)
            # `include_runbooks` is read from the policy's folder, as `plan` and `supervise` do in a fleet
            try:
                policy_with_runbooks(pol, f.parent)
            except errors.InvalidInput as e:
                raise errors.InvalidInput(str(e), [f"{f}: include_runbooks: {line}" for line in e.lines]) from None
            for line in policy_warnings(pol):
                err_console.print(f"{f}: warning: {line}", markup=False, highlight=False, soft_wrap=True)
            typer.echo(f"{f}: ok")
        except errors.InvalidInput as e:
            bad += 1
            for line in e.lines:
                err_console.print(line, markup=False, highlight=False, soft_wrap=True)
    if bad:
        raise typer.Exit(errors.INVALID_INPUT)


def policy_warnings(pol) -> list[str]:
    """Valid, but probably not what the operator meant."""
    out = []
    if not pol.fleet.merge_gates:
        out.append("fleet.merge_gates is empty: proposals are merged unchecked, so a ticket whose agent did "
                   "nothing becomes done; add a gate (e.g. the tests)")
    return out


@policy_app.command("show")
def show(
    file: Path = typer.Argument(None, help="Policy file (default: the fleet's healer.yaml, else the embedded default)."),
    as_json: bool = typer.Option(False, "--json", help="JSON instead of YAML."),
    effective: bool = typer.Option(False, "--effective", help="`rules:` as in force: the policy's own, then its "
                                                              "include_runbooks' rules, then the defaults for the rest."),
) -> None:
    """Print the effective policy, defaults filled in."""
    from healer.policy import load_policy  # lazy: pulls pydantic: 114 ms of `healer --help`

    if file is None:  # inside a fleet, the policy in force is its healer.yaml (a broken one is an error, not the default)
        root = find_root(None)
        if (root / ".healer").is_dir() and (root / "healer.yaml").is_file():
            file = root / "healer.yaml"
    pol = load_policy(file)
    if effective:
        from healer.core.rules import DEFAULT_RULES  # lazy: pulls the planner: 60 ms of `healer --help`

        # the runbooks read from the policy's folder, as `supervise` reads them (healer/cli/common.policy_for)
        pol = policy_with_runbooks(pol, file.resolve().parent if file is not None else Path.cwd())
        covered = {r.when for r in pol.rules if not r.labels}
        pol = pol.model_copy(update={"rules": [*pol.rules, *(r for r in DEFAULT_RULES if r.when not in covered)]})
    data = pol.model_dump(mode="json", by_alias=True)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        typer.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip())


@policy_app.command("schema")
def schema() -> None:
    """Print the policy JSON Schema (also committed as policies/schema.json)."""
    from healer.policy.schema import json_schema  # lazy: pulls pydantic: 118 ms of `healer --help`

    typer.echo(json.dumps(json_schema(), indent=2, sort_keys=True))


@policy_app.command("import")
def import_(
    kind: str = typer.Argument(..., help="Source format: demerzel."),
    file: Path = typer.Argument(..., help="The source policy file."),
) -> None:
    """Convert another project's loop policy into a healer policy (printed on stdout)."""
    if kind != "demerzel":
        raise errors.UsageError(f"unknown import format {kind!r}; known: demerzel")
    from healer.policy.demerzel import convert  # lazy: pulls pydantic: 125 ms of `healer --help`
    from healer.policy.yamlpos import YamlProblem, line, read_capped  # lazy: pulls yaml: 13 ms of `healer --help`

    try:
        raw = read_capped(file)
    except YamlProblem as yp:
        raise errors.InvalidInput(line(str(file), yp.problem)) from None
    except OSError as e:
        raise errors.InvalidInput(f"{file}: cannot read: {e.strerror}") from None
    typer.echo(convert(raw, str(file)), nl=False)


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")
