"""Length-bucketed batching, alone and under a DistributedSampler as Lightning's DDP builds it."""

from __future__ import annotations

import random

import pytest
import torch
from lightning.fabric.utilities.data import _replace_dunder_methods
from lightning.pytorch.utilities.data import _update_dataloader
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from lit_structattn.datamodules.batching import BucketBatchSampler, EpochShuffle, bucketed_loader

_RNG = random.Random(0)
LENGTHS = [_RNG.randint(1, 60) for _ in range(203)]


def test_every_index_once_and_batches_are_length_sorted():
    sampler = BucketBatchSampler(EpochShuffle(len(LENGTHS), 0), 8, False, LENGTHS, bucket_batches=5)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
    assert len(batches) == len(sampler) == 26
    spread = sum(max(LENGTHS[i] for i in b) - min(LENGTHS[i] for i in b) for b in batches)
    unsorted = list(BucketBatchSampler(EpochShuffle(len(LENGTHS), 0), 8, False, LENGTHS, 1))
    assert spread < sum(max(LENGTHS[i] for i in b) - min(LENGTHS[i] for i in b) for b in unsorted)
    sampler.sampler.set_epoch(1)  # what Lightning calls every epoch
    assert list(sampler) != batches


def test_order_depends_on_the_seeds_and_epoch_only():
    def epoch_batches(epoch: int, seed: int = 0) -> list[list[int]]:
        torch.manual_seed(seed)  # what seed_everything does
        loader = bucketed_loader(LENGTHS, LENGTHS, list, batch_size=8, bucket_batches=5,
                                 shuffle=True, seed=3, num_workers=0)
        torch.rand(7)  # the global random state moves on (model init, dropout, ...)
        loader.batch_sampler.sampler.set_epoch(epoch)
        return list(loader.batch_sampler)

    assert epoch_batches(2) == epoch_batches(2)
    assert epoch_batches(2) != epoch_batches(1)
    assert epoch_batches(2, seed=1) != epoch_batches(2)
    state = torch.get_rng_state()
    iter(bucketed_loader(LENGTHS, LENGTHS, list, batch_size=8, bucket_batches=5, shuffle=True,
                         seed=3, num_workers=0))
    assert torch.equal(torch.get_rng_state(), state)  # no draw from the global generator


def test_skip_batches_resumes_a_pass_once():
    sampler = BucketBatchSampler(EpochShuffle(len(LENGTHS), 0), 8, False, LENGTHS, 5)
    whole = list(sampler)
    sampler.skip_batches(11)
    assert list(sampler) == whole[11:]
    assert list(sampler) == whole


def test_lightning_rebuilds_it_around_a_distributed_sampler():
    # The trainer calls the dataloader hooks inside these contexts, which record init arguments.
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        batches = BucketBatchSampler(EpochShuffle(len(LENGTHS), 0), 8, False, LENGTHS, 5)
        loader = DataLoader(LENGTHS, batch_sampler=batches)
    shards = []
    for rank in range(2):
        distributed = DistributedSampler(LENGTHS, num_replicas=2, rank=rank, seed=0)
        rebuilt = _update_dataloader(loader, distributed)
        assert isinstance(rebuilt.batch_sampler, BucketBatchSampler)
        assert rebuilt.batch_sampler.lengths is LENGTHS
        shards.append([i for batch in rebuilt.batch_sampler for i in batch])
    assert len(shards[0]) == len(shards[1]) == 102  # DistributedSampler pads to equal shards
    assert set(shards[0]) | set(shards[1]) == set(range(len(LENGTHS)))


def test_evaluation_shards_hold_every_example_exactly_once():
    """Evaluation batches (no shuffle) rebuilt around Lightning's padded DistributedSampler
    use its unpadded shard: an odd-sized split is evaluated once per example in all."""
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        batches = BucketBatchSampler(range(len(LENGTHS)), 8, False, LENGTHS, len(LENGTHS),
                                     shuffle=False)
        loader = DataLoader(LENGTHS, batch_sampler=batches)
    assert len(LENGTHS) % 2 == 1  # the padding would repeat one example
    shards = []
    for rank in range(2):
        padded = DistributedSampler(LENGTHS, num_replicas=2, rank=rank, shuffle=False)
        rebuilt = _update_dataloader(loader, padded).batch_sampler
        shard = [i for batch in rebuilt for i in batch]
        assert len(rebuilt) == len(list(rebuilt)) and len(rebuilt.sampler) == len(shard)
        assert [LENGTHS[i] for i in shard] == sorted(LENGTHS[i] for i in shard)
        shards.append(shard)
    assert sorted(shards[0] + shards[1]) == list(range(len(LENGTHS)))
    assert {len(shards[0]), len(shards[1])} == {len(LENGTHS) // 2, len(LENGTHS) // 2 + 1}


def test_loader_options_follow_the_device_unless_set():
    from types import SimpleNamespace

    from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator

    from lit_structattn.datamodules.tree_transduction import TreeTransductionDataModule

    data = TreeTransductionDataModule(train_per_depth=2, eval_per_depth=2)
    assert data.loader_options() == {"num_workers": 0, "pin_memory": False,
                                     "persistent_workers": False}
    data.trainer = SimpleNamespace(accelerator=CPUAccelerator())
    assert data.loader_options()["num_workers"] == 0
    data.trainer = SimpleNamespace(accelerator=CUDAAccelerator())
    assert data.loader_options() == {"num_workers": 2, "pin_memory": True,
                                     "persistent_workers": True}
    chosen = TreeTransductionDataModule(train_per_depth=2, eval_per_depth=2, num_workers=1,
                                        pin_memory=False)
    chosen.trainer = SimpleNamespace(accelerator=CUDAAccelerator())
    chosen.setup()
    loader = chosen.val_dataloader()
    assert (loader.num_workers, loader.pin_memory, loader.persistent_workers) == (1, False, True)


def datamodule_classes() -> list[type]:
    """Every DataModule of the project (all are SplitDataModules)."""
    from lit_structattn.datamodules import (
        babi,
        conll_ner,
        morphology,
        nli,
        synthetic,
        translation,
        tree_transduction,
        ud_pos,
        word_qe,
    )

    return [babi.BabiDataModule, conll_ner.CoNLLNERDataModule, morphology.InflectionDataModule,
            nli.NLIDataModule, synthetic.NeedleDataModule, translation.TranslationDataModule,
            tree_transduction.TreeTransductionDataModule, ud_pos.UDPOSDataModule,
            word_qe.WordQEDataModule]


LOADER_DEFAULTS = {"batch_size": 32, "eval_batch_size": None, "bucket_batches": 50,
                   "num_workers": None, "pin_memory": None, "seed": 0}


@pytest.mark.parametrize("module", datamodule_classes(), ids=lambda cls: cls.__name__)
def test_every_datamodule_takes_the_loader_options_of_its_base(module):
    """One declaration (SplitDataModule), one check, the same defaults, saved with the
    DataModule's own hyper-parameters; evaluation batches of eval_batch_size."""
    from lit_structattn.datamodules.splits import SplitDataModule

    assert issubclass(module, SplitDataModule)
    hparams = module().hparams
    assert {name: hparams[name] for name in LOADER_DEFAULTS} == LOADER_DEFAULTS
    assert "max_tokens" in hparams  # the subclass's own, saved with them
    chosen = module(batch_size=3, eval_batch_size=7, seed=5)
    assert (chosen.hparams.batch_size, chosen.hparams.seed) == (3, 5)
    assert (chosen._batch_size(shuffle=True), chosen._batch_size(shuffle=False)) == (3, 7)
    for option, bad in (("batch_size", 0), ("eval_batch_size", 0), ("bucket_batches", 0),
                        ("num_workers", -1), ("pin_memory", "yes"), ("seed", 1.5)):
        with pytest.raises(ValueError, match=f"{option} must be"):
            module(**{option: bad})
