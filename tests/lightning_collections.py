"""A Lightning ``fit`` on CPU ranks with ``strategy="ddp"`` that logs collections every way Lightning users do.

Run by ``tests/test_lightning_collections.py`` (``python tests/lightning_collections.py --out-dir DIR``); Lightning's
``ddp`` launcher starts the other ranks by running this file again. Every rank writes what it logged, per validation
run (the sanity check's partial pass included) and per training epoch, to ``DIR/rank<r>.json``.

The patterns, each over several epochs:

- ``a/``: ``self.log_dict(VarlenCollection(...))`` in ``validation_step``; Lightning computes and resets each member.
- ``b/``: ``self.log_dict(collection.compute())`` then ``collection.reset()`` in ``on_validation_epoch_end``.
- ``c/``: a torchmetrics ``MetricCollection`` of ``Varlen`` members, each with its own ``dataset_size``.
- ``d/``: ``forward`` in ``training_step`` (the batch values) and ``self.log_dict(collection, on_epoch=True)``.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MetricCollection
from torchmetrics.classification import BinaryAccuracy, BinaryAUROC

from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenAveragePrecision, VarlenCollection

WEIGHTS = (1.0, 0.3, -0.2)


def make_data(n: int, seed: int) -> TensorDataset:
    """Features whose logit (``features @ WEIGHTS``) is at least 2 away from 0.

    Every batch then holds a logit outside [0, 1], so torchmetrics' ``BinaryAccuracy`` applies its sigmoid to every
    batch (it does per batch, only when a value lies outside [0, 1]) and thresholds the logits at 0.
    """
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    sign = torch.where(torch.rand(n, generator=gen) < 0.8, 2 * target - 1, 1 - 2 * target).float()
    logit = sign * (2 + torch.rand(n, generator=gen) * 3) + torch.randn(n, generator=gen) * 0.01
    features = torch.randn(n, 3, generator=gen)
    # the first column makes the logit exact: logit = features @ WEIGHTS
    features[:, 0] = logit - features[:, 1] * WEIGHTS[1] - features[:, 2] * WEIGHTS[2]
    return TensorDataset(features, target)


def logits_of(features: torch.Tensor) -> torch.Tensor:
    """The model's logits, as the test recomputes them for scikit-learn."""
    return features @ torch.tensor(WEIGHTS)


class Model(L.LightningModule):
    """A fixed linear scorer trained with ``lr=0`` (the scores never change), logging four collections."""

    def __init__(self, train_size: int, val_size: int) -> None:
        super().__init__()
        self.scorer = torch.nn.Linear(3, 1, bias=False)
        with torch.no_grad():
            self.scorer.weight.copy_(torch.tensor([WEIGHTS]))
        self.val_a = VarlenCollection(
            {"auroc": VarlenAUROC(), "ap": VarlenAveragePrecision(), "acc": BinaryAccuracy()},
            dataset_size=val_size,
            prefix="a/",
        )
        self.val_b = VarlenCollection(
            {"auroc": VarlenAUROC(), "acc": BinaryAccuracy()}, dataset_size=val_size, prefix="b/"
        )
        self.val_c = MetricCollection(
            {
                "auroc": Varlen(BinaryAUROC(), dataset_size=val_size),
                "acc": Varlen(BinaryAccuracy(), dataset_size=val_size),
            },
            prefix="c/",
        )
        self.train_d = VarlenCollection(
            {"auroc": VarlenAUROC(), "acc": BinaryAccuracy()}, dataset_size=train_size, prefix="d/"
        )

    def setup(self, stage: str) -> None:
        """Destroy the gloo group when the process exits (Lightning does so only for NCCL)."""
        if dist.is_initialized():
            atexit.register(_destroy_process_group)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """The logits."""
        return self.scorer(features).squeeze(-1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """``forward`` of the training collection; a loss with a zero gradient."""
        features, target = batch
        logits = self(features)
        self.train_d(logits.detach(), target)  # forward: the batch values, and the epoch's states
        self.log_dict(self.train_d, on_step=False, on_epoch=True)
        return (logits * 0).sum() + self.scorer.weight.sum() * 0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Update the three validation collections; log two of them as metric objects."""
        features, target = batch
        logits = self(features)
        self.val_a.update(logits, target)
        self.log_dict(self.val_a)
        self.val_b.update(logits, target)
        self.val_c.update(logits, target)
        self.log_dict(self.val_c)

    def on_validation_epoch_end(self) -> None:
        """Log the values of ``val_b`` and reset it."""
        self.log_dict(self.val_b.compute())
        self.val_b.reset()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """SGD with ``lr=0``: the scores never change."""
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class Record(Callback):
    """Keep what this rank logged after every validation run and every training epoch."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def _keep(self, trainer: L.Trainer, phase: str, prefixes: tuple[str, ...]) -> None:
        values = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(prefixes)}
        self.records.append({"phase": phase, "epoch": trainer.current_epoch, "values": values})

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """After every validation run, the sanity check included."""
        self._keep(trainer, "sanity" if trainer.sanity_checking else "val", ("a/", "b/", "c/"))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """After every training epoch."""
        self._keep(trainer, "train", ("d/",))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=203)
    parser.add_argument("--val-size", type=int, default=101)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    record = Record()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp",
        max_epochs=args.epochs,
        num_sanity_val_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[record],
    )
    train, val = make_data(args.train_size, 1), make_data(args.val_size, 2)
    trainer.fit(
        Model(len(train), len(val)),
        DataLoader(train, batch_size=args.batch_size, shuffle=True),
        DataLoader(val, batch_size=args.batch_size),
    )
    with open(os.path.join(args.out_dir, f"rank{trainer.global_rank}.json"), "w") as fh:
        json.dump({"world_size": trainer.world_size, "records": record.records}, fh)


if __name__ == "__main__":
    main()
