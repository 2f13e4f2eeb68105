"""The client tests run against the same in-process daemon as the shell tests."""

from tests.shell.conftest import home, paths, running  # noqa: F401
