"""Every way Lightning logs a collection gives scikit-learn's value, epoch after epoch, under ``strategy="ddp"``.

``tests/lightning_collections.py`` runs ``Trainer(strategy="ddp", devices=2, max_epochs=3)`` with Lightning's sanity
check (2 batches per rank) first; Lightning's samplers pad 101 validation and 203 training samples to 102 and 204.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sklearn.metrics import accuracy_score, average_precision_score, roc_auc_score

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

HERE = Path(__file__).resolve().parent


def test_every_lightning_collection_pattern_is_exact_in_every_epoch(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    sys.path.insert(0, str(HERE))
    try:
        import lightning_collections as script
    finally:
        sys.path.remove(str(HERE))
    cmd = [sys.executable, str(HERE / "lightning_collections.py"), "--out-dir", str(tmp_path), "--epochs", "3"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=420, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    expected = {}
    for phase, (n, seed) in {"val": (101, 2), "train": (203, 1)}.items():
        features, target = script.make_data(n, seed).tensors
        logits = script.logits_of(features).double()
        expected[phase] = {
            "auroc": roc_auc_score(target, logits),
            "ap": average_precision_score(target, logits),
            "acc": accuracy_score(target, logits > 0),
        }
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for out in ranks:
        assert out["world_size"] == 2
        phases = [(r["phase"], r["epoch"]) for r in out["records"]]
        assert phases == [("sanity", 0)] + [p for e in range(3) for p in (("val", e), ("train", e))]
        for record in out["records"]:
            if record["phase"] == "sanity":
                continue
            values = record["values"]
            truth = expected[record["phase"]]
            prefixes = ("a/", "b/", "c/") if record["phase"] == "val" else ("d/",)
            keys = {f"{p}{m}" for p in prefixes for m in ("auroc", "acc")} | ({"a/ap"} if "a/" in prefixes else set())
            assert set(values) == keys, record
            for key, value in values.items():
                assert value == pytest.approx(truth[key.split("/")[1]], abs=1e-6), (record, key)
    assert ranks[0]["records"] == ranks[1]["records"]
