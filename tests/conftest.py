"""Test-wide settings: tests marked ``slow`` run only when asked for with ``-m slow``.

They compile numba code for a minute or more on first use (pynndescent's NNDescent), which
the default run, README's test command, leaves out; they show as skipped with the reason.

Hypothesis examples have no deadline: no test asserts a duration, and the default 200 ms
an example fails a property test on a busy machine (a first numba compile, other jobs on
the cores) that holds.
"""

import pytest
from hypothesis import settings

settings.register_profile("sklearn-micro", deadline=None)
settings.load_profile("sklearn-micro")


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="compiles for a minute or more on first use; "
                                   "run with -m slow")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
