"""Fixtures of the environment tests: one real sandbox shared by every test (``make_sandbox`` for a
test module that needs other limits)."""

import warnings

import pytest

import sandboxes


def _make_sandbox(memory_mb: int = 256) -> sandboxes.Sandbox:
    """bwrap when it works on this machine, else the rlimits-only local backend (still a real run)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            box = sandboxes.make("auto", timeout_s=10, memory_mb=memory_mb)
            if box.run("print(1)").stdout == "1\n":
                return box
        except Exception:  # the bwrap backend may be missing or broken here
            pass
        return sandboxes.make("local", timeout_s=10, memory_mb=memory_mb)


@pytest.fixture(scope="session")
def sandbox() -> sandboxes.Sandbox:
    box = _make_sandbox()
    yield box
    box.close()


@pytest.fixture(scope="session")
def make_sandbox():
    """The factory behind ``sandbox``: ``make_sandbox(memory_mb=...)``; the caller closes the box."""
    return _make_sandbox
