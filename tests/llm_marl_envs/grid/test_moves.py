"""Tests for llm_marl_envs.grid.moves.parse_moves."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llm_marl_envs
from llm_marl_envs.grid.moves import MAX_INPUT_CHARS, MOVE_DELTAS, parse_moves


@pytest.mark.parametrize(
    "text, expected",
    [
        ("U R R D", "URRD"),
        ("U,R,R", "URR"),
        ("['U','R']", "UR"),
        ('["up", "down"]', "UD"),
        ("up, right, right", "URR"),
        ("Moves: UDLR", "UDLR"),
        ("moves = [L, L, D]", "LLD"),
        ("I think we push the box.\nAnswer: L L\n", "LL"),
        ("**Final Answer:** `D, D, R`", "DDR"),
        ("Answer:\n\nup then left", "UL"),
        ("### Solution: R -> R -> U", "RRU"),
        ("Plan: ↑ → →", "URR"),
        ("<answer>R R</answer>", "RR"),
        ("reasoning...\n```\nU\nR\nD\n```\nDone.", "URD"),
        ("```python\nprint('x')\n```\nU D", "UD"),
        ("first try: U U\nsecond line\nL R", "LR"),
        ("MOVES: north, east", "UR"),
        ("Answer: u r d", "URD"),
        ("So the final answer is: U R", "UR"),
        ("**Answer**: L", "L"),
        ("My plan: push it. Moves: D D", "DD"),
        ("answer = 'RRU'", "RRU"),
    ],
)
def test_parse_moves_formats(text: str, expected: str) -> None:
    assert parse_moves(text) == list(expected)


def test_later_answer_wins_over_earlier() -> None:
    text = "Answer: U U\nwait, that's wrong.\nAnswer: D D"
    assert parse_moves(text) == ["D", "D"]


def test_label_preferred_over_trailing_line() -> None:
    assert parse_moves("Answer: L\nR") == ["L"]


@pytest.mark.parametrize(
    "text",
    ["", "no idea", "I go dull", "Answer: I'm not sure", "The box moves right -> U R",
     "Moves: 1 2 3", "[]", "```\n```", "udlr", "Answer: up, sideways"],
)
def test_parse_moves_rejects(text: str) -> None:
    assert parse_moves(text) is None


def test_non_string_gives_none() -> None:
    assert parse_moves(None) is None  # type: ignore[arg-type]
    assert parse_moves(b"U R") is None  # type: ignore[arg-type]


def test_only_tail_is_read() -> None:
    text = "Answer: U\n" + "x" * (MAX_INPUT_CHARS + 10)
    assert parse_moves(text) is None
    assert parse_moves("x" * (MAX_INPUT_CHARS * 3) + "\nAnswer: R") == ["R"]


def test_move_deltas() -> None:
    assert MOVE_DELTAS == {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(max_size=400))
def test_never_raises_on_arbitrary_text(text: str) -> None:
    out = parse_moves(text)
    assert out is None or (out and all(m in MOVE_DELTAS for m in out))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(["U", "D", "L", "R", "up", "down", "left", "right"]),
                min_size=1, max_size=30),
       st.sampled_from([" ", ", ", ",", " -> ", "; "]),
       st.text(alphabet=st.characters(blacklist_characters="\n`<"), max_size=50))
def test_roundtrip_generated_answers(tokens: list[str], sep: str, preamble: str) -> None:
    canonical = [t[0].upper() for t in tokens]
    text = preamble + "\nAnswer: " + sep.join(tokens)
    assert parse_moves(text) == canonical


def test_adversarial_inputs_work_is_bounded(python_lines) -> None:
    """Only the last MAX_INPUT_CHARS are read: a longer text costs no more Python work, and that work is
    linear in the characters read. (Time, regex included: benchmarks/puzzles_bench.py.)"""
    nasty = ["<answer>" * 5000, "```" * 7000, " " * 20000 + "answer", "Answer:" + "U" * 20000,
             "answer" * 3000 + ":", "answer " + " " * 19000 + "is", "Answer:" * 2800,
             ("Answer: " + " " * 1000 + "\n") * 20]
    for text in nasty:
        parse_moves(text * 3)  # the same tail: fills any cache both counted calls then hit
        got, lines = python_lines(parse_moves, text * 2)
        assert python_lines(parse_moves, text * 10) == (got, lines)
        assert lines < 5 * MAX_INPUT_CHARS


@pytest.mark.parametrize("env_id", ["llm_marl/Sokoban-v0", "llm_marl/PlanPath-v0"])
@pytest.mark.parametrize("text, expected", [
    ("Answer: UDLR.", "UDLR"), ("Answer: up.", "U"), ("Answer: U-D-L-R", "UDLR"), ("Answer: U,D,L,R,", "UDLR"),
    ("Answer: RIGHT", "R"),
    # a move token is read only whole: trailing junk, counts, numbers or other scripts reject the segment
    ("Answer: UDLRx", None), ("Answer: U2", None), ("Answer: 2U", None), ("Answer: up3", None),
    ("Answer: up, right, 3", None), ("Answer: UDLR junk", None), ("Answer: URDL!!", None),
    ("Answer: UDLR (4 moves)", None), ("Answer: rightwards", None), ("Answer: udlr", None),
    ("Answer: 3.25", None), ("Answer: 12", None), ("Answer: 1e5", None), ("Answer: \u2190\u2192x", None),
    ("Answer: \uff35", None), ("Answer: UDLR\u0663", None), ("<answer>UDLR junk</answer>", None),
])
def test_moves_are_read_only_as_whole_tokens(env_id: str, text: str, expected: str | None) -> None:
    """Already exact before issue 40 (no form here was misread); kept as the grid tasks' adversarial test."""
    env = llm_marl_envs.make(env_id).unwrapped
    assert env.parse_answer(text) == (list(expected) if expected else None)
