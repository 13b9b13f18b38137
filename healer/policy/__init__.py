"""The policy: schema (pydantic), loading with located errors, and a cache of validated policies.

Names are imported on first use (PEP 562), so `healer.policy.cache` can answer `healer loop run`
without importing pydantic and YAML when the policy was validated before: the schema is +173 ms of CPU on
top of the loop's 200 ms of imports (measured 2026-12-05, 15 paired starts on the loaded 2-core machine).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from healer.policy.load import load_policy, validate_text
    from healer.policy.schema import ACTIONS, FINDINGS, Policy

__all__ = ["ACTIONS", "FINDINGS", "Policy", "load_policy", "validate_text"]
_WHERE = {"ACTIONS": "schema", "FINDINGS": "schema", "Policy": "schema", "load_policy": "load", "validate_text": "load"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"healer.policy.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'healer.policy' has no attribute {name!r}")
