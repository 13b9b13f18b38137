from healer.policy.load import load_policy, validate_text
from healer.policy.schema import ACTIONS, FINDINGS, Policy

__all__ = ["ACTIONS", "FINDINGS", "Policy", "load_policy", "validate_text"]
