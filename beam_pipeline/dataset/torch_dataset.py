"""The PyTorch adapter of the training loader: one rank's sequences for a ``torch.utils.data.DataLoader``.

:func:`as_torch_dataset` wraps a :class:`~beam_pipeline.dataset.loader.TokenLoader`
as :class:`TorchTokenDataset`, an ``IterableDataset`` whose worker processes
each read their own lane and which resumes exactly (docs/format.md, "In a
torch training loop"). Torch is optional: it is imported only when the
adapter is used, so ``dataset/loader.py`` works without it;
``from beam_pipeline.dataset.torch_dataset import TorchTokenDataset`` works
when torch is installed.
"""

from __future__ import annotations

import functools

import numpy as np

from beam_pipeline.dataset.lanes import LoaderError, merge_states, upgrade_state
from beam_pipeline.dataset.loader import TokenLoader, TokenSequence


def as_torch_dataset(loader: TokenLoader, num_workers: int = 0):
    """Wrap a loader as a ``torch.utils.data.IterableDataset`` (needs torch); see :class:`TorchTokenDataset`."""
    return _torch_dataset_class()(loader, num_workers)


def torch_item(item: TokenSequence, lane: int) -> dict:
    """One sequence as fixed-shape fields (torch's default collate stacks them into a batch).

    ``input_ids`` int64 ``(seq_len,)``; ``document_starts`` bool ``(seq_len,)``,
    true where a document starts; ``n_tokens`` tokens before the padding;
    ``shard``, ``repeat``, ``sequence``, ``bucket`` as in :class:`TokenSequence`
    (strings collate to lists); ``lane`` and ``lane_step`` say which lane gave
    it at which of its steps (:meth:`TorchTokenDataset.advance` reads them).
    """
    import torch

    starts = np.zeros(len(item.tokens), dtype=bool)
    starts[item.doc_starts] = True
    return {
        "input_ids": torch.from_numpy(item.tokens.astype(np.int64)),
        "document_starts": torch.from_numpy(starts),
        "n_tokens": item.n_tokens,
        "shard": item.shard,
        "repeat": item.repeat,
        "sequence": item.sequence,
        "bucket": item.bucket,
        "lane": lane,
        "lane_step": item.step,
    }


@functools.cache
def _torch_dataset_class():
    try:
        from torch.utils.data import IterableDataset, get_worker_info
    except ImportError as err:
        raise ImportError("TorchTokenDataset needs PyTorch (pip install torch); TokenLoader itself does not") from err

    class TorchTokenDataset(IterableDataset):
        """One rank's sequences for ``torch.utils.data.DataLoader``, with ``num_workers`` worker processes.

        Give it the rank's :class:`TokenLoader` (one lane per rank) and the
        ``num_workers`` of the DataLoader. With 0 the main process reads the
        loader itself. With ``K >= 1`` workers the rank's sequences are split
        into ``K`` lanes (:func:`plan_lanes` with ``workers=K``: every worker
        its own lane, lanes and ranks equal within one sequence) and worker
        ``w`` reads lane ``(w + rotation) % K``.

        The trainer tells the dataset what it received: ``dataset.advance(batch)``
        after each batch (a no-op with 0 workers, where the loader moves by
        itself). :meth:`state_dict` is then exactly what was delivered, not
        what the workers prefetched. The DataLoader hands out batches from its
        workers in turn; the state counts each lane's batches, and a resumed
        dataset rotates which worker reads which lane so that the batches
        follow each other as if there had been no stop (same sequences, same
        order, same batches, for the same ``batch_size``).
        """

        def __init__(self, loader: TokenLoader, num_workers: int = 0):
            super().__init__()
            if num_workers < 0:
                raise LoaderError(f"num_workers must be >= 0, got {num_workers}")
            if loader.workers != 1:
                raise LoaderError("wrap the rank's loader (workers=1): the dataset makes the workers' lanes")
            self.num_workers = num_workers
            self.rank = loader.rank
            lanes = max(num_workers, 1)
            if lanes > 1 and (loader.step or loader.consumed()):
                raise LoaderError(
                    "with num_workers > 1 resume through TorchTokenDataset.load_state_dict, "
                    "not a loader that has read or loaded a state"
                )
            self.loaders = [loader] if lanes == 1 else [loader.lane_loader(lanes, k) for k in range(lanes)]
            self.batches = [0] * lanes  # batches of each lane the trainer received this epoch
            self._advanced = [lane.step for lane in self.loaders]  # each lane's next step to advance

        def __iter__(self):
            info = get_worker_info()
            workers = info.num_workers if info is not None else 0
            if max(workers, 1) != len(self.loaders) or (workers == 0 and self.num_workers > 0):
                raise RuntimeError(
                    f"TorchTokenDataset(num_workers={self.num_workers}) is read by a DataLoader with "
                    f"num_workers={workers}: give both the same number"
                )
            lane = (info.id if info is not None else 0) + self.rotation()
            lane %= len(self.loaders)
            for item in self.loaders[lane]:  # in a worker: its own copy of the loader, made when it started
                yield torch_item(item, lane)

        def rotation(self) -> int:
            """The lane that delivers next: the fewest batches so far, then the lowest lane, among lanes not done."""
            live = [(n, lane) for lane, n in enumerate(self.batches) if self.loaders[lane].remaining()]
            return min(live)[1] if live else 0

        def advance(self, batch: dict) -> None:
            """Record a batch the trainer received (its ``lane`` and ``lane_step`` fields), in delivery order."""
            lanes, steps = batch["lane"], batch["lane_step"]
            lanes = lanes.tolist() if hasattr(lanes, "tolist") else list(lanes)
            steps = steps.tolist() if hasattr(steps, "tolist") else list(steps)
            for lane in sorted(set(lanes)):
                mine = [step for lane_of, step in zip(lanes, steps) if lane_of == lane]
                loader, expected = self.loaders[lane], self._advanced[lane]
                if mine != list(range(expected, expected + len(mine))):
                    raise LoaderError(
                        f"lane {lane}: got steps {mine[0]}..{mine[-1]}, expected {expected}: "
                        "advance every batch, in the order the DataLoader delivers them"
                    )
                self._advanced[lane] = expected + len(mine)
                if loader.step < self._advanced[lane]:
                    loader.skip(self._advanced[lane] - loader.step)  # read in a worker: move this process's copy
                self.batches[lane] += 1

        def set_epoch(self, epoch: int) -> None:
            for loader in self.loaders:
                loader.set_epoch(epoch)
            self.batches = [0] * len(self.loaders)
            self._advanced = [0] * len(self.loaders)

        def state_dict(self) -> dict:
            state = merge_states([loader.state_dict() for loader in self.loaders])
            workers = len(self.loaders)
            state["batches"] = {str(self.rank * workers + k): n for k, n in enumerate(self.batches)}
            return state

        def load_state_dict(self, state: dict) -> None:
            state = upgrade_state(state)
            for loader in self.loaders:
                loader.load_state_dict(state)
            same = state["world_size"] == self.loaders[0].world_size and state["workers"] == len(self.loaders)
            batches = state.get("batches", {}) if same else {}
            self.batches = [batches.get(str(loader.lane), 0) for loader in self.loaders]
            self._advanced = [loader.step for loader in self.loaders]

    TorchTokenDataset.__qualname__ = "TorchTokenDataset"  # pickled by name (spawned workers): module __getattr__
    return TorchTokenDataset


def __getattr__(name: str):
    """``from beam_pipeline.dataset.torch_dataset import TorchTokenDataset`` works when torch is installed."""
    if name == "TorchTokenDataset":
        return _torch_dataset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
