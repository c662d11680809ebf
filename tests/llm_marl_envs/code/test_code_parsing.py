"""Extracting programs and tests from model text: the documented rules, bounds, and fuzz."""

import json
import warnings

import pytest
from hypothesis import given, settings, strategies as st

from llm_marl_envs.code.parsing import extract_program, parse_tests, syntax_ok
from llm_marl_envs.code.problems import CodeTest

F = "```"


@pytest.mark.parametrize("text, code", [
    (f"First try:\n{F}python\nprint(1)\n{F}\nBetter:\n{F}python\nprint(2)\n{F}\n", "print(2)\n"),
    (f"{F}python\nprint(1)\n{F}\n{F}\nprint(2)\n{F}", "print(1)\n"),       # tagged python beats untagged
    (f"{F}\nx = 1\n{F}", "x = 1\n"),
    (f"{F}py3\nprint(3)\n{F}", "print(3)\n"),                              # any other tag
    (f"Here it is\n{F}python\nx = input()\nprint(x)", "x = input()\nprint(x)"),  # cut off mid-block
    ("x = int(input())\nprint(x * 2)\n", "x = int(input())\nprint(x * 2)\n"),   # raw code
    ("My solution:\ndef f(a):\n    return a\n", "def f(a):\n    return a\n"),  # prose, then code
    ("The answer is 42.", None),
    ("", None),
    (f"{F}python\n{F}", None),
])
def test_extract_program(text, code):
    assert extract_program(text) == code


def test_syntax_ok_uses_ast_only():
    assert syntax_ok("print(1)")
    assert not syntax_ok("print(1")
    assert not syntax_ok("")
    assert not syntax_ok("x = 1\0")
    assert not syntax_ok("(" * 10000)  # too deep: no crash
    with warnings.catch_warnings():  # parser warnings (invalid escapes) neither leak nor flip the answer
        warnings.simplefilter("error")
        assert syntax_ok('x = "\\d"\nprint(x is 1)')
        assert parse_tests('Input: "\\d"\nOutput: 1', "call").ok


def test_stdio_tests_json_and_text_pairs():
    text = f'Tests:\n{F}json\n[{{"input": "1 2\\n", "output": "3\\n"}}, {{"input": 5, "output": ["a", "b"]}}]\n{F}'
    parsed = parse_tests(text, "stdio")
    assert parsed.format == "json" and parsed.tests == (CodeTest.stdio("1 2\n", "3\n"), CodeTest.stdio("5", "a\nb\n"))
    parsed = parse_tests("Input:\n1 2\nOutput:\n3\n\n**Input:** 5 5\n**Expected Output:** 10\n", "stdio")
    assert parsed.format == "text"
    assert parsed.tests == (CodeTest.stdio("1 2\n", "3"), CodeTest.stdio("5 5\n", "10"))
    parsed = parse_tests(f"Input:\n{F}\n4\n1 2 3 4\n{F}\nOutput:\n{F}\n10\n{F}\n", "stdio")
    assert parsed.tests == (CodeTest.stdio("4\n1 2 3 4\n", "10"),)


def test_call_tests_json_text_and_literals():
    parsed = parse_tests('[{"args": [[1, 2], 1], "expected": [2, 1]}, {"input": "[3]\\n0", "output": [3]},'
                         ' {"args": 7, "expected": true, "kwargs": {"k": 1}}]', "call")
    assert [(t.args, t.kwargs, t.expected) for t in parsed.tests] == [
        ([[1, 2], 1], {}, [2, 1]), ([[3], 0], {}, [3]), ([7], {"k": 1}, True)]
    parsed = parse_tests("Input: rotate([1, 2, 3], 1)\nOutput: [3, 1, 2]\nInput: [True, None], 'x'\nOutput: (1, 2)\n",
                         "call")
    assert [(t.args, t.expected) for t in parsed.tests] == [([[1, 2, 3], 1], [3, 1, 2]), ([[True, None], "x"], [1, 2])]
    # LeetCode's "name = value" inputs are keyword arguments, also across lines and after positionals
    parsed = parse_tests("Input: nums = [1, 2, 3], k = 1\nOutput: [3, 1, 2]\nInput: nums = [4]\nk = 0\nOutput: [4]\n"
                         "Input: [5], k=2\nOutput: [5]\n", "call")
    assert [(t.args, t.kwargs, t.expected) for t in parsed.tests] == [
        ([], {"nums": [1, 2, 3], "k": 1}, [3, 1, 2]), ([], {"nums": [4], "k": 0}, [4]), ([[5]], {"k": 2}, [5])]
    bad = parse_tests("Input: {1, 2}\nOutput: 3\nInput: x + 1\nOutput: 1\nInput: x = len('ab')\nOutput: 2\n", "call")
    assert not bad.ok and bad.dropped == 3 and len(bad.errors) == 3  # sets / expressions / calls are not values
    # a call-looking input is read as the argument list; nothing is evaluated
    assert parse_tests("Input: __import__('os')\nOutput: 1\n", "call").tests[0].args == ["os"]


@pytest.mark.parametrize("output, expected", [
    ("3", 3), ("-3", -3), ("3.25", 3.25), ("3.0", 3.0), ("3.", 3.0), ("1e5", 1e5), ("1_000", 1000),
    ("(1, 2)", [1, 2]), ("1, 2", [1, 2]), ("1,2", [1, 2]),
    # a value is read whole (JSON, else a Python literal) or not at all: never its leading digits
    ("3abc", None), ("12x", None), ("3/4", None), ("--3", None), ("3 apples", None), ("3-4", None),
    ("\u0663", None), ("\uff13", None),
    # digits grouped by thousands are refused, not the tuples Python reads (3,000 is (3, 0))
    ("3,000", None), ("1,234", None), ("-1,234.5", None), ("12,345,678", None),
])
def test_call_expected_value_is_read_whole(output, expected):
    parsed = parse_tests(f"Input: [1]\nOutput: {output}\n", "call")
    if expected is None:
        assert not parsed.ok and parsed.dropped == 1, parsed.tests
        assert ("thousands" in parsed.errors[0]) is ("," in output)
    else:
        assert [t.expected for t in parsed.tests] == [expected]
        assert type(parsed.tests[0].expected) is type(expected)


def test_bounds_on_number_and_size_of_tests():
    many = json.dumps([{"input": str(i), "output": str(i)} for i in range(50)])
    parsed = parse_tests(many, "stdio", max_tests=10)
    assert len(parsed.tests) == 10 and parsed.dropped == 40 and "first 10" in parsed.errors[-1]
    big = json.dumps([{"input": "x" * 5000, "output": "1"}, {"input": "1", "output": "1"}])
    parsed = parse_tests(big, "stdio", max_chars=4000)
    assert parsed.tests == (CodeTest.stdio("1", "1"),) and parsed.dropped == 1


@pytest.mark.parametrize("text", ["", "no tests here", "[1, 2, 3]", '{"input": null}', "[" * 100000,
                                  "Input: " + "[" * 5000 + "\nOutput: 1", "Input:\nOutput:", "\0\0\0"])
def test_garbage_gives_no_tests(text):
    for kind in ("stdio", "call"):
        assert not parse_tests(text, kind).ok
        assert parse_tests(text, kind).errors


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.sampled_from(["stdio", "call"]))
def test_fuzz_parsers_never_raise(text, kind):
    for wrapped in (text, f"{F}json\n{text}\n{F}", f"Input: {text}\nOutput: {text}", f"{F}python\n{text}"):
        code = extract_program(wrapped)
        assert code is None or isinstance(code, str)
        parsed = parse_tests(wrapped, kind)
        assert len(parsed.tests) <= 10
        for t in parsed.tests:  # every kept test is well-formed for its kind
            if kind == "call":
                assert isinstance(t.args, list)
            else:
                assert isinstance(t.input, str) and isinstance(t.output, str)
