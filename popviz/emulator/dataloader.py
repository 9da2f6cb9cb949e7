"""``poptorch.DataLoader`` and ``AsynchronousDataAccessor``: batches of D·G·R micro-batches.

The DataLoader yields combined batches of ``batch_size × deviceIterations ×
(replicationFactor / input_group_size) × gradientAccumulation`` samples (``drop_last=True`` by
default), which is what one executor call consumes. In a multi-process run
(``Options.Distributed``) each process reads its own contiguous share of the dataset. The
asynchronous modes load synchronously in the emulator (same batches, same order).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.data
from torch.utils._pytree import tree_flatten, tree_unflatten

from popviz.emulator.enums import DataLoaderMode, SharingStrategy
from popviz.emulator.errors import Error
from popviz.emulator.options import Options


class _ProcessShare(torch.utils.data.Dataset):
    """The contiguous part of ``dataset`` one process of a distributed run reads."""

    def __init__(self, dataset: Any, options: Options, step: int, drop_last: bool, shuffle: bool) -> None:
        total = len(dataset)
        n, pid = options.Distributed.numProcesses, options.Distributed.processId
        if drop_last:
            per_process = step * (total // (step * n))
            self.offset = pid * per_process
            self.length = max(0, min(per_process, total - self.offset))
        else:
            sizes = [total // n + (total % n > p) for p in range(n)]
            self.offset, self.length = sum(sizes[:pid]), sizes[pid]
        self.dataset = dataset
        self.order: torch.Tensor | None = None
        if shuffle:
            self.generator = torch.Generator().manual_seed(int(options.random_seed))
            self.reshuffle()

    def reshuffle(self) -> None:
        """A new global order, the same in every process (same seed). The order lives in shared
        memory and is updated in place, so persistent DataLoader workers read the new one."""
        order = torch.randperm(len(self.dataset), generator=self.generator)
        if self.order is None:
            self.order = order.share_memory_()
        else:
            self.order.copy_(order)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        i = index + self.offset
        return self.dataset[int(self.order[i]) if self.order is not None else i]


class DataLoader(torch.utils.data.DataLoader):
    """A torch DataLoader whose batches are the combined batches one executor call consumes."""

    def __init__(self, options: Options, dataset: Any, batch_size: int = 1, shuffle: bool | None = None,
                 num_workers: int = 0, drop_last: bool = True, persistent_workers: bool | None = None,
                 auto_distributed_partitioning: bool = True, mode: DataLoaderMode = DataLoaderMode.Sync,
                 async_options: dict[str, Any] | None = None, rebatched_worker_size: int | None = None,
                 batch_sampler: Any = None, **kwargs: Any) -> None:
        user_sampler = batch_sampler is not None
        if user_sampler:
            if batch_size != 1 or shuffle:
                raise Error("`batch_sampler` option is mutually exclusive with batch_size, shuffle.")
            if options.Distributed.numProcesses > 1 and auto_distributed_partitioning:
                raise Error("`batch_sampler` option is mutually exclusive with "
                            "auto_distributed_partitioning=True.")
            batch_size = getattr(batch_sampler, "batch_size", batch_size)
            self._sampler_drop_last = drop_last
        elif shuffle is None:
            shuffle = False
        assert isinstance(options, Options)
        options._freeze()
        self._options = options
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        self._batches_to_combine = options.device_iterations * \
            (options.replication_factor // options.input_group_size) * options.Training.gradient_accumulation
        self._user_sampler = user_sampler
        if batch_size is None:
            self._combined_batch_size = None
        else:
            self._combined_batch_size = batch_size * self._batches_to_combine
        if rebatched_worker_size is not None and self._combined_batch_size is not None:
            assert rebatched_worker_size <= self._combined_batch_size, (
                f"The rebatched_worker_size ({rebatched_worker_size}) must be <= to the combined batch size "
                f"({self._combined_batch_size})")
        self._share: _ProcessShare | None = None
        iterable = isinstance(dataset, torch.utils.data.IterableDataset)
        if not iterable and options.Distributed.numProcesses > 1 and auto_distributed_partitioning:
            assert not shuffle or options.exists("random_seed"), (
                "When using auto_distributed_partitioning you must set poptorch.Options.randomSeed() to "
                "ensure that tensors are in the same order in all processes.")
            assert self._combined_batch_size is not None, (
                "batch_size=None not allowed when using auto_distributed_partitioning.")
            dataset = self._share = _ProcessShare(dataset, options, self._combined_batch_size, drop_last,
                                                  bool(shuffle))
            shuffle = False
        self._mode = DataLoaderMode(mode)
        self._async_options = dict(async_options or {})
        if user_sampler:
            super().__init__(dataset, batch_sampler=batch_sampler, num_workers=num_workers,
                             persistent_workers=persistent_workers, **kwargs)
        else:
            super().__init__(dataset, batch_size=self._combined_batch_size, shuffle=bool(shuffle),
                             num_workers=num_workers, drop_last=drop_last,
                             persistent_workers=persistent_workers, **kwargs)

    @property
    def combinedBatchSize(self) -> int | None:
        """Samples per executor call."""
        return self._combined_batch_size

    @property
    def options(self) -> Options:
        return self._options

    def terminate(self) -> None:
        """Stop asynchronous loading (nothing to stop in the emulator)."""

    def __iter__(self):
        if self._share is not None and self._share.order is not None:
            self._share.reshuffle()
        if self._user_sampler and self._batches_to_combine != 1:
            return _combined(super().__iter__(), self._batches_to_combine, self._sampler_drop_last)
        return super().__iter__()


def _combined(batches: Any, count: int, drop_last: bool) -> Any:
    """Concatenates every ``count`` consecutive sampler batches along dim 0 (as PopTorch does with a
    user ``batch_sampler``); a shorter last group is yielded only when ``drop_last`` is False."""
    group: list[Any] = []
    for batch in batches:
        group.append(batch)
        if len(group) == count:
            yield _concat(group)
            group = []
    if group and not drop_last:
        yield _concat(group)


def _concat(batches: list[Any]) -> Any:
    leaves = [tree_flatten(b) for b in batches]
    spec = leaves[0][1]
    parts = []
    for i, first in enumerate(leaves[0][0]):
        column = [flat[i] for flat, _ in leaves]
        if isinstance(first, torch.Tensor):
            parts.append(torch.cat([t if t.dim() else t.reshape(1) for t in column], dim=0))
        else:
            parts.append(column[-1])
    return tree_unflatten(parts, spec)


class AsynchronousDataAccessor:
    """Reads ``dataset`` (usually a DataLoader) ahead of use; synchronous in the emulator."""

    def __init__(self, dataset: Any, buffer_size: int = 3, miss_sleep_time_in_ms: float = 0.1,
                 load_indefinitely: bool = True, early_preload: bool = False,
                 sharing_strategy: SharingStrategy = SharingStrategy.FileSystem,
                 rebatched_size: int | None = None) -> None:
        self._dataset = dataset
        self._iterator: Any = None
        self.load_indefinitely = load_indefinitely

    def terminate(self) -> None:
        self._iterator = None

    def __len__(self) -> int:
        return len(self._dataset)

    def __iter__(self) -> AsynchronousDataAccessor:
        self._iterator = iter(self._dataset)
        return self

    def __next__(self) -> Any:
        if self._iterator is None:
            self._iterator = iter(self._dataset)
        return next(self._iterator)


__all__ = ["AsynchronousDataAccessor", "DataLoader"]
