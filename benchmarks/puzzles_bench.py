"""Micro-benchmark of the pure puzzle logic (generation, solving, parsing).

Run: ``python3 benchmarks/puzzles_bench.py [--quick]``. Single process, single thread;
prints a Markdown table (median of repeated timings, deterministic seeds).
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from collections.abc import Callable

from llm_marl_envs.grid.moves import parse_moves
from llm_marl_envs.grid.planpath import puzzle as planpath
from llm_marl_envs.grid.sokoban import puzzle as sokoban
from llm_marl_envs.grid.sudoku import puzzle as sudoku


#: model text built to make a parser backtrack or loop (the tests assert the parsers' work is bounded)
NASTY_MOVES = ["<answer>" * 5000, "```" * 7000, " " * 20000 + "answer", "Answer:" + "U" * 20000,
               "answer" * 3000 + ":", "answer " + " " * 19000 + "is", "Answer:" * 2800,
               ("Answer: " + " " * 1000 + "\n") * 20]
NASTY_GRIDS = ["[[1]" + " " * 20000, "[[" * 10000, "1 " * 10000, "1\n" * 10000]


def per_call(fn: Callable[[int], object], n: int, repeats: int = 3) -> float:
    """Median over ``repeats`` of the mean seconds per call of ``fn(i)`` for i < n."""
    times = []
    for rep in range(repeats):
        t0 = time.perf_counter()
        for i in range(n):
            fn(rep * n + i)
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    args = ap.parse_args()
    k = 1 if args.quick else 4

    levels = [sokoban.generate(random.Random(s))[0] for s in range(50)]
    levels2 = [sokoban.generate(random.Random(s), 8, 8, 2, min_moves=8)[0] for s in range(10)]
    sud9 = [sudoku.generate(random.Random(s), size=9)[0] for s in range(10)]
    hard9 = sudoku.parse_puzzle_string(
        "8..........36......7..9.2...5...7.......457.....1...3...1....68..85...1..9....4..")
    grids = [planpath.generate(random.Random(s))[0] for s in range(50)]
    answer = "I will push the box.\n```python\nprint('x')\n```\nAnswer: U, R, R, D, L, L"

    rows: list[tuple[str, float]] = [
        ("Sokoban 6x6 1 box: generate (incl. optimal solve)",
         per_call(lambda i: sokoban.generate(random.Random(i)), 50 * k)),
        ("Sokoban 6x6 1 box: solve",
         per_call(lambda i: sokoban.solve(levels[i % 50]), 50 * k)),
        ("Sokoban 8x8 2 boxes: generate",
         per_call(lambda i: sokoban.generate(random.Random(i), 8, 8, 2, min_moves=8), 5 * k)),
        ("Sokoban 8x8 2 boxes: solve",
         per_call(lambda i: sokoban.solve(levels2[i % 10]), 10 * k)),
        ("Sokoban apply_move",
         per_call(lambda i: sokoban.apply_move(levels[i % 50], "UDLR"[i % 4]), 2000 * k)),
        ("Sudoku 4x4: generate (unique, minimal)",
         per_call(lambda i: sudoku.generate(random.Random(i)), 100 * k)),
        ("Sudoku 9x9: generate (unique, minimal)",
         per_call(lambda i: sudoku.generate(random.Random(i), size=9), 3 * k)),
        ("Sudoku 9x9: count_solutions(limit=2), generated",
         per_call(lambda i: sudoku.count_solutions(sud9[i % 10]), 20 * k)),
        ("Sudoku 9x9: count_solutions(limit=2), hard (Inkala)",
         per_call(lambda i: sudoku.count_solutions(hard9), 3 * k)),
        ("Sudoku 9x9: parse_grid of render_text",
         per_call(lambda i: sudoku.parse_grid(sudoku.render_text(sud9[i % 10]), 9), 100 * k)),
        ("Plan-path 10x10: generate",
         per_call(lambda i: planpath.generate(random.Random(i)), 100 * k)),
        ("Plan-path 10x10: shortest_path (uncached grid)",
         per_call(lambda i: (planpath.distances_from_goal.cache_clear(),
                             planpath.shortest_path(grids[i % 50])), 100 * k)),
        ("Plan-path 10x10: distance_to_goal (cached grid)",
         per_call(lambda i: planpath.distance_to_goal(grids[0], grids[0].start), 2000 * k)),
        ("parse_moves (mixed answer text)", per_call(lambda i: parse_moves(answer), 2000 * k)),
        ("parse_moves (20 kB of prose)", per_call(lambda i: parse_moves("word " * 4000), 20 * k)),
        ("parse_moves, all 8 adversarial texts of tests/.../test_puzzles_moves.py (goal < 1 s)",
         per_call(lambda i: [parse_moves(t) for t in NASTY_MOVES], k)),
        ("parse_grid 4 and 9, all 4 adversarial texts of tests/.../test_puzzles.py (goal < 2 s)",
         per_call(lambda i: [sudoku.parse_grid(t, s) for t in NASTY_GRIDS for s in (4, 9)], k)),
    ]
    print(f"Python {platform.python_version()} on {platform.machine()}, "
          f"{platform.processor() or 'cpu'}\n")
    print("| operation | time per call | calls/s |")
    print("|---|---:|---:|")
    for name, sec in rows:
        print(f"| {name} | {sec * 1e3:.3f} ms | {1 / sec:,.0f} |")


if __name__ == "__main__":
    main()
