"""16-bit logits keep their ranking: AUROC, AP, curves and best F1 of float16 / bfloat16 logits are scikit-learn's on
those logits (issue 36, item 3).

Both statistics are invariant under the sigmoid, so the scores must not merge logits the model told apart. A
bfloat16 sigmoid rounds every logit above about 5.5 to 1.0: on 100,000 bf16 logits N(+-2, 2) that moved AP by 4.8e-4
from scikit-learn's on the logits (torchmetrics still does). The package gives 16-bit logits float32 scores
(``functional/_normalize.py``); 16-bit probabilities (a batch inside [0, 1]) keep their values. The references are
scikit-learn on the logits cast to float64, compared to 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _float32 import expit, f32
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score, roc_curve

from torchmetrics_varlen import (
    VarlenAUROC,
    VarlenAveragePrecision,
    VarlenBestF1,
    VarlenPrecisionRecallCurve,
    VarlenROC,
)
from torchmetrics_varlen.functional import auroc, average_precision

SIXTEEN = [torch.bfloat16, torch.float16]
N = 100_000
BATCH = 1000


def _logits(n: int, dtype: torch.dtype, seed: int, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits N(+2, 2) for positives and N(-2, 2) for negatives, in ``dtype``, and their 0 / 1 labels."""
    gen = torch.Generator().manual_seed(seed)
    shape = (n,) if width is None else (n, width)
    target = torch.randint(0, 2, shape, generator=gen)
    logits = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2 + (4 * target - 2)).to(dtype)
    return logits, target


def _fed(metric: torch.nn.Module, preds: torch.Tensor, target: torch.Tensor, batch: int = BATCH) -> torch.nn.Module:
    for i in range(0, preds.shape[0], batch):
        metric.update(preds[i : i + batch], target[i : i + batch])  # type: ignore[operator]
    return metric


def _sk(t: torch.Tensor, s: torch.Tensor) -> tuple[float, float]:
    """scikit-learn's AUROC and AP of float64 ``s`` (``t``: 0 / 1)."""
    t_np, s_np = t.numpy(), s.double().numpy()
    return float(roc_auc_score(t_np, s_np)), float(average_precision_score(t_np, s_np))


@pytest.mark.parametrize("dtype", SIXTEEN)
def test_binary_auroc_and_ap_of_16_bit_logits_are_scikit_learns_on_the_logits(dtype: torch.dtype) -> None:
    """The user's measurement: bf16 AP was 0.921249 where scikit-learn on the logits gives 0.921731 (float16: 6.9e-5
    off). The 16-bit sigmoid of the logits is far off (shown here), the package's value is not.
    """
    logits, target = _logits(N, dtype, 0)
    sk_auroc, sk_ap = _sk(target, logits)
    rounded_auroc, rounded_ap = _sk(target, logits.sigmoid())  # torch's 16-bit sigmoid: torchmetrics' scores
    assert abs(rounded_ap - sk_ap) > (1e-4 if dtype == torch.bfloat16 else 2e-5)
    ours_auroc = _fed(VarlenAUROC(), logits, target).compute()  # type: ignore[operator]
    ours_ap = _fed(VarlenAveragePrecision(), logits, target).compute()  # type: ignore[operator]
    assert float(ours_auroc) == pytest.approx(sk_auroc, abs=1e-6)
    assert float(ours_ap) == pytest.approx(sk_ap, abs=1e-6)
    assert float(auroc(logits, target)) == float(ours_auroc)  # the functional API: the same bits
    assert float(average_precision(logits, target)) == float(ours_ap)
    # and the value of the float32 sigmoid rounded once (the package's scores), exactly as float32 logits give
    assert float(ours_ap) == f32(_sk(target, expit(logits))[1])
    assert float(_fed(VarlenAveragePrecision(), logits.float(), target).compute()) == float(ours_ap)  # type: ignore[operator]


@pytest.mark.parametrize("dtype", SIXTEEN)
def test_multilabel_16_bit_logits_are_scikit_learns_on_the_logits(dtype: torch.dtype) -> None:
    logits, target = _logits(N // 4, dtype, 1, width=3)
    per_label = [_sk(target[:, k], logits[:, k]) for k in range(3)]
    for average in ("macro", "none"):
        args = {"task": "multilabel", "num_labels": 3, "average": average}
        ours_auroc = _fed(VarlenAUROC(**args), logits, target).compute()  # type: ignore[arg-type, operator]
        ours_ap = _fed(VarlenAveragePrecision(**args), logits, target).compute()  # type: ignore[arg-type, operator]
        sk_auroc, sk_ap = (np.array([p[i] for p in per_label]) for i in (0, 1))
        if average == "macro":
            sk_auroc, sk_ap = sk_auroc.mean(), sk_ap.mean()
        assert np.asarray(ours_auroc.tolist()) == pytest.approx(sk_auroc, abs=1e-6)
        assert np.asarray(ours_ap.tolist()) == pytest.approx(sk_ap, abs=1e-6)
    micro = _fed(VarlenAUROC(task="multilabel", num_labels=3, average="micro"), logits, target).compute()  # type: ignore[operator]
    assert float(micro) == pytest.approx(roc_auc_score(target.reshape(-1), logits.reshape(-1).double()), abs=1e-6)


def test_multiclass_bf16_logits_get_a_float32_softmax() -> None:
    """Multiclass bf16 logits: the softmax over the classes is rounded to float32, not to bfloat16, so one-vs-rest
    AUROC and AP are scikit-learn's on the float64 softmax of those logits (a bfloat16 softmax is far off).
    """
    gen = torch.Generator().manual_seed(2)
    classes, n = 4, N // 2
    target = torch.randint(0, classes, (n,), generator=gen)
    logits = (torch.randn(n, classes, generator=gen, dtype=torch.float64) * 2).to(torch.bfloat16)
    logits[torch.arange(n), target] += 2
    probs = logits.double().softmax(dim=1).numpy()
    sk_auroc = roc_auc_score(target.numpy(), probs, multi_class="ovr", average="macro")
    sk_ap = np.mean([average_precision_score(target.numpy() == k, probs[:, k]) for k in range(classes)])
    rounded = logits.softmax(dim=1).double().numpy()  # bfloat16: torchmetrics' scores
    assert abs(np.mean([average_precision_score(target.numpy() == k, rounded[:, k]) for k in range(4)]) - sk_ap) > 1e-5
    args = {"task": "multiclass", "num_classes": classes}
    assert float(_fed(VarlenAUROC(**args), logits, target).compute()) == pytest.approx(sk_auroc, abs=1e-6)  # type: ignore[arg-type, operator]
    assert float(_fed(VarlenAveragePrecision(**args), logits, target).compute()) == pytest.approx(sk_ap, abs=1e-6)  # type: ignore[arg-type, operator]


@pytest.mark.parametrize("dtype", SIXTEEN)
def test_curves_and_best_f1_of_16_bit_logits(dtype: torch.dtype) -> None:
    """ROC and PR curves are scikit-learn's on the logits, with float32 thresholds (the logits' float32 sigmoids);
    the best F1 is the best of scikit-learn's PR curve on the logits, its threshold that logit's float32 sigmoid.
    """
    logits, target = _logits(20_000, dtype, 3)
    fpr, tpr, thresholds = _fed(VarlenROC(), logits, target).compute()  # type: ignore[operator]
    sk_fpr, sk_tpr, sk_thr = roc_curve(target.numpy(), logits.double().numpy(), drop_intermediate=False)
    assert thresholds.dtype == torch.float32
    assert fpr.tolist() == pytest.approx(f32(sk_fpr), abs=1e-6)
    assert tpr.tolist() == pytest.approx(f32(sk_tpr), abs=1e-6)
    # distinct float32 sigmoids of distinct logits, but for the ones that saturate (> ~17) or sit within one float32
    # step of 0.5: at most a handful here
    assert thresholds.numel() >= len(sk_thr) - 1 - 5
    precision, recall, pr_thr = _fed(VarlenPrecisionRecallCurve(), logits, target).compute()  # type: ignore[operator]
    sk_p, sk_r, sk_pr_thr = precision_recall_curve(target.numpy(), logits.double().numpy())
    assert pr_thr.dtype == torch.float32
    assert precision.tolist() == pytest.approx(f32(sk_p), abs=1e-6)
    assert recall.tolist() == pytest.approx(f32(sk_r), abs=1e-6)
    assert torch.equal(pr_thr, expit(torch.from_numpy(sk_pr_thr.copy()).to(dtype)))
    f1, threshold = _fed(VarlenBestF1(), logits, target).compute()  # type: ignore[operator]
    with np.errstate(invalid="ignore", divide="ignore"):
        sk_f1 = np.nan_to_num(2 * sk_p * sk_r / (sk_p + sk_r))[:-1]
    assert float(f1) == pytest.approx(sk_f1.max(), abs=1e-6)
    assert threshold.dtype == torch.float32
    best = torch.from_numpy(sk_pr_thr[sk_f1 == sk_f1.max()].copy()).to(dtype)
    assert float(threshold) in expit(best).tolist()


@pytest.mark.parametrize("dtype", SIXTEEN)
def test_16_bit_probabilities_keep_their_values(dtype: torch.dtype) -> None:
    """A 16-bit batch inside [0, 1] is scores, not logits: ranked as they are, with thresholds in its dtype."""
    gen = torch.Generator().manual_seed(4)
    target = torch.randint(0, 2, (5000,), generator=gen)
    probs = (torch.rand(5000, generator=gen, dtype=torch.float64) * 0.7 + 0.3 * target).to(dtype)
    sk_auroc, sk_ap = _sk(target, probs)
    assert float(_fed(VarlenAUROC(), probs, target).compute()) == f32(sk_auroc)  # type: ignore[operator]
    assert float(_fed(VarlenAveragePrecision(), probs, target).compute()) == f32(sk_ap)  # type: ignore[operator]
    _, _, thresholds = _fed(VarlenROC(), probs, target).compute()  # type: ignore[operator]
    assert thresholds.dtype == dtype
    assert torch.equal(thresholds.unique(), probs.unique())


@pytest.mark.parametrize("dtype", SIXTEEN)
def test_batch_size_does_not_change_16_bit_logits_bits(dtype: torch.dtype) -> None:
    """Equal logits stay tied with float32 scores too: one value, bit for bit, for every batch size (from 64 on: a
    smaller batch of logits may lie inside [0, 1], and is then taken for probabilities, as torchmetrics does).
    """
    logits, target = _logits(6000, dtype, 5)
    values = set()
    for batch in (64, 100, 4095, 4096, 6000):
        metric = _fed(VarlenAveragePrecision(), logits[:3000], target[:3000], batch)
        values.add(float(_fed(metric, logits[3000:], target[3000:], batch + 1).compute()))  # type: ignore[operator]
    assert len(values) == 1
    assert values.pop() == pytest.approx(_sk(target, logits)[1], abs=1e-6)


@pytest.mark.parametrize("dtype", SIXTEEN)
def test_the_16_bit_mode_and_16_bit_logits(dtype: torch.dtype) -> None:
    """``thresholds=<16-bit dtype>`` counts every score rounded to that dtype, as before: 16-bit logits' float32
    scores round there to the 16-bit sigmoid (the same bits as rounding the float64 sigmoid once). Counting the
    logits' own patterns instead (``normalization=None``: a monotone map, the same ranking) is that mode's exact
    answer on the logits, in constant memory.
    """
    logits, target = _logits(N // 4, dtype, 6)
    rounded = _sk(target, expit(logits).to(dtype))
    assert float(_fed(VarlenAUROC(thresholds=dtype), logits, target).compute()) == f32(rounded[0])  # type: ignore[operator]
    assert float(_fed(VarlenAveragePrecision(thresholds=dtype), logits, target).compute()) == f32(rounded[1])  # type: ignore[operator]
    on_logits = _sk(target, logits)
    raw = {"thresholds": dtype, "normalization": None}
    assert float(_fed(VarlenAUROC(**raw), logits, target).compute()) == f32(on_logits[0])  # type: ignore[arg-type, operator]
    assert float(_fed(VarlenAveragePrecision(**raw), logits, target).compute()) == f32(on_logits[1])  # type: ignore[arg-type, operator]
    exact = _fed(VarlenAveragePrecision(normalization=None), logits, target).compute()  # type: ignore[operator]
    assert float(exact) == f32(on_logits[1])
