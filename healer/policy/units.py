"""The units a policy is written in: durations that carry a unit (`90s`, `30m`, `1h30m`; a bare number is refused,
issue 41) held as seconds, and counts that are never a boolean. One definition, used by every policy model."""

from __future__ import annotations

from typing import Annotated, cast

from pydantic import BeforeValidator, Field, PlainSerializer, ValidationInfo, WithJsonSchema

from healer import durations, sizes

WRITTEN = {"written": True}  # the validation context of what a person wrote (a file, --override): see _duration


def _unit_required(parse, needs_unit):
    """A validator for a quantity with a unit: what a file says must carry it (`90`, `2048` are refused, issue 41);
    python callers pass plain numbers (seconds, bytes)."""

    def check(v: object, info: ValidationInfo):
        if info.context and info.context.get("written"):
            why = needs_unit(v)
            if why:
                raise ValueError(why)
        return parse(v)

    return check


_duration = _unit_required(durations.parse, durations.needs_unit)
_size = _unit_required(sizes.parse, sizes.needs_unit)


Duration = Annotated[
    float,
    BeforeValidator(_duration),
    PlainSerializer(durations.format, return_type=str),
    WithJsonSchema({"type": "string", "pattern": durations.PATTERN, "examples": ["90s", "30m", "1h30m"]}),
]


Size = Annotated[
    int,
    BeforeValidator(_size),
    PlainSerializer(sizes.format, return_type=str),
    WithJsonSchema({"type": "string", "pattern": sizes.PATTERN, "examples": ["512MiB", "2GiB"]}),
]


def _not_bool(v: object) -> object:
    # pydantic's lax mode reads `true` as 1; in a policy that is always a typo
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got {str(v).lower()}")
    return v


PosInt = Annotated[int, Field(ge=1), BeforeValidator(_not_bool)]
NonNegInt = Annotated[int, Field(ge=0), BeforeValidator(_not_bool)]


def written(text: str) -> float:
    """A default duration as a file writes it (`"10m"`): the model parses it into the field's seconds (every model
    here validates its defaults, Strict.model_config), and the JSON schema shows it as written. Typed as what the
    field holds once parsed."""
    return cast(float, text)
