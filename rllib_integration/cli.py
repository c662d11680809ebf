"""``llm-marl``: train and evaluate LLM teams with AT-GRPO.

    llm-marl train [CONFIG.yaml] [--set key=value ...] [--import MODULE ...] [--iterations N] [--output-dir DIR]
                   [--overwrite] [--address RAY_ADDRESS]
    llm-marl train --resume RUN_DIR [--iterations N] [--set run.key=value ...]
    llm-marl eval RUN_DIR|CHECKPOINT [--episodes N] [--temperature T] [--import MODULE ...]
    llm-marl eval --config [CONFIG.yaml] [--set key=value ...] [--episodes N] [--temperature T] [--import MODULE ...]
    llm-marl export RUN_DIR|CHECKPOINT OUT_DIR [--merge-lora]

``train`` without a CONFIG runs the embedded default (a warm start of the tiny model, then AT-GRPO
on a 3x3 plan-path, CPU, ~5 minutes). With a warm start, greedy eval success is printed before it
(iteration -1) and after it (iteration 0). Everything checkable is checked before Ray starts: the
config, the env id, the env arguments (one probe env is built here), the policy mapping against the
env's roles, model paths and, with ``--num-cpus`` or a cluster address, the resources. ``--import MODULE`` (or
``env.modules``) names the module that registers a task of your own: it is imported here, recorded in the
run's config.yaml (a ``.py`` path made absolute, so that ``eval``/``export``/``--resume`` find it from any
directory) and shipped to every Ray worker (``runtime_env`` ``py_modules`` + ``worker_process_setup_hook``).
Each iteration prints one progress line; the output directory receives ``config.yaml`` (the settings, once),
``metrics.jsonl``, ``metrics.csv`` (a row per iteration; the eval before a warm start is iteration -1),
TensorBoard events (Tune's ``TBXLoggerCallback``, iteration -1 too), ``transcripts.jsonl``
(``run.transcripts_per_iteration`` sampled prompts and completions per iteration), ``learning_curve.png`` (title
and legend from the run's settings), ``checkpoint/`` and ``checkpoint_NNNN/`` (``run.checkpoint_every``, the newest
``run.keep``; :mod:`rllib_integration.checkpoints`: data only, written whole or not at all). ``export`` writes
each policy as a ``save_pretrained`` folder (:mod:`rllib_integration.export`). ``run.trackers`` also logs every
result to MLflow / W&B through Tune's own callbacks (:mod:`.run_logs`). A run ends with one summary line: held-out
success before -> after and where the files are. ``eval`` plays its episodes in this process, without Ray, unless
the run's workers used GPUs or vLLM or a cluster is named. ``eval --config`` evaluates the model(s) a run config names
as they are, untrained (no warm start, no RL; no file: the embedded default), checked as ``train`` checks it, and
prints the same JSON as ``eval`` of a run directory: a model's score before any training.

A run never mixes its outputs with another's: ``train`` refuses an output directory that is not
empty, before Ray starts, unless ``--overwrite`` is given; then, once the algorithm is built, it
removes what a previous run wrote there (:data:`RUN_OUTPUTS`: config, metrics, TensorBoard events,
PNG, checkpoints) and keeps any other file. A run holds a lock on its directory (:data:`LOCK_FILE`): a
second run there is refused at once. ``--resume RUN_DIR`` continues a stopped run from its newest complete
checkpoint (metrics rolled back to it, then appended; no warm start again); SIGINT/SIGTERM end a run after
the current iteration with a checkpoint and one line saying how to resume (exit 130/143). The CLI starts a
Ray of its own unless told a cluster (``--address`` or ``RAY_ADDRESS``, which must answer). The output
directory, the address and the paths given to ``eval``/``export`` are checked before anything is written,
each with a one-line error saying what to do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import time
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from .resources import cluster_address, ray_address_file
from .settings import ConfigError, UsageError, default_of, load_config

if TYPE_CHECKING:
    from .algorithm import ATGRPO, ATGRPOConfig
    from .core.metrics import MetricsWriter
    from .run_logs import RunLoggers, TranscriptWriter

__all__ = ["main", "train", "evaluate_checkpoint", "evaluate_config", "check_run_config", "check_output_dir",
           "check_ray_address", "version", "resolve_modules", "RunStopped", "RUN_OUTPUTS", "LOCK_FILE"]

#: What ``llm-marl train`` writes in its output directory (glob patterns): ``--overwrite`` removes these, and only
#: these, before a new run writes there.
RUN_OUTPUTS = ("config.yaml", "metrics.jsonl", "metrics.csv", "events.out.tfevents.*", "learning_curve.png",
               "transcripts.jsonl", ".transcripts.jsonl.tmp",
               "checkpoint", "checkpoint_[0-9]*", ".checkpoint*.partial-*", ".checkpoint*.old-*", ".metrics.*.tmp")


def version() -> str:
    """The version of the installed ``llm-marl`` distribution, else the one in the source tree's pyproject.toml
    (:func:`sandboxes.version.distribution_version`)."""
    from sandboxes.version import distribution_version

    return distribution_version()


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, default: Any = argparse.SUPPRESS,
                 help: Optional[str] = None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any,
                 option_string: Optional[str] = None) -> None:
        print(f"{parser.prog} {version()}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llm-marl", description="Train LLM teams on llm_marl envs with AT-GRPO (RLlib).")
    p.add_argument("--version", action=_VersionAction, help="print the version of llm-marl and exit")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train from a YAML config (default: the embedded tiny plan-path run)")
    t.add_argument("config", nargs="?", help="YAML run config (see configs/ and docs/config_reference.md)")
    t.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set training.lr=1e-4 (repeatable)")
    t.add_argument("--iterations", type=int, help="shortcut for --set run.iterations=N")
    t.add_argument("--output-dir", help="shortcut for --set run.output_dir=DIR (default runs/default); it must be "
                                        "empty or new unless --overwrite is given")
    t.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a run that stopped (a signal, a crash, a full disk) from its newest complete "
                        "checkpoint, with its own config.yaml (only run.* may be --set, e.g. more iterations)")
    t.add_argument("--address", help="the Ray cluster to run on (as RAY_ADDRESS; default: a local Ray of its own, "
                                     "never one that happens to run on this machine)")
    t.add_argument("--overwrite", action="store_true",
                   help="reuse a non-empty output directory: a previous run's files there (config.yaml, metrics, "
                        "TensorBoard events, transcripts.jsonl, learning_curve.png, checkpoint*/) are removed, "
                        "others kept")
    t.add_argument("--num-cpus", type=int, default=None,
                   help="CPUs for the local Ray instance (default: all; not with RAY_ADDRESS)")
    t.add_argument("--quiet", action="store_true", help="no progress lines or bars")
    t.add_argument("--progress-bars", action="store_true",
                   help="draw the rollout workers' progress bars on stderr even when it is not a terminal (by "
                        "default only on a terminal: redirected, every redraw is one more line of the log)")
    e = sub.add_parser("eval", help="evaluate a checkpoint on the eval split, or a config's model(s) untrained")
    e.add_argument("checkpoint", nargs="?", help="a run directory of llm-marl train, or a checkpoint directory in it")
    e.add_argument("--config", nargs="?", const="", metavar="CONFIG.yaml",
                   help="instead of a checkpoint: evaluate the model(s) of this run config as they are, without "
                        "training (no warm start either); --config alone: the embedded default of llm-marl train")
    e.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="with --config: override a config key, e.g. --set model.path=smollm2 (repeatable)")
    e.add_argument("--episodes", type=int, default=None, help="eval episodes (default: the run's setting)")
    e.add_argument("--temperature", type=float, default=None, help="sampling temperature (0 = greedy)")
    e.add_argument("--num-cpus", type=int, default=None)
    e.add_argument("--address", help="the Ray cluster to evaluate on (as RAY_ADDRESS; default: a local Ray)")
    x = sub.add_parser("export", help="write each trained policy as a save_pretrained folder")
    x.add_argument("checkpoint", help="a run directory of llm-marl train, or a checkpoint directory in it")
    x.add_argument("out_dir", help="where <policy>/ folders (and base/ at L2) go")
    x.add_argument("--merge-lora", action="store_true", help="L2: write full models (base + adapter merged)")
    for sp in (t, e, x):
        sp.add_argument("--verbose", action="store_true",
                        help="show every third-party message too (by default those that say nothing to a user of "
                             "llm-marl are dropped: rllib_integration/quiet.py lists them)")
        sp.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="a module (dotted name or .py path) that registers your task; imported here and in "
                             "every Ray worker (adds to env.modules; repeatable)")
    sub.add_parser("show-default", help="print the embedded default config as YAML")
    return p


def _progress(it: int, total: int, r: dict) -> str:
    """One line per iteration. Times are wall times of the phases, which add up to the iteration's
    (rollout = the slowest worker's generation + env + sandbox time)."""
    tm = r.get("timers", {})
    ev = r.get("evaluation", {})
    agents = " ".join(f"{a}:valid={m.get('valid_ratio', 0):.2f}" for a, m in sorted(r.get("agents", {}).items()))
    line = (f"[iter {it:>3}/{total}] success={r.get('success_rate', 0):.3f} reward={r.get('reward_mean', 0):+.3f} "
            f"{agents} | {r.get('time_this_iter_s', 0):.1f}s = rollout {tm.get('rollout_s', 0):.1f} "
            f"(gen {tm.get('generate_s', 0):.1f} env {tm.get('env_s', 0):.1f} sandbox {tm.get('sandbox_s', 0):.1f}) "
            f"+ update {tm.get('update_s', 0):.1f} + sync {tm.get('weight_sync_s', 0):.1f}")
    if ev:
        line += f" + eval {ev.get('time_s', 0):.1f} | {_eval_text(ev)}"
    return line


def check_run_config(cfg: dict, *, num_cpus: Optional[int] = None) -> None:
    """The checks of a validated run config that need the env, before Ray is imported or started:
    env id (with close matches), env arguments (one probe env built here), the policy mapping
    against the env's roles; ``--num-cpus`` against a cluster address and against the CPUs the run's
    actors need. Raises ConfigError naming the YAML key."""
    from .envs import check_env
    from .policies import YAML_NAMES, AgentTableMapping, resolve_mapping

    if num_cpus is not None and cluster_address():
        raise ConfigError(f"--num-cpus {num_cpus} sizes a local Ray instance, but RAY_ADDRESS="
                          f"{os.environ['RAY_ADDRESS']!r} connects to a running cluster, whose resources are fixed "
                          "by its `ray start`; drop --num-cpus, or unset RAY_ADDRESS for a local run")
    env = cfg["env"]
    check = check_env(env["id"], env["config"], modules=env["modules"], eval_env_config=env["eval_config"])
    table = cfg["policy_mapping"]
    view = types.SimpleNamespace(policies=set(cfg["policies"]) | set(table.values()) or None,
                                 specialization=cfg["specialization"],
                                 policy_mapping_fn=AgentTableMapping(table) if table else None)
    resolve_mapping(view, check.agents, env_name=check.entry.name, names=YAML_NAMES)
    if num_cpus is not None:  # GPUs are checked against the started Ray instance
        from .resources import ActorPlan, check_resources

        check_resources(ActorPlan.of_run_config(cfg), {"CPU": num_cpus, "GPU": float("inf")},
                        source=f"the local Ray instance (--num-cpus {num_cpus})")


# ---------------------------------------------------------------------------- output directory, Ray address
def _previous_run(out: Path) -> list[Path]:
    """The files and folders a run of llm-marl train wrote in ``out`` (:data:`RUN_OUTPUTS`)."""
    return sorted({p for pattern in RUN_OUTPUTS for p in out.glob(pattern)})


def _listing(paths: Sequence[Path], n: int = 4) -> str:
    names = [p.name + ("/" if p.is_dir() else "") for p in paths]
    return ", ".join(names[:n]) + (f", ... ({len(names)} in all)" if len(names) > n else "")


def check_output_dir(out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Check that a run may write in ``out`` (before Ray starts; nothing is created): it is not a file,
    can be created, and is empty unless ``overwrite``. Raises :class:`~.settings.UsageError` saying what to do."""
    path = _output_dir(out)
    if not overwrite:
        _check_empty(path)
    return path


def _output_dir(out: str | os.PathLike) -> Path:
    """``out`` as the path of a folder a run can write in: not a file, and it can be created (nothing is)."""
    from .export import check_out_dir

    return check_out_dir(out, what="--output-dir (run.output_dir)")


def _check_empty(path: Path) -> None:
    """That the folder ``path`` (if there is one) holds nothing but a run's lock: else a one-line
    :class:`~.settings.UsageError` naming what it holds (a previous run's outputs or other files) and what to do."""
    if not path.is_dir():
        return
    entries = sorted(p for p in path.iterdir() if p.name != LOCK_FILE)
    if not entries:
        return
    previous = _previous_run(path)
    if previous:
        raise UsageError(f"output directory {str(path)!r} holds a previous run ({_listing(previous)}); add --overwrite "
                         "to replace it, or give --output-dir NEW_DIR")
    raise UsageError(f"output directory {str(path)!r} is not empty ({_listing(entries)}); give --output-dir NEW_DIR, "
                     "or add --overwrite to write the run there (those files are kept)")


def _open_output_dir(out: Path, *, overwrite: bool) -> None:
    """Make ``out`` ready for a run: checked again (another run may have written there meanwhile); with
    ``overwrite``, a previous run's files removed (others kept)."""
    check_output_dir(out, overwrite=overwrite)
    if overwrite and out.is_dir():
        for p in _previous_run(out):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
    out.mkdir(parents=True, exist_ok=True)


def check_ray_address(timeout_s: float = 3.0) -> None:
    """With ``RAY_ADDRESS`` set, check (without Ray) that a Ray cluster answers there: ``auto`` needs the
    cluster that ``ray start`` recorded on this machine, ``host:port`` / ``ray://host:port`` a connection.
    Raises :class:`~.settings.UsageError` saying what to do; addresses of other forms are left to Ray."""
    addr = cluster_address()
    if addr is None:
        return
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        return  # connected already: the CLI uses that instance
    shown, via = f"RAY_ADDRESS={addr!r}", ""
    fix = "or unset RAY_ADDRESS to start a local Ray"
    target = addr
    if addr == "auto":
        f = ray_address_file()
        target = f.read_text().strip() if f.is_file() else ""
        if not target:
            raise UsageError(f"{shown}, but no Ray cluster was started on this machine ({f} is missing: `ray start` "
                             f"writes it); start one with `ray start --head` (docs/multinode.md), {fix}")
        via = f" (the address in {f})"
    m = re.fullmatch(r"(?:ray://)?\[?([\w.:-]+?)\]?:(\d+)/?", target)
    if m is None:
        return
    host, port = m.group(1), int(m.group(2))
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        why = f"no answer in {timeout_s:g} s" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
        raise UsageError(f"{shown}: no Ray cluster answers at {host}:{port}{via} ({why}); start it (`ray start "
                         f"--head --port={port}`, docs/multinode.md), correct RAY_ADDRESS, {fix}") from None


def _start_ray(modules: Sequence[str], num_cpus: Optional[int], progress: bool = False) -> bool:
    """Connect to RAY_ADDRESS (``--address``) or start a local Ray of its own (even where ``ray start`` runs a
    cluster on this machine: joining it needs the address); the job's workers import ``modules``; with ``progress``
    the workers' output (their progress bars) reaches this process. True if started here."""
    import ray

    from .envs import task_runtime_env

    if ray.is_initialized():
        return False
    address = cluster_address()
    # What RAY_DISABLE_FAILURE_SIGNAL_HANDLER=1 does (Ray's documented variable, read when ray_constants is imported),
    # for this process's core worker only: its fatal-signal handler takes SIGTERM too, prints a stack dump and aborts
    # 3 s later (issue 40). Ray's workers keep theirs; ray.init's faulthandler still reports a crash of this process.
    from ray._private import ray_constants

    no_handler = getattr(ray_constants, "RAY_DISABLE_FAILURE_SIGNAL_HANDLER", False)
    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    try:
        from .quiet import verbose

        # address="local": a Ray of its own, never the cluster `ray start` recorded on this machine
        ray.init(address=address or "local", num_cpus=None if address else num_cpus, include_dashboard=False,
                 log_to_driver=progress, runtime_env=task_runtime_env(modules) or None,
                 logging_level=logging.INFO if verbose() else logging.WARNING)
    except ConnectionError as e:
        if not address:
            raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UsageError(f"cannot connect to the Ray cluster at RAY_ADDRESS={address!r} ({first}); start it "
                         "(`ray start --head`, docs/multinode.md) or unset RAY_ADDRESS to start a local Ray") from None
    finally:
        ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = no_handler
    return True


def _eval_text(ev: dict) -> str:
    """Greedy held-out success and each role's valid ratio of an evaluation result."""
    valid = " ".join(f"{a}:valid={m.get('valid_ratio', 0):.2f}" for a, m in sorted(ev.get("agents", {}).items()))
    return f"eval success={ev.get('success_rate', 0):.3f}" + (f" ({valid})" if valid else "")


# ---------------------------------------------------------------------------- own task modules, the run lock
def resolve_modules(modules: Sequence[str], *, key: str = "--import / env.modules") -> list[str]:
    """Task modules as a run records them, so that ``eval``, ``export`` and ``--resume`` find them from any
    directory: a ``.py`` path made absolute (it must exist), a dotted name kept; duplicates dropped (the same
    file given twice, or two files of one module name, which could not both be imported: an error)."""
    out: dict[str, str] = {}
    for spec in modules:
        if not isinstance(spec, str) or not spec.strip():
            raise ConfigError(f"{key}: expected a module name or the path of a .py file, got {spec!r}")
        spec = spec.strip()
        if spec.endswith(".py"):
            f = Path(spec).expanduser()
            if not f.is_file():
                raise ConfigError(f"{key}: {spec!r} is not a file (from {os.getcwd()}); give the path of the .py "
                                  "file that registers your task, or its module name")
            spec = str(f.resolve())
        name = Path(spec).stem if spec.endswith(".py") else spec
        if out.get(name, spec) != spec:
            raise ConfigError(f"{key}: {out[name]!r} and {spec!r} are both module {name!r}; give one of them")
        out[name] = spec
    return list(out.values())


#: the lock file of a run directory (held while a run writes there; not a run's output)
LOCK_FILE = ".llm-marl.lock"


class _RunLock:
    """An exclusive ``flock`` on ``OUT/.llm-marl.lock`` for a run's life: a second run on the same folder is
    refused at once, before Ray starts. The kernel drops it when the process ends, however it ends."""

    def __init__(self, out: Path):
        import fcntl

        self.made = [d for d in (out, *out.parents) if not d.exists()]  # the folders this run makes, leaf first
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / LOCK_FILE
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise UsageError(f"output directory {str(out)!r} is in use by another llm-marl train (pid {holder}); "
                             "wait for it, stop it, or give --output-dir NEW_DIR") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self, *, remove_dir: bool = False) -> None:
        """Unlock; with ``remove_dir`` (nothing was written) the folders this run made go too, those left empty."""
        self.path.unlink(missing_ok=True)
        os.close(self.fd)
        for folder in self.made if remove_dir else []:
            try:
                folder.rmdir()
            except OSError:
                break


# ---------------------------------------------------------------------------- signals
class RunStopped(Exception):
    """SIGINT/SIGTERM stopped ``train``; ``resume_line`` says how to continue."""

    def __init__(self, signum: int, resume_line: str = ""):
        super().__init__(resume_line)
        self.signum = signum
        self.resume_line = resume_line


class _Signals:
    """SIGINT/SIGTERM during ``train``: outside a step (set-up, warm start) the run stops at once; during an
    iteration or a checkpoint write the first signal lets it finish (then a checkpoint is written and the
    run stops), a second one abandons it; while the run closes (``closing``: Ray shut down, the lock let go) a
    signal is noted and the run stops after. Handlers only in the main thread; the previous ones are restored.

    Ray takes SIGTERM for itself: ``ray.init`` puts a Python handler of its own (``sys.exit(15)``), and its C++ core
    worker a fatal-signal handler (a stack dump, then SIGABRT 3 s later: issue 40). :func:`_start_ray` starts Ray
    without the latter; :meth:`ray_start` puts ours back after Ray's start and stops on a SIGTERM that came
    meanwhile."""

    def __init__(self) -> None:
        import signal
        import threading

        self.signum: Optional[int] = None
        self.in_step = False
        self.closing = False
        self._old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        first = self.signum is None
        self.signum = signum
        if not self.closing and (not self.in_step or not first):
            raise RunStopped(signum)

    def take_back(self) -> None:
        """Our handlers again (SIGTERM first), in place of any put since."""
        import signal

        for sig in self._old:
            signal.signal(sig, self._handle)

    @contextlib.contextmanager
    def ray_start(self) -> Iterator[None]:
        """Around ``ray.init``: its handler's exit on SIGTERM becomes our stop, and ours are back after it."""
        import signal

        try:
            yield
        except SystemExit as e:
            if not self._old or e.code != signal.SIGTERM:
                raise
            self.signum = signal.SIGTERM
            raise RunStopped(signal.SIGTERM) from None
        finally:
            self.take_back()

    def restore(self) -> None:
        import signal

        for sig, old in self._old.items():
            signal.signal(sig, old)


def _resume_line(out: Path, signum: int, iteration: Optional[int]) -> str:
    import signal

    where = f"the checkpoint of iteration {iteration}" if iteration is not None else "the start (no checkpoint yet)"
    return (f"llm-marl: stopped by {signal.Signals(signum).name}; resume from {where} with: "
            f"llm-marl train --resume {out}")


# ---------------------------------------------------------------------------- train
def _resume_config(run_dir: str, sets: Sequence[str]) -> dict:
    """The config of a run to resume: its own config.yaml, with ``run.*`` overrides only."""
    d = Path(run_dir).expanduser()
    if not (d / "config.yaml").is_file():
        raise UsageError(f"--resume {run_dir!r}: not a run directory of llm-marl train (no config.yaml in it); give "
                         "the --output-dir of the run to continue")
    other = [x for x in sets if not x.partition("=")[0].strip().startswith("run.")]
    if other:
        raise UsageError(f"--resume continues a run with its own config; only run.* may be changed (--set "
                         f"{other[0]}); start a new run to change other settings")
    cfg = load_config(d / "config.yaml", [*sets, f"run.output_dir={d}"])
    return cfg


def _resume_checkpoint(out: Path, quiet: bool) -> Optional[Path]:
    """The newest complete checkpoint of a run to resume whose files are whole (sizes checked now, hashes when it
    is read); a damaged one is named and passed over for the one before it. None: the run starts over."""
    from .checkpoints import CheckpointError, checkpoints_of, verify

    for _, p in reversed(checkpoints_of(out)):
        try:
            verify(p, hashes=False)
            return p
        except CheckpointError as e:
            print(f"llm-marl: passing over {p.name}/: {e}", file=sys.stderr, flush=True)
    if not quiet:
        print(f"llm-marl: {str(out)!r} has no complete checkpoint yet: the run starts over", file=sys.stderr,
              flush=True)
    return None


def _set_up_stop_line(signum: int, resume: Optional[str]) -> str:
    """What a signal during set-up says: nothing was written (a new run), or how to resume the run."""
    import signal

    name = signal.Signals(signum).name
    if resume is None:
        return f"llm-marl: stopped by {name} during set-up, before anything was written; run the same command again"
    return (f"llm-marl: stopped by {name} during set-up; resume with: llm-marl train --resume "
            f"{Path(resume).expanduser()}")  # the directory as given: its config may be unread yet


class _Run:
    """One run of :func:`train`: its state, and a method per step, in the order ``train`` takes them. The set-up
    steps (:meth:`setting_up`) complete or are undone; the steps after them (:meth:`running`) are always closed."""

    cfg: dict
    out: Path
    ckpt_from: Optional[Path]  # the checkpoint a resumed run continues from (None: it starts over)
    algo_config: ATGRPOConfig
    bars: bool
    t0: float  # when the algorithm's build began: the set-up time and the run's wall time count from there
    algo: ATGRPO
    start: int  # the iteration it starts after
    writer: MetricsWriter
    ckpt: str
    png: str

    def __init__(self, *, resume: Optional[str], overwrite: bool, quiet: bool, num_cpus: Optional[int]):
        self.resume, self.overwrite, self.quiet, self.num_cpus = resume, overwrite, quiet, num_cpus
        self.lock: Optional[_RunLock] = None
        self.started_ray = False
        self.wrote = False  # something written in the output directory: it is kept
        self.tb: Optional[RunLoggers] = None
        self.transcripts: Optional[TranscriptWriter] = None
        self.saved: Optional[int] = None  # the iteration of the newest checkpoint
        self.signals = _Signals()

    @property
    def iterations(self) -> int:
        return self.cfg["run"]["iterations"]

    # ------------------------------------------------------------------ set-up
    @contextlib.contextmanager
    def setting_up(self) -> Iterator[None]:
        """Around the set-up steps: if one fails, Ray (started here) is shut down, the lock let go and the folders
        this run made removed, the signal handlers restored; a signal's :class:`RunStopped` gets its set-up line."""
        try:
            yield
        except BaseException as e:
            self.signals.closing = True
            if self.started_ray:
                import ray

                ray.shutdown()
            if self.lock is not None:
                self.lock.release(remove_dir=True)
            self.signals.restore()
            if isinstance(e, RunStopped):
                raise RunStopped(e.signum, _set_up_stop_line(e.signum, self.resume)) from None
            raise

    def read_settings(self, config_path: Optional[str], sets: Sequence[str], imports: Sequence[str]) -> None:
        """The run config (resuming: the run's own config.yaml, ``run.*`` changes only), its task modules (recorded
        as :func:`resolve_modules` writes them) and its trackers, checked."""
        from .run_logs import check_trackers

        if self.resume is not None and (config_path is not None or self.overwrite):
            raise UsageError("--resume continues a run with its own config.yaml: give no CONFIG and no --overwrite")
        cfg = _resume_config(self.resume, sets) if self.resume is not None else load_config(config_path, list(sets))
        cfg["env"]["modules"] = resolve_modules([*cfg["env"]["modules"], *imports])
        check_trackers(cfg["run"]["trackers"])
        self.cfg = cfg

    def lock_output_dir(self, on_locked: Optional[Callable[[], Any]]) -> None:
        """The output directory, locked before anything slow (then ``on_locked()``). A new run's is checked in two
        halves around the lock, which makes it: a folder a run can write in, then, once locked (a run that holds it
        is refused as such, not for its files), empty unless ``--overwrite``. A resumed run's holds its outputs."""
        self.out = Path(self.cfg["run"]["output_dir"]).expanduser()
        if self.resume is not None:
            self.lock = _RunLock(self.out)
        else:
            self.out = _output_dir(self.out)
            self.lock = _RunLock(self.out)
            if not self.overwrite:
                _check_empty(self.out)
        if on_locked is not None:
            on_locked()

    def check_before_ray(self) -> None:
        """Everything checkable before Ray starts: the config against the env (:func:`check_run_config`), the
        checkpoint to resume from, the Ray address, then (Ray and torch imported) the algorithm's config."""
        check_run_config(self.cfg, num_cpus=self.num_cpus)
        self.ckpt_from = _resume_checkpoint(self.out, self.quiet) if self.resume is not None else None
        check_ray_address()
        import ray  # noqa: F401  (before torch, as the run always imported them)
        import torch

        torch.set_num_threads(1)
        from .algorithm import ATGRPOConfig

        self.algo_config = ATGRPOConfig.from_run_config(self.cfg)
        self.algo_config.validate()

    def start_ray(self, progress_bars: bool) -> None:
        """Ray, where the run needs it (:func:`_start_ray`); a SIGTERM that Ray's own handler takes meanwhile stops
        the run (:meth:`_Signals.ray_start`)."""
        import ray

        cfg = self.cfg
        # W&B's Tune callback logs from a Ray actor of its own
        need_ray = (cfg["rollout"]["num_rollout_actors"] > 0 or cfg["resources"]["num_learners"] > 0
                    or any(t["type"] == "wandb" for t in cfg["run"]["trackers"]))
        # progress bars only on a terminal: redirected, each redraw would be another (huge) line of the log
        self.bars = not self.quiet and (progress_bars or sys.stderr.isatty())
        if need_ray:
            self.started_ray = not ray.is_initialized()
            with self.signals.ray_start():
                _start_ray(cfg["env"]["modules"], self.num_cpus, progress=self.bars)

    def build_algorithm(self) -> None:
        """The algorithm, built (with its warm start, if any) or restored from the checkpoint to resume from, once
        its resources are checked against the cluster."""
        from .algorithm import ATGRPO

        self.t0 = time.perf_counter()
        if self.bars:
            self.algo_config.rollouts(progress_bars=True)
        self.algo_config.check_resources()  # against the cluster (with RAY_ADDRESS) before any actor starts
        algo = (ATGRPO.from_checkpoint(self.ckpt_from, config=self.algo_config) if self.ckpt_from is not None
                else self.algo_config.build_algo())
        assert isinstance(algo, ATGRPO)
        self.algo = algo
        self.start = int(algo.iteration)
        self.saved = self.start if self.ckpt_from is not None else None

    # ------------------------------------------------------------------ the run
    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Around the steps after set-up: a signal's :class:`RunStopped` gets the line that says how to resume; the
        run is closed however it ends (:meth:`close`); a signal while it closed is raised after."""
        try:
            yield
        except RunStopped as e:
            raise RunStopped(e.signum, _resume_line(self.out, e.signum, self.saved)) from None
        finally:
            self.close(failed=sys.exc_info()[0] is not None)
        if self.signals.signum is not None:  # while the run closed: it is complete
            raise RunStopped(self.signals.signum, _resume_line(self.out, self.signals.signum, self.saved))

    def open_outputs(self) -> None:
        """The output directory readied (``--overwrite``: a previous run's files removed), then opened: config.yaml,
        the metrics writer and the loggers (resumed: rolled back to its checkpoint), the transcripts."""
        import yaml

        from .core.metrics import MetricsWriter
        from .run_logs import RunLoggers, TranscriptWriter

        cfg, out, resumed = self.cfg, self.out, self.ckpt_from is not None
        run_cfg = yaml.safe_dump(cfg, sort_keys=False)
        if self.resume is None:
            _open_output_dir(out, overwrite=self.overwrite)
        self.wrote = True
        (out / "config.yaml").write_text(run_cfg)
        self.writer = MetricsWriter(out, resume_after=self.start if resumed else None)
        self.tb = RunLoggers(out, trackers=cfg["run"]["trackers"], run_config=cfg, name=cfg["run"]["name"],
                             replay=self.writer.rows if resumed else ())
        self.algo.keep_transcripts = cfg["run"]["transcripts_per_iteration"]
        if self.algo.keep_transcripts:
            self.transcripts = TranscriptWriter(out, resume_after=self.start if resumed else None)

    def report_set_up(self) -> None:
        """The lines that say what was set up: the run (task, policies, set-up time, output directory), the warm
        start's loss."""
        if self.quiet:
            return
        cfg, ckpt_from, ws = self.cfg, self.ckpt_from, self.algo.warm_start_metrics
        how = f"resumed at iteration {self.start} from {ckpt_from.name}/, " if ckpt_from is not None else ""
        print(f"llm-marl: {cfg['env']['id']} {cfg['specialization']} policies={self.algo.policy_mapping} "
              f"({how}setup {time.perf_counter() - self.t0:.1f}s) -> {self.out}", flush=True)
        if ws is not None:
            held = (f", held-out demo loss {ws['heldout_loss_before']:.3f} -> {ws['heldout_loss_after']:.3f}"
                    if "heldout_loss_before" in ws else "")
            print(f"warm start: loss {ws['loss_first_epoch']:.3f} -> {ws['loss_last_epoch']:.3f}{held} "
                  f"({ws['time_s']:.1f}s)", flush=True)

    def first_evaluation(self) -> None:
        """The starting points of the learning curve on the eval split, unless resumed: before the warm start
        (iteration -1, evaluated in set-up) and before RL (iteration 0)."""
        if not self.cfg["evaluation"]["interval"] or self.ckpt_from is not None:
            return
        ws, iterations = self.algo.warm_start_metrics, self.iterations
        if ws is not None and "eval_before" in ws:
            self._record({"training_iteration": -1, "evaluation": ws["eval_before"]})
            if not self.quiet:
                print(f"[iter  -1/{iterations}] {_eval_text(ws['eval_before'])} (before the warm start)", flush=True)
        ev0 = ws["eval_after"] if ws is not None and "eval_after" in ws else self.algo.evaluate()
        self._record({"training_iteration": 0, "evaluation": ev0})
        if not self.quiet:
            when = "after the warm start, before RL" if ws is not None else "before training"
            print(f"[iter   0/{iterations}] {_eval_text(ev0)} ({when}, {ev0.get('time_s', 0):.1f}s)", flush=True)

    def iterate(self) -> None:
        """The iterations, each a step (:class:`_Signals`): trained, checkpointed every ``run.checkpoint_every``,
        recorded, reported; after a signal, checkpointed (if not just now) and stopped."""
        every, iterations, signals = self.cfg["run"]["checkpoint_every"], self.iterations, self.signals
        for i in range(self.start + 1, iterations + 1):
            signals.in_step = True
            result = self.algo.train()
            if every and i % every == 0 and i < iterations:
                self._checkpoint(f"checkpoint_{i:04d}")  # before its metrics row: rows never run ahead of checkpoints
            self._record(result)
            if self.transcripts is not None:
                self.transcripts.write(self.algo.last_transcripts)
            if not self.quiet:
                print(_progress(i, iterations, result), flush=True)
            signals.in_step = False
            if signals.signum is not None:
                if self.saved != i:
                    self._checkpoint(f"checkpoint_{i:04d}")
                raise RunStopped(signals.signum)

    def finish(self) -> None:
        """The final checkpoint (a step; unless the last iteration's is it) and the learning curve; a signal that came
        meanwhile stops the run now."""
        from .core.plotting import curve_labels, plot_learning_curve

        self.signals.in_step = True
        self.ckpt = str((self.out / "checkpoint").resolve())
        if self.saved != self.iterations or not (self.out / "checkpoint").exists():
            self._checkpoint("checkpoint")
        self.signals.in_step = False
        self.png = plot_learning_curve(self.writer.rows, self.out / "learning_curve.png", labels=curve_labels(self.cfg))
        if self.signals.signum is not None:
            raise RunStopped(self.signals.signum)

    def close(self, *, failed: bool) -> None:
        """Whatever happened: the loggers closed (``failed``: as failed), the algorithm stopped, Ray (started here)
        shut down, the lock let go (with the folders this run made, if it wrote nothing), the signal handlers
        restored; a signal meanwhile is noted (:meth:`running` raises it after)."""
        self.signals.closing = True
        if self.tb is not None:
            self.tb.close(failed=failed)
        self.algo.stop()
        if self.started_ray:
            import ray

            ray.shutdown()
        assert self.lock is not None
        self.lock.release(remove_dir=not self.wrote)
        self.signals.restore()

    def summary(self) -> dict:
        """What the run made, printed (unless quiet) with its closing line."""
        summary = {"output_dir": str(self.out), "checkpoint": self.ckpt, "learning_curve": self.png,
                   "metrics": str(self.writer.jsonl), "iterations": self.iterations,
                   "success_rate": [r.get("success_rate") for r in self.writer.rows],
                   "wall_s": time.perf_counter() - self.t0}
        if not self.quiet:
            print(json.dumps({k: v for k, v in summary.items() if k != "success_rate"}, indent=1))
            print(closing_line(self.writer.rows, summary, transcripts=self.transcripts), flush=True)
        return summary

    # ------------------------------------------------------------------ helpers of the steps
    def _record(self, row: dict) -> None:
        """A row of the run's metrics: metrics.jsonl/.csv, then the loggers."""
        assert self.tb is not None
        self.writer.write(row)
        self.tb.write(row)

    def _checkpoint(self, name: str) -> None:
        """``OUT/name/``, written as a step (a first signal lets it finish); then the newest ``run.keep`` kept."""
        from .checkpoints import prune

        self.signals.in_step = True
        try:
            self.algo.save_to_path(str((self.out / name).resolve()), run_config=self.cfg)
        except OSError as e:  # a full disk, a quota: the half-written one is never taken for a checkpoint
            saved, out = self.saved, self.out
            where = f"the checkpoint of iteration {saved}" if saved is not None else "the start (no checkpoint yet)"
            raise UsageError(f"cannot write {name}/ in {str(out)!r} ({e.strerror or e}); make room, then resume "
                             f"from {where} with: llm-marl train --resume {out}") from None
        self.saved = int(self.algo.iteration)
        prune(self.out, self.cfg["run"]["keep"])


def train(config_path: Optional[str] = None, sets: Sequence[str] = (), *, num_cpus: Optional[int] = None,
          quiet: bool = False, imports: Sequence[str] = (), overwrite: bool = False,
          progress_bars: bool = default_of("rollout.progress_bars"), resume: Optional[str] = None,
          on_locked: Optional[Callable[[], Any]] = None) -> dict:
    """Check everything (before Ray starts), train, write outputs; returns a summary.

    The output directory must be new or empty unless ``overwrite`` (then a previous run's files there are
    removed, once the algorithm is built) or ``resume`` (a run directory: training continues from its newest
    complete checkpoint, its metrics rolled back to it). A run holds a lock on its directory, taken once the config
    is read, before anything slow (``on_locked`` is called then): of two runs on one directory the first started
    wins. SIGINT/SIGTERM stop it after the current iteration with a checkpoint (a second signal at once) and raise
    :class:`RunStopped` naming the command that resumes it."""
    run = _Run(resume=resume, overwrite=overwrite, quiet=quiet, num_cpus=num_cpus)
    with run.setting_up():  # if it fails: undone (Ray, the lock, the folders this run made)
        run.read_settings(config_path, sets, imports)
        run.lock_output_dir(on_locked)
        run.check_before_ray()
        run.start_ray(progress_bars)
        run.build_algorithm()
    with run.running():  # however it ends: closed (loggers, algorithm, Ray, the lock)
        run.open_outputs()
        run.report_set_up()
        run.first_evaluation()
        run.iterate()
        run.finish()
    return run.summary()


def closing_line(rows: Sequence[dict], summary: dict, *, transcripts: Any = None) -> str:
    """The last line of ``llm-marl train``: held-out success before -> after (the first and last eval rows; the
    training success where the run evaluated nothing) and where the files are."""
    ev = [(int(r.get("training_iteration", 0)), r["evaluation/success_rate"]) for r in rows
          if "evaluation/success_rate" in r]
    if len(ev) >= 2:
        what = f"held-out success {ev[0][1]:.3f} -> {ev[-1][1]:.3f} (iteration {ev[0][0]} -> {ev[-1][0]})"
    elif ev:
        what = f"held-out success {ev[0][1]:.3f} (iteration {ev[0][0]})"
    else:
        train = [r["success_rate"] for r in rows if "success_rate" in r]
        what = ("no held-out eval (evaluation.interval: 0); train success "
                + (f"{train[0]:.3f} -> {train[-1]:.3f}" if train else "-"))
    out = Path(summary["output_dir"])
    files = [os.path.relpath(Path(summary[k]).resolve(), out.resolve()) for k in ("checkpoint", "learning_curve",
                                                                               "metrics")]
    files[0] += "/"
    files += ["metrics.csv", *([transcripts.path.name] if transcripts is not None else [])]
    return f"llm-marl: done in {summary['wall_s']:.0f}s, {what}; run directory {out}: {', '.join(files)}"


def evaluate_checkpoint(checkpoint: str, *, episodes: Optional[int] = None, temperature: Optional[float] = None,
                        num_cpus: Optional[int] = None, imports: Sequence[str] = ()) -> dict:
    """Restore an ATGRPO checkpoint (or a run directory's) and evaluate it on the eval split. The checkpoint
    is read as data (:mod:`.checkpoints`); the algorithm is rebuilt from the settings it records."""
    from .algorithm import ATGRPOConfig
    from .checkpoints import algorithm_config, find_checkpoint, read_checkpoint

    path = find_checkpoint(checkpoint)
    check_ray_address()
    imports = resolve_modules(imports)
    ckpt = read_checkpoint(path)  # verified before Ray starts: a damaged one is refused at once
    config = algorithm_config(ckpt, imports, config_cls=ATGRPOConfig)
    from .algorithm import ATGRPO

    return _evaluate(config, lambda c: ATGRPO.from_checkpoint(path, config=c), episodes=episodes,
                     temperature=temperature, num_cpus=num_cpus)


def evaluate_config(config_path: Optional[str] = None, sets: Sequence[str] = (), *, episodes: Optional[int] = None,
                    temperature: Optional[float] = None, num_cpus: Optional[int] = None, imports: Sequence[str] = ()
                    ) -> dict:
    """Evaluate the model(s) a run config names as they are, untrained, on the eval split: ``llm-marl eval --config``.
    The config (``None``: the embedded default) and ``sets`` are checked as ``train`` checks them, before Ray;
    ``episodes`` and ``temperature`` are ``evaluation.num_episodes`` / ``evaluation.temperature``. Its warm start is
    not run (said on stderr); nothing is written."""
    extra = [*([f"evaluation.num_episodes={episodes}"] if episodes is not None else []),
             *([f"evaluation.temperature={temperature}"] if temperature is not None else [])]
    cfg = load_config(config_path, [*sets, *extra])
    cfg["env"]["modules"] = resolve_modules([*cfg["env"]["modules"], *imports])
    check_run_config(cfg, num_cpus=num_cpus)
    check_ray_address()
    if cfg["warm_start"]["episodes"]:
        print(f"llm-marl: evaluating the model(s) untrained: the config's warm start ({cfg['warm_start']['episodes']} "
              "demonstration episodes) is not run", file=sys.stderr, flush=True)
    cfg["warm_start"]["episodes"] = 0
    from .algorithm import ATGRPOConfig

    return _evaluate(ATGRPOConfig.from_run_config(cfg), lambda c: c.build_algo(), num_cpus=num_cpus)


def _evaluate(config: Any, build: Callable[[Any], Any], *, episodes: Optional[int] = None,
              temperature: Optional[float] = None, num_cpus: Optional[int] = None) -> dict:
    """``build(config).evaluate()``: in this process where :func:`evaluates_in_process`, else on Ray."""
    import torch

    torch.set_num_threads(1)
    from ._rllib import unfrozen

    in_process = evaluates_in_process(config)
    if in_process:  # the same greedy episodes, without Ray's start and an actor's
        config.num_rollout_actors = 0
        config.num_learners = 0
    started = False if in_process else _start_ray(config.env_modules, num_cpus)
    try:
        algo = build(config)
    except BaseException:
        if started:
            import ray

            ray.shutdown()
        raise
    try:
        if episodes is not None or temperature is not None:
            with unfrozen(algo.config) as cfg:
                if episodes is not None:
                    cfg.evaluation_num_episodes = int(episodes)
                if temperature is not None:
                    cfg.evaluation_temperature = float(temperature)
        result = algo.evaluate()
    finally:
        algo.stop()
        if started:
            import ray

            ray.shutdown()
    return result


def evaluates_in_process(config: Any) -> bool:
    """Whether ``llm-marl eval`` plays the eval episodes in its own process, without Ray (rollout and learner
    local; ``--num-cpus`` is then moot): unless a cluster is named (``--address``/``RAY_ADDRESS``), or the run's
    rollout workers or learners use GPUs or its rollouts another backend than Hugging Face's (those run as the
    training run ran them). Eval gives the same episodes either way (tests/rllib_integration/test_run_logs.py)."""
    return (cluster_address() is None and config.backend == "hf"
            and not float(config.num_gpus_per_rollout_worker) and not float(config.num_gpus_per_learner))


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    from . import quiet

    if getattr(args, "verbose", False):
        os.environ["LLM_MARL_VERBOSE"] = "1"
    if args.command != "train":  # train: once it holds its run lock (quiet imports transformers: seconds)
        quiet.install(for_workers=True)
    if getattr(args, "address", None):
        os.environ["RAY_ADDRESS"] = args.address
    try:
        if args.command == "show-default":
            import yaml

            from .settings import DEFAULT_CONFIG

            print(yaml.safe_dump(DEFAULT_CONFIG, sort_keys=False), end="")
            return 0
        if args.command == "train":
            sets = list(args.sets)
            if args.iterations == 0:
                raise UsageError("--iterations 0 trains nothing; to evaluate the config's model(s) untrained: "
                                 "llm-marl eval --config [CONFIG.yaml] [--set key=value ...]")
            if args.iterations is not None:
                sets.append(f"run.iterations={args.iterations}")
            if args.output_dir is not None:
                if args.resume is not None:
                    raise UsageError("--resume continues the run in RUN_DIR; give no --output-dir")
                sets.append(f"run.output_dir={args.output_dir}")
            train(args.config, sets, num_cpus=args.num_cpus, quiet=args.quiet, imports=args.imports,
                  overwrite=args.overwrite, progress_bars=args.progress_bars, resume=args.resume,
                  on_locked=lambda: quiet.install(for_workers=True))
            return 0
        if args.command == "export":
            from .export import export_policies, find_checkpoint

            paths = export_policies(find_checkpoint(args.checkpoint), args.out_dir, merge_lora=args.merge_lora,
                                    imports=resolve_modules(args.imports))
            print(json.dumps({pid: str(p) for pid, p in paths.items()}, indent=1))
            return 0
        if args.command == "eval":
            if args.config is not None:
                if args.checkpoint is not None:
                    raise UsageError(f"give a run directory or checkpoint ({args.checkpoint!r}) or --config, not both")
                res = evaluate_config(args.config or None, args.sets, episodes=args.episodes,
                                      temperature=args.temperature, num_cpus=args.num_cpus, imports=args.imports)
            elif args.checkpoint is None:
                raise UsageError("eval needs a run directory of llm-marl train (or a checkpoint in it); to evaluate "
                                 "a config's model(s) untrained: llm-marl eval --config [CONFIG.yaml]")
            elif args.sets:
                raise UsageError("--set changes a config (eval --config CONFIG.yaml); a checkpoint is evaluated with "
                                 "its run's settings (--episodes, --temperature)")
            else:
                res = evaluate_checkpoint(args.checkpoint, episodes=args.episodes, temperature=args.temperature,
                                          num_cpus=args.num_cpus, imports=args.imports)
            from .core.metrics import flatten

            print(json.dumps(flatten(res), indent=1, sort_keys=True))
            return 0
    except RunStopped as e:
        print(e.resume_line or "llm-marl: stopped by a signal", file=sys.stderr, flush=True)
        return 128 + e.signum
    except UsageError as e:
        print(f"llm-marl: error: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:
        print(f"llm-marl: config error: {e}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
