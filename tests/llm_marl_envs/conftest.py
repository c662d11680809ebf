"""Fixtures of the environment tests: one real, isolating sandbox shared by every test (the
``make_sandbox`` factory of tests/conftest.py for a test module that needs other limits). Where bwrap
cannot isolate, the tests error with the fix, unless ``LLM_MARL_TEST_SANDBOX=local`` opts into the
unisolated backend."""

import pytest


@pytest.fixture(scope="session")
def sandbox(make_sandbox):
    box = make_sandbox(timeout_s=10, memory_mb=256)
    yield box
    box.close()
