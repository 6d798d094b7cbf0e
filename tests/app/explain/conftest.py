from tests.app.artifacts.conftest import ensemble

__all__ = ["ensemble"]
