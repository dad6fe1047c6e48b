"""Lightning's sanity check (2 validation batches before training) is no "never seen" warning; a real partial pass is.

With ``dataset_size=N`` a metric warns once per epoch when fewer than N samples were evaluated. Lightning's sanity
check evaluates ``num_sanity_val_steps`` batches at the start of every ``fit()``; that is not a partial pass of the
user's, so no warning. ``limit_val_batches=2`` is: it still warns, once per epoch and metric.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.classification import BinaryAccuracy

from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenAveragePrecision, VarlenCollection

L = pytest.importorskip("lightning")

N_VAL = 40
BATCH = 8  # 5 validation batches
EPOCHS = 2
NEVER_SEEN = "were never seen"


def _data(n: int, seed: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    features = torch.randn(n, 4, generator=gen)
    features[:, 0] += target
    return TensorDataset(features, target)


class _Body:
    """Two ways of evaluating metrics: metric objects logged with ``log`` (Lightning computes them at the end of the
    epoch), and a collection computed by the module itself in ``on_validation_epoch_end``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.scorer = torch.nn.Linear(4, 1)
        self.collection = VarlenCollection(
            {"auroc": VarlenAUROC(), "ap": VarlenAveragePrecision()}, dataset_size=N_VAL, prefix="val/"
        )
        self.auroc = VarlenAUROC(dataset_size=N_VAL)
        self.acc = Varlen(BinaryAccuracy(), dataset_size=N_VAL)
        self.computed: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """A loss, so that ``fit()`` trains."""
        features, target = batch
        return torch.nn.functional.binary_cross_entropy_with_logits(self.scorer(features).squeeze(-1), target.float())

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Update every metric; log the two metric objects (Lightning computes them at the end of the epoch)."""
        features, target = batch
        scores = self.scorer(features).squeeze(-1).sigmoid()
        self.collection.update(scores, target)
        self.auroc.update(scores, target)
        self.acc.update(scores, target)
        self.log("val/auroc_alone", self.auroc, on_epoch=True)
        self.log("val/acc", self.acc, on_epoch=True)

    def on_validation_epoch_end(self) -> None:
        """Compute the collection here, as a module that logs its values would."""
        values = self.collection.compute()
        self.log_dict(values)
        self.computed.append(float(values["val/auroc"]))
        self.collection.reset()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Plain SGD."""
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Module(_Body, L.LightningModule):
    """The module under ``lightning``."""


def _fit(limit_val_batches: float | int, package: Any = L, module_class: Any = Module) -> tuple[list[str], Any]:
    trainer = package.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=EPOCHS,
        num_sanity_val_steps=2,
        limit_val_batches=limit_val_batches,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = module_class()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # Lightning's own warnings (few workers, ...) are recorded, not raised
        trainer.fit(
            module,
            DataLoader(_data(32, 1), batch_size=BATCH),
            DataLoader(_data(N_VAL, 2), batch_size=BATCH),
        )
    return [str(w.message) for w in caught if NEVER_SEEN in str(w.message)], module


def test_a_full_validation_pass_after_the_sanity_check_never_warns() -> None:
    never_seen, module = _fit(1.0)
    assert never_seen == []
    assert len(module.computed) == 1 + EPOCHS  # the sanity check computed too


def test_a_limited_validation_pass_warns_once_per_epoch_and_metric() -> None:
    never_seen, module = _fit(2)
    assert len(module.computed) == 1 + EPOCHS
    # per epoch: the two logged metrics and the collection's compute(); none in the sanity check
    assert len(never_seen) == 3 * EPOCHS, never_seen
    assert all("dataset_size=40 but only 16 samples were evaluated: 24 were never seen" in m for m in never_seen)
    assert sum(m.startswith("VarlenCollection") for m in never_seen) == EPOCHS


def test_under_pytorch_lightning_too() -> None:
    """The same under the older package name (its own Trainer class)."""
    pl = pytest.importorskip("pytorch_lightning")
    never_seen, module = _fit(1.0, pl, type("PLModule", (_Body, pl.LightningModule), {}))
    assert never_seen == []
    assert len(module.computed) == 1 + EPOCHS
