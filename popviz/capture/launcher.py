"""Run a command with profiling on and popviz's hooks installed; record the run.

``popviz capture -o DIR -- python train.py`` (see ``docs/capture.md``):

1. checks everything it can before touching anything (the command exists, the user's
   ``POPLAR_ENGINE_OPTIONS`` / ``PVTI_OPTIONS`` are JSON objects, DIR is new or empty);
2. claims DIR (a fresh ``popviz-reports/<timestamp>`` by default; ``--new-run`` makes a
   timestamped subdirectory) and writes ``DIR/popviz-run.json`` with status ``running``;
3. starts the child with the engine options merged into its environment and a bootstrap
   ``sitecustomize`` (in a temporary directory put first on ``PYTHONPATH``, chaining any existing
   one) that installs :mod:`popviz.capture.hooks` at interpreter start;
4. shows the child's stdout and stderr live and saves both to ``DIR/capture.log``; forwards
   SIGINT and SIGTERM sent to popviz (not those the terminal already sent to the child);
5. completes ``popviz-run.json`` (exit status, end time, engines found) whatever happened, prints
   a summary and exits with the child's exit code (128 + N when a signal N killed it).

The run directory and manifest are :mod:`popviz.capture.rundir`; the child's environment
(engine options, bootstrap) :mod:`popviz.capture.childenv`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from popviz._version import __version__
from popviz.capture import hooks
from popviz.capture.childenv import (
    ENGINE_OPTIONS_ENV,
    PVTI_ENV,
    conflict_message,
    emulated,
    engine_options,
    lwp_options,
    make_bootstrap,
    merge_options,
    outer_options_removed,
    parse_json_env,
    prepend_path,
    sdk_versions,
)
from popviz.capture.follow import follow_reports
from popviz.capture.rundir import (
    LOG_FILE,
    RUN_FILE,
    RUN_FORMAT,
    RUN_FORMAT_VERSION,
    claim_dir,
    finish_record,
    how_ended,
    iso_now,
    make_reserve,
    plan_dir,
    unsaved_engine_files,
    unupdated_reports,
    write_run_manifest,
)
from popviz.childproc import SignalForwarder, exit_status, find_command
from popviz.errors import PopvizError, UsageError, shown
from popviz.escape import status_line as esc_status
from popviz.fileio import RUN_ID_ENV, new_id, write_error
from popviz.model.names import output_mode_label
from popviz.model.numbers import wall_seconds
from popviz.ui import wrap_line

TEE_JOIN_SECONDS = 2.0
"""How long to wait, once the child has exited, for output still in the pipes (a grandchild that
keeps them open is not waited for)."""


DISK_FULL_WORDS = (os.strerror(errno.ENOSPC).encode(), os.strerror(errno.EDQUOT).encode())


class RunError(PopvizError):
    """The command could not be started."""


# ------------------------------------------------------------------------------ the run

class Tee:
    """Copy the child's stdout and stderr to ours, live, and to the log file."""

    def __init__(self, log: IO[bytes], status: Any = None) -> None:
        self.log = log
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.status = status
        """A :class:`popviz.capture.status_line.StatusLine` on a terminal (emulated runs), or None."""
        self.logged = 0
        """Bytes written to the log so far."""
        try:
            self.base = os.fstat(log.fileno()).st_size
        except (OSError, ValueError, AttributeError):
            self.base = 0
        self.failure: str | None = None
        """Why the log could not be written any more (``No space left on device``), or None."""
        self.failure_errno: int | None = None
        self.child_disk_full = False
        """The child's popviz code (hooks, emulator) said a write failed for lack of space."""
        self.on_failure: Any = None
        """Called once, with the cause and the bytes logged, when the log stops."""

    def start(self, source: IO[bytes], sink: IO[bytes] | None, stderr: bool = False) -> None:
        thread = threading.Thread(target=self._pump, args=(source, sink, stderr), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _pump(self, source: IO[bytes], sink: IO[bytes] | None, stderr: bool = False) -> None:
        fd = source.fileno()
        pending = b""  # the log gets whole lines, so stdout and stderr lines do not mix in it
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                self._log(pending)
                break
            if sink is not None:
                try:
                    if self.status is not None:
                        self.status.write(sink, chunk, stderr)
                    else:
                        sink.write(chunk)
                        sink.flush()
                except (OSError, ValueError):
                    sink = None  # our stdout went away (e.g. `| head`): keep logging
            if stderr and b"popviz" in chunk and any(c in b" ".join(chunk.split()) for c in DISK_FULL_WORDS):
                self.child_disk_full = True  # popviz's hooks or emulator in the child could not write (its
                # message broken between words at the terminal's width)
            pending += chunk
            end = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1
            if len(pending) > 65536:
                end = len(pending)
            if end:
                self._log(pending[:end])
                pending = pending[end:]

    def _log(self, data: bytes) -> None:
        if not data:
            return
        with self.lock:
            if self.log.closed or self.failure is not None:
                return
            try:
                view = memoryview(data)
                while view:  # unbuffered: a short write on a full disk leaves the rest in view
                    view = view[self.log.write(view):]
                self.logged += len(data)
            except (OSError, ValueError) as exc:
                with contextlib.suppress(OSError, ValueError):  # the log ends at a whole write
                    os.ftruncate(self.log.fileno(), self.base + self.logged)
                # A full disk (or quota, or I/O error) must not stop the script: it would block on
                # its pipe once both threads died. The output is still shown; the log stops here.
                self.failure = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                self.failure_errno = getattr(exc, "errno", None)
                if self.on_failure is not None:
                    with contextlib.suppress(Exception):
                        self.on_failure(self.failure, self.logged)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        with self.lock:
            try:
                self.log.close()
            except OSError as exc:  # the last buffered bytes could not be written
                if self.failure is None:
                    self.failure = exc.strerror or str(exc)
                    self.failure_errno = exc.errno


def _engines_found(root: Path) -> list[dict[str, Any]]:
    """Every engine directory under the run directory, with what it holds."""
    from popviz.sources.discover import find_engines

    try:
        engines = find_engines(root)
    except PopvizError:
        return []
    found = []
    for engine in engines:
        if engine.path == root:
            continue
        names = set(os.listdir(engine.path))
        entry: dict[str, Any] = {"path": str(engine.path.relative_to(root)),
                                 "files": sorted(n for n in names if not n.startswith("."))}
        manifest_path = engine.path / "popviz-model.json"
        if manifest_path.is_file():
            with contextlib.suppress(Exception):
                doc = json.loads(manifest_path.read_text(encoding="utf-8"))
                opts = doc.get("options") or {}
                calls = doc.get("calls") or {}
                entry["model"] = {
                    "mode": (doc.get("executor") or {}).get("mode"),
                    "execution_strategy": opts.get("execution_strategy"),
                    "stages": len(opts.get("stages") or []),
                    "device_iterations": opts.get("device_iterations"),
                    "gradient_accumulation": opts.get("gradient_accumulation"),
                    "replication_factor": opts.get("replication_factor"),
                    "output_mode": opts.get("output_mode"),
                    "output_return_period": opts.get("output_return_period"),
                    "calls": calls.get("count"),
                    "compile_seconds": (calls.get("compile") or {}).get("wall_seconds"),
                    "poptorch_compile_seconds": (calls.get("compile") or {}).get("poptorch_seconds"),
                    "later_calls_seconds": next((s.get("sum") for s in calls.get("stats") or []
                                                 if s.get("metric") == "wall_seconds"), None),
                    "compile_error": (calls.get("compile") or {}).get("error"),
                    "interrupted": (calls.get("compile") or {}).get("interrupted"),
                    "poptorch": (doc.get("versions") or {}).get("poptorch"),
                    "record": doc.get("status"),
                }
        bundle_path = engine.path / "popviz-report.json"
        if "model" in entry and bundle_path.is_file():
            # An emulated run: the report's configuration is what ran (under --split the script's
            # own stages did not, and the manifest records none).
            with contextlib.suppress(Exception):
                cfg = json.loads(bundle_path.read_text(encoding="utf-8")).get("config") or {}
                if isinstance(cfg.get("stages"), list):
                    entry["model"]["stages"] = len(cfg["stages"])
                if cfg.get("execution_strategy"):
                    entry["model"]["execution_strategy"] = cfg["execution_strategy"]
        found.append(entry)
    return found


def _times_text(m: Mapping[str, Any], run: Mapping[str, Any]) -> str:
    """Where an engine's time went, truthfully: the compile (for the emulator: the trace and
    estimate) apart from the calls' execution (on the CPU when emulated).

    ``compile_seconds`` is the wall time of the call that compiled, which also ran that call;
    ``poptorch_compile_seconds`` is the executor's own ``compilationTime()``."""
    from popviz.emulator.calls import ENV as CALLS_ENV

    wall, own = m.get("compile_seconds"), m.get("poptorch_compile_seconds")
    if wall is None:
        return ""
    later = m.get("later_calls_seconds") or 0.0
    if not run.get("emulated"):
        if own is not None:
            return f", compiled in {wall_seconds(own)}"
        return f", compile and first call {wall_seconds(wall)}"
    if own is None:
        return f", estimate and first call {wall_seconds(wall)}"
    text = f", estimated in {wall_seconds(own)}"
    limit = str((run.get("environment") or {}).get(CALLS_ENV, ""))
    first_ran = limit != "1"  # under --calls 1 the first call is estimated, not run
    cpu = max(0.0, wall - own) * first_ran + later
    if not first_ran and m.get("calls", 0) <= 1:
        return text + ", not run (--calls 1)"
    if m.get("calls") == 0:  # compile() alone: nothing was called
        return text + ", never called (compile() only)"
    return text + f", calls run on the CPU in {wall_seconds(cpu)}"


SETUP_ERROR = "LayerSetupError"
"""How a compile error popviz's own ``--split`` / ``--layer-depth`` raised begins (the emulator's
``structure.LayerSetupError``): the model was refused before anything was estimated."""


def summary_lines(run: Mapping[str, Any], root: Path) -> list[str]:
    """The one-screen summary printed when the run ends."""
    from popviz import escape as esc
    from popviz.emulator.structure import SPLIT_ENV
    from popviz.sources.runrecord import not_reached_reason

    code = run.get("exit_code")
    what = f"killed by {run['signal']}" if run.get("signal") else f"exit code {code}"
    line = esc.term(run["command_line"])  # one line; long commands end at a word: never "--gradie..."
    cmd = line if len(line) <= 60 else line[:57].rsplit(" ", 1)[0] + " ..."
    lines = [f"popviz capture: {cmd} finished ({what}, "
             f"{run.get('duration_seconds', 0):.1f} s)"]
    engines = run.get("engines") or []
    if not engines:
        hint = "" if run.get("emulated") else " (on a machine without IPUs, add --emulate)"
        lines.append("  no engine captured: the command created no PopTorch executor and Poplar wrote "
                     f"no profile{hint}")
    width = max((len(e["path"]) for e in engines), default=0)
    for e in engines:
        files = set(e["files"])
        report = ("profile.pop" if "profile.pop" in files else
                  "popviz bundle" if "popviz-report.json" in files else "no profile")
        desc = [report]
        m = e.get("model")
        if m and report == "no profile" and m.get("calls") == 0 and m.get("compile_seconds") is None \
                and not m.get("compile_error") and not m.get("interrupted"):
            early = not_reached_reason(run) or (
                "its record was never finalised (the hooks could not update popviz-model.json: see the log)"
                if m.get("record") == "running" else None)
            desc = [f"not reached: {early}" if early else
                    f"NEVER CALLED: the script built this {m.get('mode') or 'PopTorch'} model but never called or "
                    "compiled it (an empty poptorch.DataLoader?)",
                    f"D={m.get('device_iterations')} G={m.get('gradient_accumulation')} "
                    f"R={m.get('replication_factor')}"]
        elif m:
            strategy = m.get("execution_strategy") or "single IPU"
            split = (run.get("environment") or {}).get(SPLIT_ENV)
            stages = (f"stages of --split {split} (no report)" if split and not m.get("stages")
                      else f"{m.get('stages')} stage(s)")
            desc.append(f"{m.get('mode') or '?'}, {strategy}, {stages}")
            desc.append(f"D={m.get('device_iterations')} G={m.get('gradient_accumulation')} "
                        f"R={m.get('replication_factor')}, output "
                        f"{output_mode_label(m.get('output_mode'), m.get('output_return_period'))}")
            calls = f"{m.get('calls')} call(s)" + _times_text(m, run)
            if m.get("record") == "running":
                calls += " (record not finalised: counts stop at its last update)"
            if m.get("compile_error"):
                calls += f", compile failed: {esc.term(m['compile_error'])}"  # the script's text: no ESC
            elif m.get("interrupted") == "first call":
                calls += ", interrupted (Ctrl-C) during its first call, after the compile succeeded"
            elif m.get("interrupted") == "compile":
                calls += ", interrupted (Ctrl-C) while compiling"
            desc.append(calls)
        else:
            desc.append("no popviz-model.json (hooks did not see this executor)")
        lines.append(f"  {e['path']:<{width}}  " + " · ".join(desc))
    early = not_reached_reason(run)
    if engines and early and early.startswith("--calls "):
        n = early.split()[1]
        lines.append(f"  --calls {n} stopped the script there: models built or called later (validation; Lightning's "
                     "training, after its sanity check) are not captured; raise --calls to reach them")
    lines.append(f"  log {shown(root / LOG_FILE)} · run record {shown(root / RUN_FILE)}")
    if engines and run.get("instance") and root.name == run["instance"]:
        # one rank of a run whose ranks each ran popviz: the run's directory holds every instance
        lines.append(f"next: popviz analyse {shown(root.parent)} (every instance, with the cross-instance "
                     f"checks; {shown(root)} alone has none)")
    elif engines and all(((e.get("model") or {}).get("compile_error") or "").startswith(SETUP_ERROR)
                         for e in engines):
        # popviz's own --split / --layer-depth refused the model: nothing was estimated
        lines.append("next: correct the --split or --layer-depth the error names and capture again "
                     "(no engine here has a report to analyse)")
    elif engines:
        lines.append(f"next: popviz analyse {shown(root)}")
    return lines


def _status_line(err: IO[bytes]) -> Any:
    """A live status line for the emulator's heartbeats when ``err`` is a terminal, else None."""
    try:
        if not err.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    from popviz.capture.status_line import StatusLine

    return StatusLine(err, shutil.get_terminal_size().columns)


def run_capture(command: Sequence[str], *, output: str | None = None, new_run: bool = False,
                emulate: bool = False, pvti: bool = False, run_count: int | None = None,
                calls: int | None = None, emulator_env: Mapping[str, str] | None = None,
                lwp: str | None = None, stdout: IO[bytes] | None = None, stderr: IO[bytes] | None = None) -> int:
    """Run ``command`` under capture; return the exit code popviz should exit with. ``lwp``: the
    program-name pattern Lightweight Profiling instruments (:func:`childenv.lwp_options`)."""
    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command to run: pass it after --, e.g. popviz capture -o out -- "
                         "python train.py")
    if run_count is not None and run_count < 1:
        raise UsageError(f"--run-count must be at least 1, got {run_count}")
    base_env = dict(os.environ)
    user_engine = outer_options_removed(parse_json_env(ENGINE_OPTIONS_ENV, base_env), base_env)
    user_pvti = parse_json_env(PVTI_ENV, base_env) if pvti else None
    problem = hooks.instance_env_problem(base_env)
    if problem:
        raise UsageError(f"launcher environment: {problem}")
    instance = hooks.instance_from_env(base_env)
    planned = plan_dir(output, new_run, instance)
    child_env = emulated(dict(base_env)) if emulate else dict(base_env)
    if calls is not None:
        from popviz.emulator.calls import ENV as CALLS_ENV

        child_env[CALLS_ENV] = str(calls)
    if emulate and emulator_env:
        child_env.update(emulator_env)
    if emulate:  # the child's output is a pipe (shown and logged): plain progress lines
        from popviz.emulator.progress import ENV as PROGRESS_ENV

        child_env.setdefault(PROGRESS_ENV, "plain")
    if emulate:
        from popviz.emulator.launch import check_command

        check_command(command, child_env)
    else:
        find_command(command, child_env)

    started = time.time()
    run: dict[str, Any] = {
        "format": RUN_FORMAT, "format_version": RUN_FORMAT_VERSION,
        "written_by": f"popviz {__version__}", "status": "running",
        "command": command, "command_line": subprocess.list2cmdline(command), "cwd": os.getcwd(),
        "started_at": iso_now(), "ended_at": None, "duration_seconds": None,
        "exit_code": None, "signal": None, "popviz_exit_code": None,
        "hostname": socket.gethostname(), "popviz_pid": os.getpid(), "child_pid": None,
        "instance": instance, "emulated": emulate,
        "versions": {"popviz": __version__, "python": sys.version.split()[0], **sdk_versions(base_env)},
        "environment": {}, "engine_options": {}, "log": LOG_FILE, "engines": [],
        "signals_received": [], "signals_forwarded": [], "notes": [], "write_errors": [],
        "run_id": new_id(),
    }
    root = claim_dir(planned, output, new_run, instance, run)
    abs_root = str(root.resolve())
    run_path = root / RUN_FILE
    err = stderr or sys.stderr.buffer
    out = stdout or sys.stdout.buffer

    def say(line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            err.write((esc_status(line) + "\n").encode())
            err.flush()

    bootstrap: Path | None = None
    forwarder = SignalForwarder()
    tee: Tee | None = None
    reserve: Path | None = None
    status_r: int | None = None
    unwritten: list[dict[str, str | None]] = []
    record_error: str | None = None
    exit_code = 3
    try:
        engine_opts, conflicts = merge_options(user_engine, {**engine_options(abs_root, run_count),
                                                             **lwp_options(lwp)})
        set_env = {ENGINE_OPTIONS_ENV: json.dumps(engine_opts), hooks.ENV_DIR: abs_root,
                   RUN_ID_ENV: run["run_id"]}
        if instance:
            set_env[hooks.ENV_INSTANCE] = instance
        if pvti:
            pvti_opts, pvti_conflicts = merge_options(user_pvti, {"enable": "true", "directory": abs_root})
            set_env[PVTI_ENV] = json.dumps(pvti_opts)
            conflicts += [dict(c, variable=PVTI_ENV) for c in pvti_conflicts]
        if "PYTHONUNBUFFERED" not in child_env:
            set_env["PYTHONUNBUFFERED"] = "1"  # live output through the pipe
        bootstrap = make_bootstrap()
        child_env.update(set_env)
        prepend_path(child_env, "PYTHONPATH", str(bootstrap))
        # Every variable the child gets from popviz (the emulator's PYTHONPATH entry included).
        run["environment"] = {k: v for k, v in sorted(child_env.items()) if base_env.get(k) != v}
        run["engine_options"] = {"user": user_engine, "merged": engine_opts,
                                 "conflicts": [dict(c, variable=c.get("variable", ENGINE_OPTIONS_ENV))
                                               for c in conflicts]}
        write_run_manifest(run_path, run)
        reserve = make_reserve(root)
        try:
            log = open(root / LOG_FILE, "ab", buffering=0)
        except OSError as exc:
            raise write_error(root / LOG_FILE, exc) from None
        tee = Tee(log, _status_line(err) if emulate else None)

        def log_stopped(cause: str, logged: int) -> None:
            run["write_errors"].append({"path": LOG_FILE, "error": cause, "bytes_written": logged})
            say(f"popviz capture: {shown(root / LOG_FILE)} cannot be written ({cause}) after {logged:,} bytes; "
                "the script keeps running and its output is still shown here, no longer saved")

        tee.on_failure = log_stopped
        from popviz.emulator.log import STATUS_FD_ENV, read_status

        status_r, status_w = os.pipe()  # the emulator says here which report it could not update
        os.set_blocking(status_r, False)
        os.set_blocking(status_w, False)  # a full pipe drops a message, never blocks the script
        child_env[STATUS_FD_ENV] = str(status_w)
        forwarder.before_spawn()
        try:
            proc = subprocess.Popen(command, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    preexec_fn=forwarder.child_setup, pass_fds=(status_w,))
        except OSError as exc:
            forwarder.restore()
            why = exc.strerror or str(exc)
            if isinstance(exc, FileNotFoundError) and os.path.exists(command[0]):
                why += ": the interpreter on its #! line was not found"
            run.update(status="launch_failed", error=why)
            raise RunError(f"{command[0]}: cannot be started ({why}); check the command after --") from None
        finally:
            os.close(status_w)
        forwarder.after_spawn(proc)
        say(f"popviz capture: reports go to {shown(root)}/ (log: {shown(root / LOG_FILE)})")
        for note in run["notes"]:
            say(f"popviz capture: {note}")
        for c in conflicts:
            say("popviz capture: " + conflict_message(c.get("variable", ENGINE_OPTIONS_ENV), c))
        run["child_pid"] = proc.pid
        write_run_manifest(run_path, run)
        tee.start(proc.stdout, out)
        tee.start(proc.stderr, err, stderr=True)
        returncode = proc.wait()
        unwritten = read_status(status_r)
        tee.join(TEE_JOIN_SECONDS)
        if tee.status is not None:
            with contextlib.suppress(OSError, ValueError):
                tee.status.close()
        status, exit_code, signame = exit_status(returncode)
        run.update(status=status, exit_code=returncode if returncode >= 0 else None, signal=signame,
                   popviz_exit_code=exit_code)
    except BaseException as exc:
        if run["status"] == "running":
            run.update(status="error", error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        forwarder.restore()
        if status_r is not None:
            os.close(status_r)
        run["signals_received"] = forwarder.received
        run["signals_forwarded"] = forwarder.forwarded
        if forwarder.escalated:
            run["signals_escalated"] = forwarder.escalated
        run["ended_at"] = iso_now()
        run["duration_seconds"] = round(time.time() - started, 3)
        followed = follow_reports(root)
        run["notes"] += followed
        run["engines"] = _engines_found(root)
        poptorch_versions = sorted({e["model"]["poptorch"] for e in run["engines"]
                                    if e.get("model", {}).get("poptorch")})
        if poptorch_versions:
            run["versions"]["poptorch"] = ", ".join(poptorch_versions)
        if tee is not None:
            tee.close()
            if tee.failure and not any(w["path"] == LOG_FILE for w in run["write_errors"]):
                run["write_errors"].append({"path": LOG_FILE, "error": tee.failure, "bytes_written": tee.logged})
        run["write_errors"] += unsaved_engine_files(run, tee is not None and tee.child_disk_full)
        run["write_errors"] += unupdated_reports(unwritten, root, run["write_errors"])
        if run["write_errors"] and run["popviz_exit_code"] == 0:
            run["popviz_exit_code"] = exit_code = 2  # the script ran, its capture is incomplete
        run["ended"] = how_ended(run)
        record_error = finish_record(run_path, run, reserve)
        if bootstrap is not None:
            shutil.rmtree(bootstrap, ignore_errors=True)
        if run["status"] not in ("running", "error", "launch_failed"):
            for line in summary_lines(run, root):
                for part in wrap_line(line):
                    say(part)
            for line in followed:
                say("  " + line)
        problems = [f"{shown(root / w['path'])}: cannot be written ({w['error']}) after {w['bytes_written']:,} "
                    "bytes: the script's output from then on was shown, not saved; free some space and capture "
                    "again" if w.get("bytes_written") is not None else
                    f"{shown(root / w['path'])}: {w['error']}; the capture is incomplete: free some space and "
                    "capture again" for w in run["write_errors"]]
        if record_error:
            problems.insert(0, f"{record_error} (the run record could not say how the run ended)")
        if problems:  # one message: the first thing that could not be written
            for part in wrap_line(f"popviz: error: {problems[0]}"):
                say(part)
    if record_error and exit_code == 0:
        return 2
    return exit_code
