"""pytest fixtures of the engine tests.

The helpers live in enginekit: import them from there, not from conftest. Several test directories have a
conftest.py, and only one module can be called `conftest` when they run in one pytest session.
"""

# Re-exported so that pytest finds the fixtures here.
from enginekit import models, procs, trees  # noqa: F401 # pylint: disable=unused-import
