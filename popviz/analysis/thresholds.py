"""Every number the analyses compare against, in one place (but for the two shared with the sources).

Each constant says what it bounds; docs/analyses.md gives the reasoning behind its value. Change a
value here and in that document together. The two that decide what a profile's runs are (which
run is an executor call, when a raw profile is pipelined) are used by the sources too and live
in :mod:`popviz.model.thresholds`.
"""

from __future__ import annotations

# ------------------------------------------------------------------------------------ pipeline

IMBALANCE_WARN_RATIO = 1.2
"""Pipelined stages: warn when the slowest stage's cycles per micro-batch exceed the mean over
stages by this ratio (balanced stages would then be up to 20% faster)."""

WEIGHT_UPDATE_NOTE_FRAC = 0.2
"""PIPE001 says how much of the bottleneck stage's cycles are its IPU's weight update when it is
this share or more (no split of the layers moves it; a streamed optimizer state makes it long)."""

TIE_FRAC = 0.01
"""Stages within this fraction of the slowest stage's cycles are as slow as it (a tie): work is
then recommended to move towards the least loaded stage, not into a neighbour as busy."""

RAMP_EFFICIENCY_WARN_FRAC = 0.8
"""Pipelined: warn when the ramp efficiency is below this (a fifth or more of every weight update
spent filling and draining the pipeline). Time-weighted from the execution profile when there is
one (the bottleneck IPU's work over its work plus its ramp wait); else the count G / (G + S - 1)."""

RAMP_EFFICIENCY_TARGET_FRAC = 0.9
"""The ramp efficiency the recommendation aims for, and below which an info finding is given."""

# -------------------------------------------------------------------------------------- memory

TILE_FULL_FRAC = 0.9
"""A tile above this fraction of its capacity counts as nearly full (``tiles_over_90pct``); any
such tile makes a warning."""

IPU_FULL_FRAC = 0.9
"""Per-IPU memory only (no tile figures): warn when an IPU's mean fill is above this, and the fill
the memory levers aim under. ``popviz plan``'s default budget is the same fraction
(``planner.DEFAULT_HEADROOM_FRAC``), so a split the planner says fits is one this analysis does
not warn about (at 0.8, the split ``plan`` proposed for ``sample_reports/oom_model``, 85% on IPU0,
drew a warning once captured)."""

MEMORY_SPREAD_WARN_FRAC = 0.2
"""Warn when an IPU under pressure is this much (fraction of capacity) fuller than the emptiest
IPU of the same replica: blocks can move there."""

VARIABLE_DOMINANT_FRAC = 0.3
"""Variables at or above this share of an IPU's bytes count as dominant: offloading optimizer
state is then the lever that fits."""

NOT_ALWAYS_LIVE_DOMINANT_FRAC = 0.5
"""Not-always-live bytes at or above this share of an IPU's bytes point at temporaries and
activations: lower available memory proportion and recomputation are then the levers."""

DEFAULT_AVAILABLE_MEMORY_PROPORTION = 0.6
"""PopTorch's default available memory proportion (used when the report does not record one)."""

MIN_AVAILABLE_MEMORY_PROPORTION = 0.05
"""Never suggest an available memory proportion below this."""

MAX_MEMORY_LEVERS = 4
"""At most this many levers are listed in one memory recommendation (the best-fitting first)."""

# ------------------------------------------------------------------------------------- host I/O

STREAM_COPY_WARN_FRAC = 0.1
"""Warn when stream copies (host transfers, waiting included) take this share of an IPU's
cycles in a call."""

HOST_WAIT_DOMINANT_FRAC = 0.5
"""When StreamCopyBegin + End (waiting for the host) are at least this share of the stream-copy
cycles, the host is the bottleneck, not the transfer itself."""

HOST_THREAD_INPUT_BYTES_PER_SECOND = 2.35e9
"""What one host thread hands Poplar's input streams per second, measured on hardware (Poplar's
tutorial 6 trace: ~17 ms of StreamCopyBegin for 40 MB; docs/emulator.md). Poplar runs every
stream callback on the process's main thread unless ``streamCallbacks.multiThreadMode`` says
otherwise. The emulator's ``DEFAULT_HOST_PROCESS_GBPS`` is the same measurement (analyses do not
import the emulator)."""

HOST_BYTE_BOUND_FRAC = 0.5
"""HIO001 calls a host wait byte-bound when the call's inputs need at least this share of
``HOST_THREAD_INPUT_BYTES_PER_SECOND`` over the call's IPU time: then the host's hand-over of the
bytes, not the round trips, sets the pace, and fewer bytes or more host threads are the levers."""

HOST_LEVER_MIN_SHARE_FRAC = 0.1
"""HIO001 proposes shrinking a direction of host transfers (inputs or outputs) only when it moves
at least this share of the bytes per call: halving 0.3% of the bytes cannot shorten the copies."""

OUTPUT_BYTES_SAVED_WARN = 64 * 2**20
"""Bytes per call that another output mode would save, above which inference gets a warning."""

OUTPUT_BYTES_SAVED_INFO = 2**20
"""Bytes per call another output mode would save, above which inference gets an info finding and
training with All or EveryN a warning (below it, training gets an info finding: a few KiB of
losses per call are worth knowing about, not worth failing a gate)."""

CALL_DEVICE_SECONDS_MIN = 0.01
"""Warn when one executor call keeps the IPUs busy for less than this (device iterations too
low: the fixed host cost per call dominates)."""

CALL_DEVICE_SECONDS_TARGET = 0.05
"""The device time per call the device-iterations recommendation aims for."""

# ----------------------------------------------------------------------------------- instances
# Multi-instance runs (PopRun): reasoning also in docs/capture.md, "Multi-instance runs".

CALL_TIME_SLOWER_FRAC = 0.25
"""Flag an instance whose median call wall time is this much above the others' median. Host
timings of identical work vary by a few percent between hosts; a quarter more is a different
host load (data loading, NUMA placement, a busy neighbour), not noise."""
MEMORY_HIGHER_FRAC = 0.01
"""Flag an instance whose peak IPU memory is this much above the others'. Instances compile the
same graph, so their memory is identical; any real difference means a different program."""
CYCLES_HIGHER_FRAC = 0.05
"""Flag an instance whose profiled cycles per run are this much above the others'. The same
program on the same hardware runs in nearly the same cycles; 5% more is a different program or
a different exchange/sync pattern."""
