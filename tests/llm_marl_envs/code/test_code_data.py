"""The built-in problems are checked by real sandbox runs: every reference solution passes
all its golden tests, and a near-miss mutant of it (data/code_mutants.json) fails some."""

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llm_marl_envs.code.problems import builtin_problems

MUTANTS = json.loads((Path(__file__).parent / "data" / "code_mutants.json").read_text())
PROBLEMS = builtin_problems()


#: Sandbox start-up is mostly waiting (namespaces, exec), not CPU: overlap more runs than cores.
WORKERS = 4
PROBLEM_THREADS = 6


def _mutant(problem):
    change = MUTANTS[problem.id]
    assert problem.reference_solution.count(change["replace"]) == 1, problem.id
    return problem.reference_solution.replace(change["replace"], change["with"])


@pytest.fixture(scope="module")
def reports(make_sandbox):
    """Every problem's reference and mutant against its golden tests, run a few problems at a time."""
    sb = make_sandbox(timeout_s=5, memory_mb=256)

    def check(problem):
        cases = problem.cases(problem.golden_tests)
        public = [t for t in problem.public_tests if t not in problem.golden_tests]
        return (sb.run_tests(problem.reference_solution, cases, max_workers=WORKERS),
                (sb.run_tests(problem.reference_solution, problem.cases(public), max_workers=WORKERS)
                 if public else None),
                sb.run_tests(_mutant(problem), cases, max_workers=WORKERS))

    with ThreadPoolExecutor(PROBLEM_THREADS) as pool:
        out = dict(zip([p.id for p in PROBLEMS], pool.map(check, PROBLEMS), strict=True))
    sb.close()
    return out


def test_every_problem_has_a_mutant():
    assert sorted(MUTANTS) == sorted(p.id for p in PROBLEMS)


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.id for p in PROBLEMS])
def test_reference_passes_all_golden_tests_and_mutant_fails_some(reports, problem):
    reference, public, mutant = reports[problem.id]
    failed = [(c.expected, c.actual, c.status, c.stderr[-300:]) for c in reference.cases if not c.passed]
    assert reference.total == len(problem.golden_tests) and reference.all_passed, failed
    # public tests are examples the reference passes too
    assert public is None or public.all_passed
    assert mutant.total == len(problem.golden_tests) and not mutant.all_passed, "the golden tests miss a near-miss bug"
