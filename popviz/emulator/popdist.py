"""A stand-in for Graphcore's ``popdist`` package, so PopRun-style scripts run in the emulator.

PopRun starts one process per instance (through ``mpirun``) and tells each, in its environment,
how the replicas are spread: ``POPDIST_NUM_TOTAL_REPLICAS``, ``POPDIST_NUM_LOCAL_REPLICAS``,
``POPDIST_NUM_IPUS_PER_REPLICA``, ``POPDIST_REPLICA_INDEX_OFFSET``,
``POPDIST_UNIFORM_REPLICAS_PER_INSTANCE`` and ``POPDIST_LOCAL_INSTANCE_INDEX``, with the instance
index and count from OpenMPI (``OMPI_COMM_WORLD_RANK`` / ``OMPI_COMM_WORLD_SIZE``). The queries
below read exactly those; without them (a plain ``python train.py``) ``isPopdistEnvSet()`` is
False and the queries describe one instance holding every replica.

Under ``popviz emulate`` the names ``popdist`` and ``popdist.poptorch`` import this module and
:mod:`popviz.emulator.popdist_poptorch` (see ``docs/emulator.md``). Several instances run the way
PopRun runs them: start one process per instance with its own ``OMPI_COMM_WORLD_RANK``. The
emulator does not communicate between instances: each process trains its own replicas on its
share of the data (the gradient all-reduce across instances is not emulated; each instance's
report estimates its own replicas' work).
"""

from __future__ import annotations

import os

ENV_TOTAL_REPLICAS = "POPDIST_NUM_TOTAL_REPLICAS"
ENV_LOCAL_REPLICAS = "POPDIST_NUM_LOCAL_REPLICAS"
ENV_IPUS_PER_REPLICA = "POPDIST_NUM_IPUS_PER_REPLICA"
ENV_REPLICA_OFFSET = "POPDIST_REPLICA_INDEX_OFFSET"
ENV_UNIFORM = "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE"
ENV_LOCAL_INSTANCE = "POPDIST_LOCAL_INSTANCE_INDEX"
RANK_VARIABLES = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"))
"""Where an instance learns its index and the instance count (OpenMPI, then other MPIs)."""

_initialised = False


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise RuntimeError(f"popdist: {name}={raw!r} is not an integer; PopRun sets it to one "
                           "(unset it to run a single instance)") from None


def isPopdistEnvSet() -> bool:
    """True when PopRun (or an equivalent launcher) set this process's PopDist environment."""
    return ENV_TOTAL_REPLICAS in os.environ and ENV_IPUS_PER_REPLICA in os.environ


def isUsingPopdist() -> bool:
    return isPopdistEnvSet()


def getInstanceIndex() -> int:
    """This instance's index (its MPI rank), 0 without PopRun."""
    for rank, _size in RANK_VARIABLES:
        if rank in os.environ:
            return _int(rank, 0)
    return 0


def getNumInstances() -> int:
    """Instances in the run (the MPI world size), 1 without PopRun."""
    for _rank, size in RANK_VARIABLES:
        if size in os.environ:
            return _int(size, 1)
    return 1


def getNumTotalReplicas() -> int:
    return _int(ENV_TOTAL_REPLICAS, 1)


def getNumLocalReplicas() -> int:
    """Replicas this instance runs (all of them without PopRun)."""
    return _int(ENV_LOCAL_REPLICAS, getNumTotalReplicas())


def getNumIpusPerReplica() -> int:
    return _int(ENV_IPUS_PER_REPLICA, 1)


def getReplicaIndexOffset() -> int:
    """Index of this instance's first replica among all replicas."""
    return _int(ENV_REPLICA_OFFSET, getInstanceIndex() * getNumLocalReplicas())


def getLocalInstanceIndex() -> int:
    return _int(ENV_LOCAL_INSTANCE, 0)


def isUniformReplicasPerInstance() -> bool:
    return os.environ.get(ENV_UNIFORM, "1").strip() not in ("0", "false", "False")


def getDeviceId(ipus_per_replica: int | None = None) -> int:
    """The device this instance attaches to: the emulated IPUs have no ids, so 0."""
    return 0


def init() -> None:
    """Check the PopDist environment is consistent (as PopDist's initialisation does before it
    sets up communication between instances; the emulator has none to set up)."""
    global _initialised
    total, local, instances = getNumTotalReplicas(), getNumLocalReplicas(), getNumInstances()
    index = getInstanceIndex()
    if min(total, local, instances, getNumIpusPerReplica()) < 1:
        raise RuntimeError("popdist: replica, instance and IPU counts must be at least 1 "
                           f"({ENV_TOTAL_REPLICAS}={total}, {ENV_LOCAL_REPLICAS}={local}, "
                           f"instances={instances})")
    if not 0 <= index < instances:
        raise RuntimeError(f"popdist: instance index {index} is outside the {instances} instance(s)")
    if isUniformReplicasPerInstance() and local * instances != total:
        raise RuntimeError(f"popdist: {instances} instance(s) × {local} local replica(s) is not the "
                           f"{total} total replicas ({ENV_TOTAL_REPLICAS}); launch with PopRun's "
                           "--num-instances and --num-replicas")
    _initialised = True


def isInitialised() -> bool:
    return _initialised


def finalize() -> None:
    global _initialised
    _initialised = False


__all__ = ["finalize", "getDeviceId", "getInstanceIndex", "getLocalInstanceIndex", "getNumInstances",
           "getNumIpusPerReplica", "getNumLocalReplicas", "getNumTotalReplicas", "getReplicaIndexOffset",
           "init", "isInitialised", "isPopdistEnvSet", "isUniformReplicasPerInstance", "isUsingPopdist"]
