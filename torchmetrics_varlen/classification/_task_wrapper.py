"""The ``task=`` keyword of the binary classes, as torchmetrics' task wrappers have it.

torchmetrics' ``AUROC(task="multiclass", num_classes=5)`` returns a ``MulticlassAUROC``; likewise
``VarlenAUROC(task="multiclass", num_classes=5)`` returns a ``VarlenMulticlassAUROC`` (not an instance of
``VarlenAUROC``, which stays the binary class, as ``isinstance(AUROC(task="multiclass", ...), AUROC)`` is false).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from torchmetrics import Metric

from torchmetrics_varlen.functional._tasks import TASKS, validate_ranking_args, validate_task_args


def new_for_task(
    cls: type[Metric], args: tuple[Any, ...], kwargs: dict[str, Any], by_task: Mapping[str, type[Metric]]
) -> Any:
    """``cls.__new__``: a bare ``cls`` for the binary task (``__init__`` follows), else the task class built from the
    same arguments (bound to ``cls``'s signature, passed by name to those the task class takes).
    """
    task = kwargs.get("task", "binary")
    if task == "binary":
        return object.__new__(cls)
    if task not in TASKS:
        validate_task_args(task, None, None, None)
    bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    extra = arguments.pop("kwargs", {})
    target = by_task[task]
    accepted = inspect.signature(target.__init__).parameters
    forward = {}
    for name, value in list(arguments.items())[1:]:  # `self` first
        if name in accepted:
            forward[name] = value
        elif name == "max_fpr" and value is not None:
            validate_ranking_args(task=task, max_fpr=value)
    return target(**forward, **extra)
