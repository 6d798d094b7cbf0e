"""Fixtures every test package may use, registered once."""

pytest_plugins = ["tests.support.redis_server"]
