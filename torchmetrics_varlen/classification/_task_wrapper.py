"""The ``task=`` keyword of the binary classes, as torchmetrics' task wrappers have it.

torchmetrics' ``AUROC(task="multiclass", num_classes=5)`` returns a ``MulticlassAUROC``; likewise
``VarlenAUROC(task="multiclass", num_classes=5)`` returns a ``VarlenMulticlassAUROC`` (not an instance of
``VarlenAUROC``, which stays the binary class, as ``isinstance(AUROC(task="multiclass", ...), AUROC)`` is false).

The ``__new__`` lives in :class:`_TaskWrapper`, a base that comes after the class whose ``__init__`` a binary class
uses: ``inspect.signature``, IDEs and mypy then read that ``__init__`` (its named keywords), not ``__new__``'s
``*args, **kwargs``.
"""

from __future__ import annotations

import inspect
from typing import Any

from torchmetrics import Metric

from torchmetrics_varlen.classification._base import _VarlenMetric
from torchmetrics_varlen.functional._validation import TASKS, validate_ranking_args, validate_task_args


class _TaskWrapper(_VarlenMetric):
    """A binary class that builds its multiclass / multilabel class for ``task="multiclass"`` / ``"multilabel"``."""

    @classmethod
    def _task_classes(cls) -> dict[str, type[Metric]]:
        """The class of each other task (classes defined after the binary one: a method, read when called)."""
        raise NotImplementedError

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """The binary metric (``__init__`` follows), or with ``task="multiclass"`` / ``"multilabel"`` the task class
        built from the same arguments (bound to ``cls``'s signature, passed by name to those the task class takes).
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
        target = cls._task_classes()[task]
        accepted = inspect.signature(target.__init__).parameters
        forward = {}
        for name, value in list(arguments.items())[1:]:  # `self` first
            if name in accepted:
                forward[name] = value
            elif name == "max_fpr" and value is not None:
                validate_ranking_args(task=task, max_fpr=value)
        return target(**forward, **extra)
