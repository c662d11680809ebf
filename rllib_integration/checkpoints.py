"""Checkpoints that are whole or absent, and that load without running code.

An ATGRPO checkpoint is a directory of data only:

- ``state.json``: the algorithm's state (:meth:`~.algorithm.ATGRPO.get_state`: iteration, totals, the
  learner group's optimizer and metrics state) as JSON, each array replaced by a reference into
- ``tensors.safetensors``: every array of that state (weights, optimizer moments), read with
  safetensors (a JSON header and raw bytes: nothing in it is executed);
- ``algorithm_config.json``: the settings the algorithm is rebuilt from (the ``ATGRPOConfig`` attributes
  that differ from a fresh config, plain values only; the policy mapping as a table);
- ``config.yaml``: the run config of ``llm-marl train`` (CLI runs only; for the reader's information);
- ``COMPLETE.json``: the completion marker, written last: format, iteration, and each file's size and
  sha256.

:func:`write_checkpoint` writes all of it under a temporary name (``.NAME.partial-PID``), fsyncs each file
and the folder, writes the marker, and renames the folder to its name only then: a stop at any moment
leaves the previous checkpoint or the new one, never a half-written one under the name. :func:`read_checkpoint`
requires the marker and checks every file's size (a truncated or empty file is refused at once, naming it)
and sha256 before it parses anything; nothing in a checkpoint is unpickled. :func:`newest_checkpoint` finds
the newest complete checkpoint of a run directory (one without a marker is skipped) and :func:`prune`
keeps the newest N.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np

from .settings import OLD_ATTRIBUTES, UsageError

__all__ = ["CheckpointError", "Checkpoint", "FORMAT", "MARKER", "write_checkpoint", "read_checkpoint",
           "find_checkpoint", "is_checkpoint", "checkpoints_of", "newest_checkpoint", "prune", "encode_state",
           "decode_state", "fsync_write", "check_module_paths"]

#: the format named in every marker; a reader refuses any other
FORMAT = "llm-marl-checkpoint/1"
MARKER = "COMPLETE.json"
STATE = "state.json"
TENSORS = "tensors.safetensors"
ALGORITHM_CONFIG = "algorithm_config.json"
RUN_CONFIG = "config.yaml"
#: the periodic checkpoints of a run directory (``checkpoint_NNNN``) and its final one (``checkpoint``)
_NAME = re.compile(r"checkpoint(?:_(\d+))?")
_ARRAY, _ITEMS, _TUPLE = "__array__", "__items__", "__tuple__"


class CheckpointError(UsageError):
    """A checkpoint that is incomplete, damaged or not of this format; the message names the file and why."""


@dataclasses.dataclass
class Checkpoint:
    """A checkpoint read back: its folder, marker, algorithm state and recorded config."""

    path: Path
    marker: dict[str, Any]
    state: dict[str, Any]
    config: dict[str, Any]

    @property
    def iteration(self) -> int:
        return int(self.marker["iteration"])


# ------------------------------------------------------------------------------ state <-> JSON + arrays
def encode_state(state: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """A nested state (dicts, lists, tuples, numbers, strings, numpy arrays and scalars, torch tensors) ->
    a JSON-able tree whose arrays are ``{"__array__": key}`` references, and the arrays by key. Anything
    else raises TypeError naming where it is (it could not be read back without code)."""
    arrays: dict[str, np.ndarray] = {}

    def enc(x: Any, where: str) -> Any:
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, (int, float)) and type(x) in (int, float):
            return x
        if isinstance(x, np.generic) and x.dtype.kind in "biuf":
            return x.item()
        if type(x).__module__.startswith("torch") and hasattr(x, "detach"):
            from .core.tensor_codec import encode

            return enc(encode(x), where)
        if isinstance(x, np.ndarray):
            if x.dtype.kind not in "biuf":
                raise TypeError(f"checkpoint state {where}: array of dtype {x.dtype} (only numbers are written)")
            key = str(len(arrays))
            arrays[key] = np.ascontiguousarray(x)
            return {_ARRAY: key}
        if isinstance(x, Mapping):
            if all(isinstance(k, str) for k in x) and not ({_ARRAY, _ITEMS, _TUPLE} & set(x)):
                return {k: enc(v, f"{where}/{k}") for k, v in x.items()}
            return {_ITEMS: [[enc(k, f"{where}/<key>"), enc(v, f"{where}/{k}")] for k, v in x.items()]}
        if isinstance(x, tuple):
            return {_TUPLE: [enc(v, f"{where}[{i}]") for i, v in enumerate(x)]}
        if isinstance(x, list):
            return [enc(v, f"{where}[{i}]") for i, v in enumerate(x)]
        raise TypeError(f"checkpoint state {where}: a {type(x).__module__}.{type(x).__qualname__} cannot be written "
                        "as data")

    return enc(state, ""), arrays


def decode_state(tree: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """Inverse of :func:`encode_state`."""
    if isinstance(tree, list):
        return [decode_state(v, arrays) for v in tree]
    if isinstance(tree, dict):
        if _ARRAY in tree:
            return arrays[str(tree[_ARRAY])]
        if _TUPLE in tree:
            return tuple(decode_state(v, arrays) for v in tree[_TUPLE])
        if _ITEMS in tree:
            return {_hashable(decode_state(k, arrays)): decode_state(v, arrays) for k, v in tree[_ITEMS]}
        return {k: decode_state(v, arrays) for k, v in tree.items()}
    return tree


def _hashable(k: Any) -> Any:
    return tuple(_hashable(v) for v in k) if isinstance(k, (list, tuple)) else k


# ------------------------------------------------------------------------------ writing
def fsync_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync it."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_checkpoint(dest: str | os.PathLike, state: Mapping[str, Any], *, config: Mapping[str, Any],
                     iteration: int, run_config: Optional[Mapping[str, Any]] = None) -> Path:
    """Write a checkpoint to ``dest`` whole or not at all (see the module docstring); returns ``dest``.

    ``dest`` that exists is replaced only once the new checkpoint is complete, except a folder that is not a
    checkpoint and not empty (Tune hands ``save_checkpoint`` such a folder): there the files are written in
    place, the marker last (after removing an old one), so a reader never takes a partial write for whole."""
    from safetensors.numpy import save_file

    dest = Path(dest)
    tree, arrays = encode_state(dict(state))  # first: state that is not data fails before anything is written
    dest.parent.mkdir(parents=True, exist_ok=True)
    in_place = dest.is_dir() and not is_checkpoint(dest) and any(dest.iterdir())
    tmp = dest if in_place else dest.parent / f".{dest.name}.partial-{os.getpid()}"
    if in_place:
        (dest / MARKER).unlink(missing_ok=True)
    elif tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(exist_ok=True)
    try:
        save_file(arrays, str(tmp / TENSORS))
    except Exception as e:  # safetensors reports an I/O failure (a full disk) as its own error: give the OSError
        m = re.search(r"os error (\d+)", str(e))
        if m is None:
            raise
        errno_ = int(m.group(1))
        raise OSError(errno_, f"{os.strerror(errno_)}: writing {tmp / TENSORS}") from e
    with open(tmp / TENSORS, "rb+") as f:
        os.fsync(f.fileno())
    fsync_write(tmp / STATE, json.dumps(tree).encode())
    fsync_write(tmp / ALGORITHM_CONFIG, json.dumps(config, indent=1, sort_keys=True).encode())
    files = [TENSORS, STATE, ALGORITHM_CONFIG]
    if run_config is not None:
        import yaml

        fsync_write(tmp / RUN_CONFIG, yaml.safe_dump(dict(run_config), sort_keys=False).encode())
        files.append(RUN_CONFIG)
    marker = {"format": FORMAT, "iteration": int(iteration),
              "files": {n: {"size": (tmp / n).stat().st_size, "sha256": _sha256(tmp / n)} for n in files}}
    fsync_write(tmp / MARKER, json.dumps(marker, indent=1).encode())
    _fsync_dir(tmp)
    if in_place:
        return dest
    old = dest.parent / f".{dest.name}.old-{os.getpid()}"
    if dest.exists() or dest.is_symlink():
        if old.exists():
            shutil.rmtree(old)
        os.replace(dest, old)
    os.replace(tmp, dest)
    _fsync_dir(dest.parent)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)
    return dest


# ------------------------------------------------------------------------------ reading
def is_checkpoint(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a completion marker (it may still be damaged: :func:`read_checkpoint` checks)."""
    return (Path(path) / MARKER).is_file()


def _marker(path: Path) -> dict[str, Any]:
    m = path / MARKER
    if not m.is_file():
        why = ("written by an older llm-marl or by RLlib's own save_to_path, whose pickle files are not loaded "
               "(they could run code)") if (path / "class_and_ctor_args.pkl").exists() else \
            "the write did not finish (the run stopped while it was being written)"
        raise CheckpointError(f"{str(path)!r} is not a complete checkpoint: {MARKER} is missing ({why})")
    try:
        marker = json.loads(m.read_bytes())
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"damaged checkpoint: {str(m)!r} is not valid JSON ({e})") from None
    if not isinstance(marker, dict) or marker.get("format") != FORMAT:
        got = marker.get("format") if isinstance(marker, dict) else type(marker).__name__
        raise CheckpointError(f"{str(m)!r}: not an llm-marl checkpoint marker (format {got!r}, expected {FORMAT!r})")
    files = marker.get("files")
    if (not isinstance(files, dict) or not isinstance(marker.get("iteration"), int)
            or not {STATE, TENSORS, ALGORITHM_CONFIG} <= set(files)):
        raise CheckpointError(f"damaged checkpoint: {str(m)!r} lacks its iteration or the list of files")
    for name, info in files.items():
        if not isinstance(name, str) or "/" in name or name.startswith(".") or not isinstance(info, dict):
            raise CheckpointError(f"damaged checkpoint: {str(m)!r} lists {name!r}, not a file of a checkpoint")
    return marker


def verify(path: str | os.PathLike, *, hashes: bool = True) -> dict[str, Any]:
    """Check a checkpoint against its marker: every listed file present with its size (all sizes first: a
    truncated or empty file is refused before any hashing), then its sha256. Returns the marker; raises
    :class:`CheckpointError` naming the file."""
    p = Path(path)
    marker = _marker(p)
    for name, info in marker["files"].items():
        f = p / name
        if not f.is_file() or f.is_symlink():
            raise CheckpointError(f"damaged checkpoint: {str(f)!r} is missing (listed in {MARKER})")
        size = f.stat().st_size
        if size != info.get("size"):
            raise CheckpointError(f"damaged checkpoint: {str(f)!r} has {size} bytes, {info.get('size')} were written "
                                  "(truncated or changed)")
    if hashes:
        for name, info in marker["files"].items():
            if _sha256(p / name) != info.get("sha256"):
                raise CheckpointError(f"damaged checkpoint: {str(p / name)!r} does not match the sha256 in {MARKER}")
    return marker


def read_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint written by :func:`write_checkpoint` (verified first; no code runs)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    p = Path(path)
    marker = verify(p)

    def load_json(name: str) -> Any:
        try:
            return json.loads((p / name).read_bytes())
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(f"damaged checkpoint: {str(p / name)!r} is not valid JSON ({e})") from None

    try:
        arrays = load_file(str(p / TENSORS))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"damaged checkpoint: {str(p / TENSORS)!r} cannot be read ({e})") from None
    try:
        state = decode_state(load_json(STATE), arrays)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"damaged checkpoint: {str(p / STATE)!r} refers to arrays that are not there ({e})"
                              ) from None
    config = load_json(ALGORITHM_CONFIG)
    if not isinstance(state, dict) or not isinstance(config, dict):
        raise CheckpointError(f"damaged checkpoint: {str(p)!r}: state and config must be mappings")
    return Checkpoint(path=p, marker=marker, state=state, config=config)


# ------------------------------------------------------------------------------ run directories
def checkpoints_of(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """The complete checkpoints (those with a marker) among ``checkpoint`` and ``checkpoint_NNNN`` of a run
    directory, oldest first, by the iteration their marker records."""
    out = []
    run = Path(run_dir)
    for d in (run.iterdir() if run.is_dir() else ()):
        if not _NAME.fullmatch(d.name) or not d.is_dir() or not is_checkpoint(d):
            continue
        try:
            it = json.loads((d / MARKER).read_bytes()).get("iteration")
        except (ValueError, UnicodeDecodeError, AttributeError):
            continue
        if isinstance(it, int):
            out.append((it, d))
    return sorted(out, key=lambda t: (t[0], t[1].name == "checkpoint"))  # at one iteration the final one last


def newest_checkpoint(run_dir: str | os.PathLike) -> Optional[Path]:
    """The newest complete checkpoint of a run directory, or None."""
    found = checkpoints_of(run_dir)
    return found[-1][1] if found else None


def prune(run_dir: str | os.PathLike, keep: int) -> list[Path]:
    """Remove all but the newest ``keep`` periodic checkpoints (``checkpoint_NNNN``) of a run directory, and
    the leftovers of interrupted writes (``.checkpoint*.partial-*`` / ``.old-*``); returns what was removed."""
    run = Path(run_dir)
    periodic = [p for _, p in checkpoints_of(run) if p.name != "checkpoint"]
    gone = periodic[:max(0, len(periodic) - keep)] if keep > 0 else []
    gone += [p for p in _leftovers(run)]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone


def _leftovers(run: Path) -> Iterator[Path]:
    mine = f"-{os.getpid()}"
    for p in run.glob(".checkpoint*"):
        if re.fullmatch(r"\.checkpoint(_\d+)?\.(partial|old)-\d+", p.name) and not p.name.endswith(mine):
            yield p


# ------------------------------------------------------------------------------ paths a run directory names
def check_module_paths(modules: Sequence[str], *, inside: Sequence[Path], key: str) -> list[str]:
    """The task modules a received run directory names (``env.modules``), checked before any is imported: a
    dotted module name, or the absolute path of an existing ``.py`` file outside the run directory (a run
    directory names the code it was trained with; it never brings code of its own). Raises
    :class:`CheckpointError` saying why."""
    roots = [r.resolve() for r in inside]
    out = []
    for spec in modules:
        if not isinstance(spec, str) or not spec:
            raise CheckpointError(f"{key}: {spec!r} is not a module name or a .py path")
        if not spec.endswith(".py"):
            if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", spec):
                raise CheckpointError(f"{key}: {spec!r} is neither a dotted module name nor a .py path")
            out.append(spec)
            continue
        f = Path(spec).expanduser()
        if not f.is_absolute():
            raise CheckpointError(f"{key}: {spec!r} is a relative path (a run records absolute ones); pass the "
                                  "module with --import / imports=")
        real = f.resolve()
        if any(real.is_relative_to(r) for r in roots):
            raise CheckpointError(f"{key}: {spec!r} lies inside the run directory: a run directory is data and "
                                  "brings no code; import the task's module yourself (--import / imports=) if "
                                  "you trust it")
        if not real.is_file():
            raise CheckpointError(f"{key}: {spec!r} does not exist here; pass the task's module with --import / "
                                  "imports=")
        out.append(str(real))
    return out


# ------------------------------------------------------------------------------ the algorithm's settings
def _plain(v: Any) -> bool:
    try:
        json.dumps(v, allow_nan=True)
    except (TypeError, ValueError):
        return False
    return True


def config_record(config: Any, mapping: Mapping[str, str], env_name: str) -> dict[str, Any]:
    """What a checkpoint records of an ``ATGRPOConfig``: each attribute that differs from a fresh config's and
    is a plain (JSON) value, the env by its registered name where it was given as a class, and the policy
    mapping as the table it resolved to. What is not plain (callbacks, a custom ``policy_mapping_fn`` beyond
    its table) is listed under ``not_recorded``: pass ``config=`` to ``from_checkpoint`` to keep it."""
    fresh = type(config)().get_state()
    settings, skipped = {}, []
    for k, v in config.get_state().items():
        if (k in ("class", "policies", "policy_mapping_fn") or k.startswith("__") or k not in fresh
                or _same(v, fresh[k])):
            continue  # (Tune adds __stdout_file__ and the like to a trial's config)
        if k == "env" and not isinstance(v, str):
            v = env_name
        if _plain(v):
            settings[k] = v
        else:
            skipped.append(k)
    return {"settings": settings, "policy_mapping": dict(mapping), "not_recorded": sorted(skipped)}


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # arrays and other values without a plain ==
        return False


def _check_env_entry(env: Any, modules: Sequence[str], where: str) -> None:
    """The env a checkpoint names: a registered id, or a ``module:attr`` entry point of llm_marl_envs or of one of
    the task modules it names (any other module's callable would be called with the recorded env config)."""
    if not isinstance(env, str):
        raise CheckpointError(f"{where!r}: env {env!r} is not the name of an env")
    module = env.partition(":")[0] if ":" in env else None
    own = {Path(m).stem if m.endswith(".py") else m for m in modules}
    if module is not None and module.split(".")[0] != "llm_marl_envs" and module not in own:
        raise CheckpointError(f"{where!r}: env {env!r} is an entry point in module {module!r}, which is neither "
                              "llm_marl_envs nor a task module the run names; a checkpoint names envs by their "
                              "registered id")


def find_checkpoint(path: str | os.PathLike) -> Path:
    """A run directory of ``llm-marl train`` (its newest complete checkpoint by iteration: ``checkpoint/`` of a
    finished run, else a ``checkpoint_NNNN/``) or a checkpoint directory -> the checkpoint. Only complete
    checkpoints (with their :data:`~.checkpoints.MARKER`) count; nothing is loaded here.

    Raises :class:`~.settings.UsageError` saying what ``path`` is instead (missing, a file, a run without
    a checkpoint yet, an incomplete or pickle checkpoint, a folder of runs) and what to give."""
    p = Path(path).expanduser()
    if is_checkpoint(p):
        return p.resolve()
    newest = newest_checkpoint(p)  # checkpoint/ of a finished run; of a resumed one stopped later, a newer one
    if newest is not None:
        return newest.resolve()
    if is_checkpoint(p / "checkpoint"):  # a marker without its iteration: reading it says what is wrong
        return (p / "checkpoint").resolve()
    give = "give the output directory of llm-marl train (e.g. runs/default) or its checkpoint/"
    if not p.exists():
        raise UsageError(f"{str(p)!r} does not exist; {give}")
    if not p.is_dir():
        raise UsageError(f"{str(p)!r} is a file, not a run directory; {give}")
    for cand in (p, p / "checkpoint"):
        if (cand / "class_and_ctor_args.pkl").exists():
            raise CheckpointError(f"{str(cand)!r} is a pickle checkpoint (RLlib's format, or an older llm-marl): "
                                  f"it is not loaded, since unpickling a file can run any code; checkpoints of "
                                  f"this llm-marl are data ({MARKER}, state.json, tensors.safetensors)")
    if (p / "config.yaml").is_file():
        partial = (p / "checkpoint").is_dir() or any(p.glob("checkpoint_[0-9]*"))
        raise UsageError(f"{str(p)!r} holds a run of llm-marl train without a complete checkpoint ("
                         + ("its checkpoint folders lack their completion marker: the writes did not finish"
                            if partial else "the run stopped early or is still running")
                         + "); resume it with `llm-marl train --resume DIR` once it has one, or give a run that "
                         "finished")
    runs = sorted({str(d.parent if d.name == "checkpoint" else d)
                   for d in [*p.glob("*/checkpoint"), *p.glob("*")] if d.is_dir() and is_checkpoint(d)})
    if runs:
        more = f" (and {len(runs) - 3} more)" if len(runs) > 3 else ""
        raise UsageError(f"{str(p)!r} is a folder of runs, not a run; give one of them: {', '.join(runs[:3])}{more}")
    raise UsageError(f"{str(p)!r} is neither a run directory of llm-marl train (no checkpoint/ in it) nor a "
                     f"checkpoint (no {MARKER}); {give}")


#: set to 1 to load a checkpoint that asks for the unisolated ``local`` sandbox (your own run that used it)
ALLOW_LOCAL_SANDBOX_ENV = "LLM_MARL_ALLOW_LOCAL_SANDBOX"


def _check_sandbox(c: Any, where: str) -> None:
    """A checkpoint may not choose to run the model's programs without isolation: ``rollout.sandbox: local`` (or an
    env config's ``sandbox: local``) is refused unless :data:`ALLOW_LOCAL_SANDBOX_ENV` is 1."""
    asked = [("rollout.sandbox", getattr(c, "sandbox", None))]
    for key, cfg in (("env.config", c.env_config), ("env.eval_config", getattr(c, "env_eval_config", None))):
        if isinstance(cfg, Mapping):
            asked.append((f"{key}.sandbox", cfg.get("sandbox")))
    local = [k for k, v in asked if v == "local"]
    if local and os.environ.get(ALLOW_LOCAL_SANDBOX_ENV) != "1":
        raise CheckpointError(f"{where!r} asks for the unisolated `local` sandbox ({', '.join(local)}): loading it "
                              "would run the model's programs on this machine without isolation. If this is your "
                              f"own run, set {ALLOW_LOCAL_SANDBOX_ENV}=1 (docs/sandboxes.md \"Untrusted inputs\")")


def algorithm_config(ckpt: Checkpoint, imports: Sequence[str] = (), *, config_cls: Any) -> Any:
    """The ``ATGRPOConfig`` a checkpoint records (:func:`config_record`), with its task modules checked
    (:func:`check_module_paths`) and imported, ``imports`` too. Raises :class:`CheckpointError` naming the
    setting that is not one."""
    from .envs import import_env_modules
    from .policies import AgentTableMapping

    where = str(ckpt.path / ALGORITHM_CONFIG)
    settings, mapping = ckpt.config.get("settings"), ckpt.config.get("policy_mapping")
    if not isinstance(settings, dict) or not isinstance(mapping, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise CheckpointError(f"damaged checkpoint: {where!r} lacks its settings or policy mapping")
    c = config_cls()  # ATGRPOConfig (passed in: this module does not import the algorithm's)
    known = c.__dict__
    old = [k for k in settings if k in OLD_ATTRIBUTES and k not in known]
    if old:  # written by the previous release
        warnings.warn(f"{where} names settings by the previous release's names (read until the next release): "
                      + ", ".join(f"{k!r} (now {OLD_ATTRIBUTES[k]!r})" for k in old), FutureWarning, stacklevel=2)
    for k, v in settings.items():
        k = OLD_ATTRIBUTES[k] if k in old else k
        if k not in known or k.startswith("__") or not _plain(known[k]):
            raise CheckpointError(f"{where!r}: {k!r} is not a plain setting of ATGRPOConfig (a checkpoint of "
                                  "another version, or made by hand: classes and functions are never recorded)")
        known[k] = tuple(v) if isinstance(known[k], tuple) and isinstance(v, list) else v
    _check_sandbox(c, where)
    roots = [ckpt.path, ckpt.path.parent] if _NAME.fullmatch(ckpt.path.name) else [ckpt.path]
    modules = check_module_paths(list(c.env_modules or ()), inside=roots, key=f"{where}: env_modules")
    _check_env_entry(c.env, modules, where)
    c.env_modules = list(dict.fromkeys([*modules, *imports]))
    import_env_modules(c.env_modules)
    if mapping:
        c.multi_agent(policies=set(mapping.values()),
                      policy_mapping_fn=AgentTableMapping(mapping))  # c is Any here: ATGRPOConfig checks it
    return c
