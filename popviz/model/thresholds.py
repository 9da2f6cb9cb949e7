"""The thresholds that decide what an execution profile's runs are, shared by the sources (reading
a raw profile) and the analyses through :mod:`popviz.model.aggregate`. Every other number the
analyses compare against is in :mod:`popviz.analysis.thresholds`; docs/analyses.md gives the
reasoning behind each value.
"""

from __future__ import annotations

# ------------------------------------------------------------------------------ execution runs

INFER_PIPELINED_OVERLAP_FRAC = 0.05
"""Reading a profile without a capture manifest (popviz.sources.infer): the execution strategy
is inferred as PipelinedExecution when the compute steps of different IPUs run at the same time
for at least this fraction of the compute cycles (sharded stages never overlap; a pipeline
overlaps in every steady-state cycle), ShardedExecution otherwise."""

MAIN_RUN_MIN_COMPUTE_FRAC = 0.5
"""A run counts as one executor call when its OnTileExecute cycles are at least this fraction of
the busiest run's. Calls of one engine repeat the same program, so their compute is nearly equal;
host weight/optimizer copy runs execute a small fraction of it and are left out."""
