"""``popdist.poptorch`` in the emulator: PopTorch options set up for this PopRun instance."""

from __future__ import annotations

from popviz.emulator import popdist
from popviz.emulator.options import Options as _Options


class Options(_Options):
    """``poptorch.Options`` with this instance's local replicas as the replication factor and
    its index and the instance count as the distributed process id and count (so
    ``poptorch.DataLoader`` reads this instance's share of the dataset)."""

    def __init__(self, ipus_per_replica: int | None = None) -> None:
        super().__init__()
        if ipus_per_replica is not None and ipus_per_replica < 1:
            raise RuntimeError(f"popdist.poptorch.Options: ipus_per_replica must be at least 1, "
                               f"got {ipus_per_replica}")
        self.replicationFactor(popdist.getNumLocalReplicas())
        self.Distributed.configureProcessId(popdist.getInstanceIndex(), popdist.getNumInstances())


__all__ = ["Options"]
