"""Run PopTorch's own tests (from a graphcore/poptorch checkout) against popviz's emulator and
print a per-file table of passed / failed / errors / skipped.

    python tools/poptorch_tests.py /path/to/poptorch            # the files that test the public API
    python tools/poptorch_tests.py /path/to/poptorch options_test.py loop_test.py

Not part of popviz's test suite: it needs a checkout of the public graphcore/poptorch repository
(its ``tests/`` directory), which is never copied into this repository. The tests are copied to a
temporary directory; the one change made there is the one PopTorch's ``tests/helpers.py`` needs to
import without PopTorch's compiled core: its ``import poptorch.poptorch_core`` is wrapped in
``try/except ImportError``. Without torchvision installed, the test suite's stand-in
(``tests/fake_torchvision``) goes on the path. Each file runs in its own ``pytest`` process with the emulator as
``poptorch`` (``popviz.emulator.launch.emulated_env``). Many of those tests read PopART / Poplar log
lines or call compiler internals; they cannot pass against an emulator (see docs/emulator.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

FILES = ("batching_test.py", "buffers_test.py", "inputs_test.py", "options_test.py", "pipelining_test.py",
         "outputs_test.py", "loop_test.py", "sharding_test.py", "phased_execution_test.py",
         "requires_grad_test.py", "hooks_test.py", "replicated_graph_test.py", "custom_loss_test.py",
         "weights_writing_test.py", "poplar_executor_test.py", "test_perf_counters.py", "optimizers_test.py",
         "half_test.py", "dataloader_test.py")
"""The files that exercise PopTorch's public Python API (docs/emulator.md)."""

FAKE_TORCHVISION = Path(__file__).resolve().parent.parent / "tests" / "fake_torchvision"
"""The test suite's torchvision stand-in, used when torchvision is not installed."""

CORE_IMPORT = "import poptorch.poptorch_core as poptorch_core  # type: ignore"


def prepare(checkout: Path, dest: Path) -> Path:
    """Copy ``checkout/tests`` to ``dest`` and make its helpers importable without the core."""
    source = checkout / "tests" if (checkout / "tests").is_dir() else checkout
    if not (source / "helpers.py").is_file():
        sys.exit(f"error: {source} holds no helpers.py: pass a graphcore/poptorch checkout (or its tests/)")
    tests = dest / "tests"
    shutil.copytree(source, tests, ignore=shutil.ignore_patterns("cpp", "gnn", "custom_ops", "__pycache__"))
    helpers = tests / "helpers.py"
    text = helpers.read_text()
    if CORE_IMPORT in text:
        text = text.replace(CORE_IMPORT, "try:\n    " + CORE_IMPORT + "\nexcept ImportError:\n"
                            "    poptorch_core = None")
    helpers.write_text(text)
    return tests


def run_file(tests: Path, name: str, timeout: float) -> dict:
    from popviz.emulator.launch import emulated_env

    env = emulated_env(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    if importlib.util.find_spec("torchvision") is None:  # half_test.py imports it: the tests' stand-in
        env["PYTHONPATH"] += os.pathsep + str(FAKE_TORCHVISION)
    junit = tests / f".{name}.xml"
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p",
                               "no:cacheprovider", f"--junitxml={junit}", "-o", "addopts=", name],
                              cwd=tests, env=env, capture_output=True, text=True, timeout=timeout)
        output = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        output = "timed out"
    seconds = time.perf_counter() - started
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures: list[tuple[str, str]] = []
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            outcome = "passed"
            for child in case:
                if child.tag in ("failure", "error"):
                    outcome = "failed" if child.tag == "failure" else "errors"
                    failures.append((case.get("name", "?"), (child.get("message") or "")[:200]))
                elif child.tag == "skipped":
                    outcome = "skipped"
            counts[outcome] += 1
    loaded = junit.is_file() and "error collecting" not in output and "ERROR collecting" not in output
    return {"file": name, **counts, "loads": loaded, "seconds": seconds, "failures": failures,
            "tail": output.strip().splitlines()[-3:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a graphcore/poptorch checkout (or its tests/ directory)")
    parser.add_argument("files", nargs="*", help=f"test files (default: the {len(FILES)} public-API files)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per file")
    parser.add_argument("--failures", action="store_true", help="list every failing test with its message")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="poptorch-tests-") as tmp:
        tests = prepare(args.checkout, Path(tmp))
        rows = []
        for name in args.files or FILES:
            row = run_file(tests, name, args.timeout)
            rows.append(row)
            print(f"{name:<28} {row['passed']:>5} passed {row['failed']:>4} failed {row['errors']:>3} errors "
                  f"{row['skipped']:>3} skipped  {'loads' if row['loads'] else 'DOES NOT LOAD'}  "
                  f"{row['seconds']:.0f} s", flush=True)
            if not row["loads"]:
                print("    " + " | ".join(row["tail"])[:300])
            if args.failures:
                for test, message in row["failures"]:
                    print(f"    {test}: {message.splitlines()[0] if message else ''}")
        total = {k: sum(r[k] for r in rows) for k in ("passed", "failed", "errors", "skipped")}
        print(f"{'total':<28} {total['passed']:>5} passed {total['failed']:>4} failed {total['errors']:>3} errors "
              f"{total['skipped']:>3} skipped; {sum(r['loads'] for r in rows)} of {len(rows)} files load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
