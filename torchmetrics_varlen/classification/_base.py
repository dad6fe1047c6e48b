"""The state handling and synchronisation shared by the binary ranking metrics."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from torchmetrics_varlen._checks import Thresholds, threshold_tensor, validate_binary_tensors, validate_ranking_args
from torchmetrics_varlen._dist.exchange import sync_states
from torchmetrics_varlen._dist.guard import resolve_group
from torchmetrics_varlen.distributed import distributed_available
from torchmetrics_varlen.functional._ranking import _binned_confmat, _format_binary


def _cat(state: list[Tensor] | Tensor, dtype: torch.dtype, device: torch.device) -> Tensor:
    if isinstance(state, Tensor):
        return state
    if not state:
        return torch.empty(0, dtype=dtype, device=device)
    return torch.cat(state) if len(state) > 1 else state[0]


class _BinaryRankingMetric(Metric):
    """Scores and labels kept per sample (exact mode) or as a threshold confusion matrix (binned mode).

    Subclasses set ``_fix_hint`` if needed and implement ``compute`` from :meth:`_exact_inputs` or ``self.confmat``.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    preds: list[Tensor] | Tensor
    target: list[Tensor] | Tensor
    confmat: Tensor
    num_samples: Tensor
    thresholds: Tensor | None

    def __init__(
        self,
        *,
        thresholds: Thresholds = None,
        ignore_index: int | None = None,
        validate_args: bool = True,
        sync_timeout: float | None = 60.0,
        _extra_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if validate_args:
            validate_ranking_args(thresholds=thresholds, ignore_index=ignore_index)
        if sync_timeout is not None and (isinstance(sync_timeout, bool) or not sync_timeout > 0):
            msg = (
                "Expected argument `sync_timeout` to be a positive number of seconds or None,"
                f" but got {sync_timeout!r}."
            )
            raise ValueError(msg)
        self.ignore_index = ignore_index
        self.validate_args = validate_args
        self.sync_timeout = sync_timeout
        thr = threshold_tensor(thresholds)
        self.register_buffer("thresholds", thr, persistent=False)
        if thr is None:
            self.add_state("preds", default=[], dist_reduce_fx="cat")
            self.add_state("target", default=[], dist_reduce_fx="cat")
        else:
            self.add_state("confmat", default=torch.zeros(thr.numel(), 2, 2, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("num_samples", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self._config: dict[str, Any] = {
            "metric": type(self).__name__,
            "thresholds": None if thr is None else thr.tolist(),
            "ignore_index": ignore_index,
            **(_extra_config or {}),
        }

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Validate one batch and add it to the state; a batch that fails validation changes nothing.

        Args:
            preds: Scores of any shape, floating point (probabilities or logits).
            target: Labels of the same shape, integer or bool, in {0, 1} (or ``ignore_index``).
        """
        if self.validate_args:
            try:
                validate_binary_tensors(preds, target, self.ignore_index)
            except (ValueError, TypeError):
                self._update_count -= 1  # the failed call must not count as an update either
                raise
        scores, labels = _format_binary(preds, target, self.ignore_index, binned=self.thresholds is not None)
        if self.thresholds is None:
            assert isinstance(self.preds, list)
            assert isinstance(self.target, list)
            self.preds.append(scores)
            self.target.append(labels)
        else:
            self.confmat += _binned_confmat(scores, labels, self.thresholds.to(scores.device))
        self.num_samples += scores.numel()

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if int(self.num_samples) and not self._update_count:
            self._update_count = 1  # loaded states are updates: compute() must not warn that none happened

    def _exact_inputs(self) -> tuple[Tensor, Tensor]:
        device = self.num_samples.device
        return _cat(self.preds, torch.float32, device), _cat(self.target, torch.bool, device)

    def _wrap_compute(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        """Silence torchmetrics' "compute before update" warning on a rank that legitimately saw no data."""
        wrapped = super()._wrap_compute(compute)

        @functools.wraps(compute)
        def wrapped_compute(*args: Any, **kwargs: Any) -> Any:
            if self._update_count or not (self._to_sync and distributed_available()):
                return wrapped(*args, **kwargs)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"The ``compute`` method of metric", category=UserWarning)
                return wrapped(*args, **kwargs)

        return wrapped_compute

    def _sync_dist(self, dist_sync_fn: Callable[..., Any] | None = None, process_group: Any | None = None) -> None:
        """Replace torchmetrics' per-state gathers with one guarded, variable-length exchange (``dist_sync_fn``
        is not used).
        """
        group = resolve_group(process_group or self.process_group)
        exact = self.thresholds is None
        cat = dict(zip(("preds", "target"), self._exact_inputs(), strict=False)) if exact else {}
        # Exact mode needs no all-reduce: the per-rank row counts arrive with the check-in.
        summed = {} if exact else {"num_samples": self.num_samples, "confmat": self.confmat}
        name = type(self).__name__
        result = sync_states(
            cat,
            summed,
            config=self._config,
            group=group,
            timeout=self.sync_timeout,
            what=f"{name}.compute()",
            fix=(
                f"Call {name}.compute() (or log the metric) on every rank of its process group, not only on rank 0;"
                " use sync_on_compute=False for a rank-local value."
            ),
            device=self.num_samples.device if not exact or not cat["preds"].numel() else cat["preds"].device,
        )
        for key, value in {**result.cat, **result.summed}.items():
            setattr(self, key, value)
        if exact:
            self.num_samples = self.num_samples.new_tensor(sum(result.rows_per_rank["preds"]))
