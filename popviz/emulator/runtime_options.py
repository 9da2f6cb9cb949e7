"""The Poplar engine and runtime options the emulator reads, from the script and the environment.

Poplar merges the options a program gives its engine with ``POPLAR_ENGINE_OPTIONS`` (JSON; the
environment wins), and its runtime options (stream callbacks among them) with
``POPLAR_RUNTIME_OPTIONS``. Light on purpose: the launchers check the environment with it before
they start a script.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from popviz.emulator.errors import Error

ENGINE_ENV = "POPLAR_ENGINE_OPTIONS"
RUNTIME_ENV = "POPLAR_RUNTIME_OPTIONS"
EXAMPLES = {ENGINE_ENV: '{"autoReport.all":"true","autoReport.directory":"./reports"}',
            RUNTIME_ENV: '{"streamCallbacks.multiThreadMode":"collaborative"}'}
MULTI_THREAD_MODES = ("singleThread", "collaborative", "dedicated")


def truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def env_options(name: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON object in the environment variable ``name`` ({} when unset or empty)."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise Error(f"{name} is not valid JSON ({exc.msg} at column {exc.colno}): {raw!r}; write it "
                    f"like '{EXAMPLES[name]}'") from None
    if not isinstance(value, dict):
        raise Error(f"{name} must be a JSON object, got {raw!r}; write it like '{EXAMPLES[name]}'")
    return value


def engine_options(options_engine: Mapping[str, Any], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The engine options in effect: the program's, overridden by ``POPLAR_ENGINE_OPTIONS``."""
    return {**options_engine, **env_options(ENGINE_ENV, env)}


def prefetch_depth(popart: Mapping[str, Any]) -> int:
    """Inputs the host may prepare ahead of the IPU: PopART's ``defaultPrefetchBufferingDepth``
    (Poplar prefetches by default with a depth of 1), 0 when ``enablePrefetchDatastreams`` is
    off."""
    if not truthy(str(popart.get("enablePrefetchDatastreams", True)).lower()):
        return 0
    try:
        return max(1, int(popart.get("defaultPrefetchBufferingDepth", 1)))
    except (TypeError, ValueError):
        return 1


def callback_threads(options_engine: Mapping[str, Any], local_replicas: int,
                     env: Mapping[str, str] | None = None) -> int:
    """Host threads serving the stream callbacks: Poplar runs them all on the main thread unless
    ``streamCallbacks.multiThreadMode`` is ``collaborative`` or ``dedicated`` with worker threads
    (``numWorkerThreads``: a number or ``auto``, one per core). Each replica's streams are served
    by one thread at a time, so at most one thread per local replica helps. Runtime options come
    from the engine options and ``POPLAR_RUNTIME_OPTIONS`` (which wins); a value Poplar would
    reject is an error here too."""
    merged = {**engine_options(options_engine, env), **env_options(RUNTIME_ENV, env)}
    mode = str(merged.get("streamCallbacks.multiThreadMode", "singleThread")).strip()
    if mode not in MULTI_THREAD_MODES:
        raise Error(f"streamCallbacks.multiThreadMode {mode!r} is not one of {', '.join(MULTI_THREAD_MODES)} "
                    "(Poplar's runtime options)")
    workers = str(merged.get("streamCallbacks.numWorkerThreads", "0")).strip().lower()
    if workers != "auto" and not (workers.isdigit()):
        raise Error(f"streamCallbacks.numWorkerThreads {workers!r} is not a number of threads or \"auto\" "
                    "(Poplar's runtime options)")
    if mode == "singleThread":
        return 1
    if workers == "auto":
        return max(1, local_replicas)
    return max(1, min(int(workers), local_replicas))


def check_environment(env: Mapping[str, str]) -> None:
    """Raise :class:`Error` for Poplar options in ``env`` that Poplar would reject (bad JSON, a
    stream-callback value it does not know), before a script is started with them."""
    env_options(ENGINE_ENV, env)
    callback_threads({}, 1, env)
