"""healer: a self-healing supervisor for fleets of autonomous coding-agent loops."""

__version__ = "0.1.0"
