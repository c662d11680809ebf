"""Every fenced code block of README.md and docs/*.md is a test case (issue 20: every documented example runs).

Each block is one case with the id ``<file>:L<line of its opening fence>``, e.g. ``docs/quickstart.md:L91``.
Fences are read as CommonMark reads them (``` or ~~~, three or more; a block ends at a fence of the same
character at least as long, with no info string), so a ```` fence can show ``` inside it.

What a block does, by its language:

* ``python``: executed by ``python3`` in a subprocess, cwd a fresh temporary directory that holds links
  ``configs``, ``scripts`` and ``benchmarks`` to the repository's (relative paths in the docs resolve, and what a
  block writes, ``runs/`` included, stays in the temporary directory), ``PYTHONPATH`` the repository root,
  ``HOME`` the temporary directory (Tune's ``~/ray_results``; ``LLM_MARL_CACHE`` keeps pointing at the real
  cache), ``RAY_ADDRESS`` empty. Tracebacks name the markdown file and line. Timeout 300 s; whatever the block
  started in its process group is killed when it ends.
* ``bash``, ``sh``, ``shell``: run by ``bash -euo pipefail`` in such a directory (timeout 120 s); ``console``: its
  ``$ `` lines are the commands, the rest is their output.
* ``yaml``: parsed with the run-config loader's YAML (``settings.load_yaml``); a mapping whose top-level keys are
  all run-config sections is also validated with ``settings.load_config(path, check_paths=False)``, the loader
  ``llm-marl train`` uses (model paths such as ``/models/...`` are not looked up).
* no language, ``text``: output (what a command prints, a prompt): counted, not executed.
* any other language fails until it gets a marker.

Markers: HTML comments right before the fence (blank lines and other markers may sit between), visible in the
markdown source and invisible on the rendered page. A block without a marker that fails is a failing test.

* ``<!-- doc-test: skip REASON [: why] -->``: not executed. REASON is one of
  ``docker`` (executed only when a Docker engine answers; pytest marker ``docker``),
  ``gpu`` (executed only where CUDA is available; marker ``gpu``),
  ``installs`` (it installs packages: never run by the tests), ``cluster`` (needs a multi-node Ray cluster).
* ``<!-- doc-test: covered-by tests/PATH.py::test_name [...] -->``: too long for this suite (``bash scripts/main.sh``
  trains for 3 minutes); the named tests run the same thing, and this case checks that each of them exists.
  With a ``skip`` on the same block the case checks the names, then reports the skip.
* ``<!-- doc-test: output -->``: a block with a language that is output, not a command.
* ``<!-- doc-test: requires MODULE -->``: executed only when ``MODULE`` can be imported (an optional package).
* ``<!-- doc-test: session NAME -->`` (python): the blocks of a page with the same session NAME run in one
  interpreter, in page order, each with the names of the ones before (a page that builds one example over several
  blocks). A session runs once, in one subprocess; a failure stops it and fails its later blocks too.
* ``<!-- doc-test: setup CODE -->`` (python; CODE may span lines): run just before the block, in its namespace,
  for the names a page leaves to the reader (``my_model``, a data file the example reads).
* ``<!-- doc-test: timeout N -->``: seconds for this block (python, shell).

Installs are never run, not even in a dry form (``pip install --dry-run`` still resolves against the package
index, and says nothing about this tree): such blocks are marked ``skip installs`` (or ``covered-by``), and an
unmarked shell block that would install (``pip install``, ``apt-get install``, ``scripts/setup.sh`` and the scripts
that call it) or start a Ray cluster of the machine's own (``ray start``) fails without being run.

Python blocks that import ``rllib_integration`` (torch, transformers, Ray: 20-40 s each here) are marked ``slow``;
the suite runs slow tests (``scripts/test.sh`` selects none out), so this only lets ``-m "not slow"`` leave them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PYTHON_TIMEOUT_S = 300.0
SHELL_TIMEOUT_S = 120.0
LINKED = ("configs", "scripts", "benchmarks")

SHELL = {"bash", "sh", "shell", "console"}
OUTPUT = {"", "text"}
KNOWN_LANGS = {"python", "yaml"} | SHELL | OUTPUT
SKIP_REASONS = {
    "docker": "needs a Docker engine",
    "gpu": "needs a CUDA GPU",
    "installs": "installs packages (the tests run on the installed tree)",
    "cluster": "needs a multi-node Ray cluster",
}
#: Commands a shell block must not run unmarked (installs; a Ray cluster of the machine's own): such a block fails
#: without running until it is marked (``skip installs``, ``skip cluster``, ``covered-by``).
NEVER_RUN = re.compile(r"\bpip3? install\b|-m pip install\b|\bapt(?:-get)? install\b|scripts/(?:setup|main|test)\.sh"
                       r"|\bray (?:start|stop)\b")
MARKER_KINDS = {"skip", "covered-by", "output", "requires", "session", "setup", "timeout"}


# ---------------------------------------------------------------------------------------------- collection
@dataclasses.dataclass
class Marker:
    kind: str
    arg: str
    line: int


@dataclasses.dataclass
class Block:
    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    closed: bool
    code_line: int  # 1-based line of the first content line
    markers: list[Marker] = dataclasses.field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.path}:L{self.line}"

    def marker(self, kind: str) -> Optional[Marker]:
        return next((m for m in self.markers if m.kind == kind), None)

    def all(self, kind: str) -> list[Marker]:
        return [m for m in self.markers if m.kind == kind]

    @property
    def executed(self) -> bool:
        """Run (python, shell) or parsed (yaml) by this suite, when its conditions hold."""
        if self.marker("output") or self.marker("covered-by") or self.lang in OUTPUT:
            return False
        skip = self.marker("skip")
        return skip is None or _reason(skip) in ("docker", "gpu")


def _reason(skip: Marker) -> str:
    """The REASON word of ``skip REASON[: why]``."""
    return (skip.arg.split() or [""])[0].rstrip(":")


_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_MARKER = re.compile(r"<!--\s*doc-test:\s*(.*?)\s*-->", re.DOTALL)


def parse_blocks(rel: str, text: str) -> tuple[list[Block], list[str]]:
    """The fenced blocks of a markdown page with their markers, and the problems found (stray markers...)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    fenced: set[int] = set()  # 0-based lines inside fences (markers there are code, not markers)
    i = 0
    while i < len(lines):
        if re.match(r"^ {0,3}<!--", lines[i]):  # an HTML comment (a doc-test setup may hold ``` lines): not a fence
            while i < len(lines) and "-->" not in lines[i]:
                i += 1
            i += 1
            continue
        m = _OPEN.match(lines[i])
        if not m or (m.group(2)[0] == "`" and "`" in m.group(3)):
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        closer = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not closer.match(lines[j]):
            j += 1
        body = [ln[min(indent, len(ln) - len(ln.lstrip(" "))):] for ln in lines[i + 1:j]]
        blocks.append(Block(rel, i + 1, (info.split() or [""])[0].lower(), "\n".join(body) + "\n" if body else "",
                            closed=j < len(lines), code_line=i + 2))
        fenced.update(range(i, j + 1))
        i = j + 1
    problems: list[str] = []
    starts = {b.line - 1: b for b in blocks}
    for m in _MARKER.finditer(text):
        first = text.count("\n", 0, m.start())
        last = text.count("\n", 0, m.end())
        if first in fenced:
            continue
        words = m.group(1).split(None, 1)
        kind, arg = (words[0] if words else ""), (words[1] if len(words) > 1 else "")
        k = last + 1  # the marker belongs to the next fence, across blank lines and other markers
        while k < len(lines) and k not in starts:
            if lines[k].strip() and not _MARKER.fullmatch(lines[k].strip()) and not _inside_marker(text, lines, k):
                break
            k += 1
        if k not in starts:
            problems.append(f"{rel}:L{first + 1}: doc-test marker {m.group(0)!r} is not right before a fence")
            continue
        if kind not in MARKER_KINDS:
            problems.append(f"{rel}:L{first + 1}: unknown doc-test marker {kind!r} (known: {sorted(MARKER_KINDS)})")
            continue
        starts[k].markers.append(Marker(kind, arg, first + 1))
    return blocks, problems


def _inside_marker(text: str, lines: list[str], k: int) -> bool:
    """Whether line ``k`` is part of a (multi-line) doc-test marker comment."""
    offset = sum(len(ln) + 1 for ln in lines[:k])
    return any(m.start() <= offset <= m.end() for m in _MARKER.finditer(text))


def collect() -> tuple[list[Block], list[str]]:
    blocks: list[Block] = []
    problems: list[str] = []
    for path in DOC_FILES:
        b, p = parse_blocks(path.relative_to(REPO).as_posix(), path.read_text())
        blocks += b
        problems += p
    return blocks, problems


BLOCKS, PROBLEMS = collect()


def chains(blocks: list[Block]) -> dict[str, list[Block]]:
    """Executed python blocks grouped into the interpreters they run in: one per ``session`` of a page, else one each.
    A chain's id is its first block's."""
    out: dict[str, list[Block]] = {}
    first: dict[tuple[str, str], str] = {}  # (page, session name) -> chain id
    for b in blocks:
        if b.lang != "python" or not b.executed:
            continue
        session = b.marker("session")
        key = (b.path, session.arg.strip()) if session else None
        if key is not None and key in first:
            out[first[key]].append(b)
        else:
            if key is not None:
                first[key] = b.id
            out[b.id] = [b]
    return out


CHAINS = chains(BLOCKS)
CHAIN_OF = {b.id: cid for cid, bs in CHAINS.items() for b in bs}


# ---------------------------------------------------------------------------------------------- running
def _workdir(tmp_path: Path) -> Path:
    for name in LINKED:
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


def _env(workdir: Path, *, home: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["RAY_ADDRESS"] = ""
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTEST_CURRENT_TEST", None)  # a doc example runs as a user's script, not under pytest
    if home:
        env["LLM_MARL_CACHE"] = os.environ.get("LLM_MARL_CACHE") or str(Path("~/.cache/llm-marl").expanduser())
        env["HOME"] = str(workdir)
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[Optional[int], str]:
    """Run ``cmd`` in its own session; on timeout kill the whole process group. Returns (rc or None, output)."""
    log = cwd / f".doc-test-{time.monotonic_ns()}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            rc: Optional[int] = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # what the block started and left behind (its session)
            except ProcessLookupError:
                pass
            proc.wait()
    return rc, log.read_text(errors="replace")


def _section(output: str, block_id: str) -> str:
    """What one block of a chain printed (the runner writes a header line before each)."""
    parts = re.split(r"^----- doc-test: (\S+) -----$", output, flags=re.MULTILINE)
    return next((parts[i + 1] for i in range(1, len(parts) - 1, 2) if parts[i] == block_id), output)


def _tail(text: str, n: int = 6000) -> str:
    return text if len(text) <= n else "...\n" + text[-n:]


#: Runs a chain of python blocks in one interpreter: argv[1] a JSON list of blocks, each a list of
#: (source, filename, first line) parts; one status line per block to argv[2].
RUNNER = r"""
import json, sys, time, traceback
blocks = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__", "__builtins__": __builtins__}
with open(sys.argv[2], "a") as status:
    for block in blocks:
        print(f"----- doc-test: {block['id']} -----", flush=True)
        t0 = time.perf_counter()
        try:
            for source, filename, line in block["parts"]:
                exec(compile("\n" * (line - 1) + source, filename, "exec"), ns)
        except BaseException:
            status.write(json.dumps({"id": block["id"], "ok": False, "error": traceback.format_exc(),
                                     "seconds": time.perf_counter() - t0}) + "\n")
            status.flush()
            sys.stdout.flush(); sys.stderr.flush()
            break
        status.write(json.dumps({"id": block["id"], "ok": True, "seconds": time.perf_counter() - t0}) + "\n")
        status.flush()
"""

_chain_results: dict[str, dict[str, Any]] = {}


def _timeout(b: Block, default: float) -> float:
    m = b.marker("timeout")
    return float(m.arg) if m else default


def run_chain(cid: str, tmp_path: Path) -> dict[str, Any]:
    if cid in _chain_results:
        return _chain_results[cid]
    blocks = CHAINS[cid]
    workdir = _workdir(tmp_path)
    payload = []
    for b in blocks:
        parts = [(textwrap.dedent(m.arg), f"{b.path} (doc-test setup)", m.line) for m in b.all("setup")]
        parts.append((b.code, b.path, b.code_line))
        payload.append({"id": b.id, "parts": parts})
    (workdir / ".doc-test-blocks.json").write_text(json.dumps(payload))
    (workdir / ".doc-test-runner.py").write_text(RUNNER)
    status = workdir / ".doc-test-status.jsonl"
    timeout = sum(_timeout(b, PYTHON_TIMEOUT_S) for b in blocks)
    t0 = time.perf_counter()
    rc, output = _run([sys.executable, str(workdir / ".doc-test-runner.py"), str(workdir / ".doc-test-blocks.json"),
                       str(status)], workdir, _env(workdir, home=True), timeout)
    seen = [json.loads(ln) for ln in status.read_text().splitlines()] if status.exists() else []
    result = {"rc": rc, "output": output, "status": {s["id"]: s for s in seen}, "seconds": time.perf_counter() - t0,
              "timeout": timeout}
    _chain_results[cid] = result
    return result


def _python_case(b: Block, tmp_path: Path) -> None:
    cid = CHAIN_OF[b.id]
    res = run_chain(cid, tmp_path)
    st = res["status"].get(b.id)
    if st is not None and st["ok"] and (res["rc"] == 0 or b is not CHAINS[cid][-1]):
        print(_tail(_section(res["output"], b.id)))  # shown with -rP / -s
        return
    chain = [x.id for x in CHAINS[cid]]
    earlier = [x for x in chain[:chain.index(b.id)] if not res["status"].get(x, {}).get("ok")]
    if earlier:
        pytest.fail(f"{b.id}: an earlier block of its chain failed: {earlier[0]}", pytrace=False)
    if st is not None and not st["ok"]:
        pytest.fail(f"{b.id} raised:\n{st['error']}\noutput:\n{_tail(res['output'])}", pytrace=False)
    why = "timed out" if res["rc"] is None else f"exited with status {res['rc']}"
    pytest.fail(f"{b.id}: the interpreter {why} after {res['seconds']:.0f}s (limit {res['timeout']:.0f}s)\n"
                f"output:\n{_tail(res['output'])}", pytrace=False)


def shell_script(b: Block) -> str:
    if b.lang != "console":
        return b.code
    cmds: list[str] = []
    for ln in b.code.splitlines():
        if ln.startswith("$ "):
            cmds.append(ln[2:])
        elif cmds and cmds[-1].endswith("\\"):
            cmds.append(ln)
    return "\n".join(cmds) + "\n"


def _shell_case(b: Block, tmp_path: Path) -> None:
    bad = NEVER_RUN.search(shell_script(b))
    if bad:
        pytest.fail(f"{b.id}: not run: `{bad.group(0)}` installs packages or starts a Ray cluster; mark the block "
                    "<!-- doc-test: skip installs --> / <!-- doc-test: skip cluster --> / covered-by", pytrace=False)
    workdir = _workdir(tmp_path)
    script = "set -euo pipefail\n" + shell_script(b)
    rc, output = _run(["bash", "-c", script], workdir, _env(workdir, home=False), _timeout(b, SHELL_TIMEOUT_S))
    if rc != 0:
        why = "timed out" if rc is None else f"exited with status {rc}"
        pytest.fail(f"{b.id}: `bash -euo pipefail` {why}\nscript:\n{b.code}\noutput:\n{_tail(output)}",
                    pytrace=False)


def _yaml_case(b: Block, tmp_path: Path) -> None:
    from rllib_integration import settings

    data = settings.load_yaml(b.code)
    assert data is not None, f"{b.id}: empty YAML"
    sections = set(settings.RunSettings.model_fields)
    if isinstance(data, dict) and data and set(data) <= sections:
        cfg = tmp_path / "config.yaml"
        cfg.write_text(b.code)
        try:
            settings.load_config(str(cfg), check_paths=False)
        except settings.ConfigError as e:
            pytest.fail(f"{b.id}: not a valid run config: {e}", pytrace=False)


def _covered_by(b: Block) -> list[str]:
    missing = []
    for m in b.all("covered-by"):
        for ref in m.arg.split():
            path, sep, name = ref.partition("::")
            file = REPO / path
            if not sep or not path.startswith("tests/") or not file.is_file():
                missing.append(f"{ref} (no such test file)")
            elif not re.search(rf"^(?:async )?def {re.escape(name)}\(", file.read_text(), re.MULTILINE):
                missing.append(f"{ref} (no test {name} in {path})")
    return missing


def _docker_answers() -> Optional[str]:
    try:
        from sandboxes import _docker

        _docker.check_available()
    except Exception as e:  # SandboxUnavailable, or no docker package
        return str(e)
    return None


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def _gate(b: Block) -> None:
    """Skip when a condition of the block does not hold here."""
    for m in b.all("requires"):
        for mod in m.arg.split():
            try:
                found = importlib.util.find_spec(mod) is not None
            except ModuleNotFoundError:
                found = False
            if not found:
                pytest.skip(f"requires {mod} (not installed)")
    skip = b.marker("skip")
    if skip is None:
        return
    reason = _reason(skip)
    if reason == "docker":
        why = _docker_answers()
        if why:
            pytest.skip(f"skip docker: no Docker engine answers ({why.splitlines()[0][:200]})")
    elif reason == "gpu":
        if not _cuda():
            pytest.skip("skip gpu: no CUDA GPU here")
    else:
        pytest.skip(f"skip {skip.arg}")


# ---------------------------------------------------------------------------------------------- the cases
def _params() -> list[Any]:
    out = []
    for b in BLOCKS:
        marks: list[Any] = []
        skip = b.marker("skip")
        reason = _reason(skip) if skip else ""
        if reason in ("docker", "gpu"):
            marks.append(getattr(pytest.mark, reason))
        if b.lang == "python" and b.executed and any("rllib_integration" in x.code for x in CHAINS[CHAIN_OF[b.id]]):
            marks.append(pytest.mark.slow)
        out.append(pytest.param(b, id=b.id, marks=marks))
    return out


@pytest.mark.parametrize("block", _params())
def test_doc_block(block: Block, tmp_path: Path) -> None:
    b = block
    assert b.closed, f"{b.id}: the fence is never closed (the rest of the file renders as code)"
    for kind in ("session", "setup"):
        assert not b.marker(kind) or b.lang == "python", f"{b.id}: `{kind}` applies to python blocks only"
    skip = b.marker("skip")
    if skip is not None:
        reason = _reason(skip)
        assert reason in SKIP_REASONS, f"{b.id}: skip reason {reason!r} is not one of {sorted(SKIP_REASONS)}"
    session = b.marker("session")
    assert session is None or len(session.arg.split()) == 1, f"{b.id}: `session NAME` takes one name"
    if b.marker("covered-by"):
        missing = _covered_by(b)
        assert not missing, f"{b.id}: covered-by names tests that do not exist: {missing}"
        if skip is not None:
            pytest.skip(f"skip {skip.arg} (covered by {' '.join(m.arg for m in b.all('covered-by'))})")
        return
    if b.marker("output") or b.lang in OUTPUT:
        assert b.code.strip(), f"{b.id}: empty block"
        return
    assert b.lang in KNOWN_LANGS, (f"{b.id}: ```{b.lang} blocks are not run by the doc tests; "
                                   "mark it <!-- doc-test: output --> or with a reason")
    _gate(b)
    if b.lang == "python":
        _python_case(b, tmp_path)
    elif b.lang in SHELL:
        _shell_case(b, tmp_path)
    else:
        _yaml_case(b, tmp_path)


def test_markers_are_attached_and_known() -> None:
    assert PROBLEMS == []


def test_every_fence_is_collected() -> None:
    """The inventory: every page is read, every block is one case, and the counts per kind add up."""
    assert {b.path for b in BLOCKS} >= {"README.md", "docs/quickstart.md", "docs/adding_a_task.md"}
    counts: dict[str, int] = {}
    for b in BLOCKS:
        if b.marker("covered-by"):
            kind = "covered-by"
        elif b.marker("output") or b.lang in OUTPUT:
            kind = "output"
        elif b.marker("skip") and not b.executed:
            kind = "skipped"
        else:
            kind = {"python": "run", "yaml": "parsed"}.get(b.lang, "run" if b.lang in SHELL else b.lang)
        counts[kind] = counts.get(kind, 0) + 1
    print("doc blocks:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), f"(total {len(BLOCKS)})")
    assert sum(counts.values()) == len(BLOCKS) == len({b.id for b in BLOCKS})


def test_parser_follows_commonmark_fences() -> None:
    """A ```` fence holds ``` lines; ```text inside a ``` block does not close it, the next ``` does."""
    text = ("<!-- doc-test: output -->\n````\n```python\nx = 1\n```\n````\n\n"
            "~~~bash\necho hi\n~~~\n\n"
            "<!-- doc-test: setup\n    a = 1\n```\n-->\n\n<!-- doc-test: session demo -->\n"
            "```python\n\"\"\"\n```text\ninside\n```\n\"\"\"\n```\n")
    blocks, problems = parse_blocks("page.md", text)
    assert problems == []
    assert [(b.line, b.lang, b.closed) for b in blocks] == [(2, "", True), (8, "bash", True), (18, "python", True),
                                                             (24, "", False)]
    assert blocks[0].code == "```python\nx = 1\n```\n" and blocks[0].marker("output")
    assert blocks[1].code == "echo hi\n" and blocks[2].code == '"""\n```text\ninside\n'
    assert [m.kind for m in blocks[2].markers] == ["setup", "session"]
    setup = blocks[2].marker("setup")
    assert setup is not None and textwrap.dedent(setup.arg).strip() == "a = 1\n```"
    assert parse_blocks("p.md", "<!-- doc-test: output -->\ntext\n```\nx\n```\n")[1] != []


def test_install_and_cluster_commands_never_run_unmarked() -> None:
    for cmd in ("pip install -e '.[train]'", "python3 -m pip install vllm", "apt-get install -y bubblewrap",
                "bash scripts/setup.sh", "bash scripts/main.sh", "ray start --head --port=6379"):
        assert NEVER_RUN.search(cmd), cmd
    for cmd in ("llm-marl train configs/base.yaml", "python3 -m sandboxes.images build", "echo pip"):
        assert not NEVER_RUN.search(cmd), cmd
    b = Block("p.md", 1, "bash", "x\n", True, 2, [Marker("covered-by", "tests/test_doc_blocks.py::test_nope "
                                                                    "tests/nowhere.py::test_x", 1)])
    assert [m.split()[0] for m in _covered_by(b)] == ["tests/test_doc_blocks.py::test_nope", "tests/nowhere.py::test_x"]
