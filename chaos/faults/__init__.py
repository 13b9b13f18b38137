"""Faults: the registry (registry.py), each world's injectors (sim_world.py, real_world.py) and their undo."""


class NotApplied(Exception):
    """The fault found nothing to act on (no live dispatcher, a world that cannot do it): it did not happen, and a
    game day whose fault did not happen has not tested what it claims: the engines report it `skipped` and the game
    day `error` with this reason."""
