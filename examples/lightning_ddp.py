"""Lightning DDP: log VarlenAUROC as a metric object; the logged value equals the single-process value.

Lightning gives every validation rank a ``DistributedSampler(drop_last=False)``, which pads the validation set to a
multiple of the world size by repeating samples. ``VarlenAUROC(dataset_size=len(val_set))`` drops that padding, so
``self.log("val/auroc", self.val_auroc)`` reports the AUROC of exactly the validation set, on every rank; so does
any torchmetrics metric wrapped in ``Varlen`` (here ``BinaryAccuracy``).

Run: ``python examples/lightning_ddp.py --devices 2 --num-samples 101``
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import tempfile
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.classification import BinaryAccuracy

from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenAveragePrecision


def make_validation_set(n: int, seed: int = 0) -> TensorDataset:
    """Features whose first column carries the label, with noise."""
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    features = torch.randn(n, 4, generator=gen)
    features[:, 0] += target
    return TensorDataset(features, target)


class Classifier(L.LightningModule):
    """A fixed linear scorer: validation only, so the value is reproducible."""

    def __init__(self, val_size: int) -> None:
        super().__init__()
        self.scorer = torch.nn.Linear(4, 1)
        with torch.no_grad():
            self.scorer.weight.copy_(torch.tensor([[1.0, 0.2, -0.1, 0.05]]))
            self.scorer.bias.zero_()
        # normalization=None: the model's logits are ranked as they are (see validation_step)
        self.val_auroc = VarlenAUROC(dataset_size=val_size, normalization=None)
        self.val_ap = VarlenAveragePrecision(dataset_size=val_size, normalization=None)
        self.val_acc = Varlen(BinaryAccuracy(), dataset_size=val_size)  # any torchmetrics metric, padding dropped

    def setup(self, stage: str) -> None:
        """Destroy the process group when the worker exits (Lightning does so only on NCCL).

        torch asks every process to call ``destroy_process_group()`` before it exits. A gloo process that exits with
        a live group right after a collective of its own (or of Lightning) can abort with ``terminate called without
        an active exception``; this package's own syncs are safe either way (see the integrations page).
        """
        if dist.is_initialized():
            atexit.register(_destroy_process_group)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Score the batch, update the metrics, log the metric objects (computed and synced at epoch end)."""
        features, target = batch
        # The logits themselves, not torch's `.sigmoid()` of them: torch's CPU sigmoid rounds a score by its place in
        # the tensor (equal logits can score a bit apart, so the value moved with the batch size and the world size),
        # and under bf16 autocast it rounds to 16 bits (merging every logit above about 5.5). AUROC and AP only rank
        # the scores, so the metrics take the logits as they are (normalization=None). With the default
        # normalization="sigmoid" they would normalise logits themselves, by value, to float32 scores that keep the
        # ranking; but, as in torchmetrics, only a batch with a score outside [0, 1]: here rank 1's last batch, once
        # the sampler's padding is dropped, is two logits inside [0, 1], which would be ranked as probabilities. The
        # accuracy gets the decision itself.
        logits = self.scorer(features).squeeze(-1)
        self.val_auroc.update(logits, target)
        self.val_ap.update(logits, target)
        self.val_acc.update((logits > 0).long(), target)  # positive where the probability is above 0.5
        self.log("val/auroc", self.val_auroc, on_epoch=True)
        self.log("val/ap", self.val_ap, on_epoch=True)
        self.log("val/acc", self.val_acc, on_epoch=True)


def _destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class RecordLoggedValues(Callback):
    """Write what every rank logged (and what its metric evaluated) to ``out_dir/rank<r>.json``."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Record this rank's logged values."""
        assert isinstance(pl_module, Classifier)
        report = pl_module.val_auroc.sync_report
        record = {
            "auroc": float(trainer.callback_metrics["val/auroc"]),
            "ap": float(trainer.callback_metrics["val/ap"]),
            "acc": float(trainer.callback_metrics["val/acc"]),
            "acc_kept": pl_module.val_acc.sync_report.kept if pl_module.val_acc.sync_report else None,
            "seen_per_rank": list(report.seen_per_rank) if report else None,
            "kept": report.kept if report else None,
        }
        with open(os.path.join(self.out_dir, f"rank{trainer.global_rank}.json"), "w") as fh:
            json.dump(record, fh)


def run(devices: int, num_samples: int, batch_size: int, out_dir: str) -> list[dict[str, Any]]:
    """Validate on ``devices`` CPU processes (ddp_spawn) and return what each rank logged."""
    val_set = make_validation_set(num_samples)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp_spawn",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[RecordLoggedValues(out_dir)],
    )
    trainer.validate(Classifier(len(val_set)), DataLoader(val_set, batch_size=batch_size), verbose=False)
    records = []
    for rank in range(devices):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as fh:
            records.append(json.load(fh))
    return records


def main() -> None:
    """Print every rank's logged AUROC / AP next to the single-process values."""
    from torchmetrics_varlen.functional import auroc, average_precision

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-samples", type=int, default=101)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out_dir:
        records = run(args.devices, args.num_samples, args.batch_size, out_dir)
    features, target = make_validation_set(args.num_samples).tensors
    with torch.no_grad():
        logits = features @ torch.tensor([1.0, 0.2, -0.1, 0.05])
    truth = {"auroc": float(auroc(logits, target)), "ap": float(average_precision(logits, target))}
    print(json.dumps({"truth": truth, "ranks": records}))


if __name__ == "__main__":
    main()
