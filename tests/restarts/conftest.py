from tests.fleet.conftest import fleet_factory  # noqa: F401 - the real-fleet fixture, shared
