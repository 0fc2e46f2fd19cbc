"""pytest fixtures and hooks of the lab tests.

The helpers live in labkit: import them from there, not from conftest. Several test directories have a
conftest.py, and only one module can be called `conftest` when they run in one pytest session.
"""

# Re-exported so that pytest finds the fixture and the hook here.
from labkit import lab, pytest_collection_modifyitems, pytest_terminal_summary  # noqa: F401 # pylint: disable=unused-import
