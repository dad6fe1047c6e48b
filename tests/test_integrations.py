"""The examples, run for real: Lightning (ddp_spawn), Accelerate (under torchrun), two torchrun agents as two nodes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _dist import free_port
from _float32 import f32
from sklearn.metrics import accuracy_score, average_precision_score, roc_auc_score

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _example(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def _records(out_dir: Path, world: int) -> list[dict[str, Any]]:
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(world)]


def test_lightning_ddp_spawn_logs_the_single_device_value() -> None:
    """Trainer(accelerator='cpu', devices=2, strategy='ddp_spawn') on 101 validation samples: Lightning's sampler
    pads to 102, and the logged val/auroc, val/ap and val/acc (a torchmetrics metric in Varlen) still equal
    scikit-learn on the 101 samples, on both ranks.
    """
    pytest.importorskip("lightning")
    cmd = [sys.executable, str(EXAMPLES / "lightning_ddp.py"), "--devices", "2", "--num-samples", "101"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    example = _example("lightning_ddp")
    features, target = example.make_validation_set(101).tensors
    scores = (features * example.torch.tensor([1.0, 0.2, -0.1, 0.05])).sum(1)
    for record in result["ranks"]:
        assert record["auroc"] == pytest.approx(roc_auc_score(target, scores), abs=1e-6)
        assert record["ap"] == pytest.approx(average_precision_score(target, scores), abs=1e-6)
        assert record["acc"] == pytest.approx(accuracy_score(target, scores.sigmoid() > 0.5), abs=1e-6)  # Varlen
        assert record["seen_per_rank"] == [51, 51]
        assert record["kept"] == record["acc_kept"] == 101


def test_accelerate_prepared_loader_with_sample_ids(tmp_path: Path) -> None:
    """Accelerator(cpu=True) under torchrun --nproc-per-node 2: accelerate's even_batches padding repeats samples;
    with sample_ids the value equals scikit-learn on the 10 samples, torchmetrics' does not.
    """
    pytest.importorskip("accelerate")
    port = str(free_port())
    cmd = _torchrun("--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", port)
    cmd += [
        str(EXAMPLES / "accelerate_eval.py"),
        "--num-samples",
        "10",
        "--batch-size",
        "3",
        "--out-dir",
        str(tmp_path),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    scores, target, _ = _example("accelerate_eval").make_data(10).tensors
    expected = roc_auc_score(target, scores)
    for record in _records(tmp_path, 2):
        assert record["world_size"] == 2
        assert record["seen"] == 6  # 12 rows for 10 samples: 2 repeated
        assert record["kept"] == 10
        assert record["varlen"] == pytest.approx(f32(expected), abs=1e-12)
        assert abs(record["torchmetrics"] - expected) > 1e-3  # the duplicates move torchmetrics' value


def test_two_torchrun_agents_as_two_nodes(tmp_path: Path) -> None:
    """Torchrun --nnodes 2 --nproc-per-node 2 with c10d rendezvous on 127.0.0.1, started twice: 4 ranks on 2
    simulated nodes all report scikit-learn's AUROC and group AUC of the 101 samples.
    """
    port = str(free_port())
    cmd = _torchrun(
        "--nnodes",
        "2",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        f"test{os.getpid()}",
    )
    cmd += [str(EXAMPLES / "torchrun_ddp.py"), "--num-samples", "101", "--out-dir", str(tmp_path)]
    agents = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    try:
        outputs = [agent.communicate(timeout=300)[0] for agent in agents]
    finally:
        for agent in agents:
            agent.kill()
    assert all(agent.returncode == 0 for agent in agents), "\n".join(o[-2000:] for o in outputs)
    scores, target, users = _example("torchrun_ddp").make_data(101).tensors
    valid = [u for u in users.unique() if target[users == u].unique().numel() == 2]
    weights = [int((users == u).sum()) for u in valid]
    gauc = sum(w * roc_auc_score(target[users == u], scores[users == u]) for u, w in zip(valid, weights, strict=True))
    gauc /= sum(weights)
    records = _records(tmp_path, 4)
    assert sorted(r["node"] for r in records) == ["0", "0", "1", "1"]
    for record in records:
        assert record["world_size"] == 4
        assert record["kept"] == 101
        assert record["auroc"] == pytest.approx(f32(roc_auc_score(target, scores)), abs=1e-12)
        assert record["auroc_sharded"] == pytest.approx(f32(roc_auc_score(target, scores)), abs=1e-12)
        assert record["gauc"] == pytest.approx(f32(gauc), abs=1e-12)


def test_metric_collection_example_under_torchrun(tmp_path: Path) -> None:
    """examples/metric_collection.py on 2 ranks: one compute group, every value equal to scikit-learn's."""
    port = str(free_port())
    cmd = _torchrun("--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", port)
    cmd += [str(EXAMPLES / "metric_collection.py"), "--num-samples", "301", "--out-dir", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    scores, target = _example("metric_collection").make_data(301).tensors
    for record in _records(tmp_path, 2):
        assert [sorted(g) for g in record["compute_groups"]] == [["ap", "auroc", "best_f1", "pr_curve"]]
        assert record["auroc"] == pytest.approx(f32(roc_auc_score(target, scores)), abs=1e-12)
        assert record["ap"] == pytest.approx(f32(average_precision_score(target, scores)), abs=1e-12)
