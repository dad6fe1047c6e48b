"""Every private name of PyTorch and torchmetrics the package relies on, in one place.

The package overrides a few of torchmetrics' private methods (its guarded sync replaces the per-state gathers) and
reads some of a metric's private attributes; it calls three private functions of ``torch.distributed`` and torch's
grad mode switch.
``tests/test_compat.py`` checks each name below against the installed versions, so that an upstream rename fails
one test that names it instead of a distributed sync somewhere deep in a user's job, and checks that the package
uses no other private name of either library. The supported range (``pyproject.toml``) is tested at both ends
(``nox -s oldest``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

# torch.distributed.distributed_c10d: the default group, its store, and the unique name of a group.
TORCH_PRIVATE = ("_get_default_group", "_get_default_store", "_get_process_group_name")

# torch._C: the grad mode switch itself (what torch.set_grad_enabled sets, without building its context object).
TORCH_C_PRIVATE = ("_set_grad_enabled",)

# torch.nn.Module: saving and restoring a metric's ledger (sampler segment, counters) with its states.
TORCH_MODULE_OVERRIDDEN = ("_load_from_state_dict", "_save_to_state_dict")

# torchmetrics.Metric methods the package overrides: the guarded sync replaces the per-state gathers
# (_sync_dist) inside torchmetrics' compute wrapper (_wrap_compute); list states are snapshot without a copy
# (_copy_state_dict, whose result torchmetrics keeps as _cache for unsync); a wrapper merges update kwargs
# (_filter_kwargs) and runs the update wrapper's bookkeeping itself once for both metrics (_wrap_update, calling
# _move_list_states_to_cpu as it does).
TORCHMETRICS_OVERRIDDEN = (
    "_wrap_compute",
    "_sync_dist",
    "_copy_state_dict",
    "_filter_kwargs",
    "_wrap_update",
    "_move_list_states_to_cpu",
)

# Attributes of every torchmetrics.Metric instance the package reads or sets: the update counter, the cached value,
# the sync flags and snapshot, and the state registry (defaults, reductions, persistence, forward's batch value).
TORCHMETRICS_ATTRIBUTES = (
    "_update_count",
    "_computed",
    "_is_synced",
    "_to_sync",
    "_cache",
    "_defaults",
    "_reductions",
    "_persistent",
    "_forward_cache",
    "_enable_grad",
)


# Switch autograd on or off for this thread: what ``torch.set_grad_enabled(mode)`` sets (as a function or as a
# context), without building its object (the wrapper's update runs it twice per batch).
set_grad_mode: Callable[[bool], None] = torch._C._set_grad_enabled


def own_update(metric: Any) -> Callable[..., Any] | None:
    """The metric's class ``update`` bound to it when its ``update`` attribute is torchmetrics' own update wrapper of
    that method, on a metric that sets its attributes as torchmetrics does; ``None`` otherwise.

    torchmetrics' ``Metric.__init__`` sets ``self.update = self._wrap_update(self.update)``, and
    ``Metric._wrap_update`` builds the wrapper with ``functools.wraps``, whose ``__wrapped__`` is the method it wraps:
    so a class that keeps ``Metric._wrap_update`` and ``Metric.__setattr__``, whose instance attribute ``update``
    wraps the class's ``update`` bound to this very metric, calls that method through torchmetrics' bookkeeping only
    (a wrapper a user set over it wraps the wrapper instead, and gives ``None``).
    """
    from torchmetrics import Metric

    cls: Any = type(metric)
    if cls._wrap_update is not Metric._wrap_update or cls.__setattr__ is not Metric.__setattr__:
        return None
    bound = getattr(metric.__dict__.get("update"), "__wrapped__", None)
    if getattr(bound, "__self__", None) is not metric or getattr(bound, "__func__", None) is not cls.update:
        return None
    return bound


def default_group() -> Any:
    """The default process group (``init_process_group``'s)."""
    return dist.distributed_c10d._get_default_group()


def default_store() -> Any:
    """The store of the default process group (a ``TCPStore``, ``FileStore`` or a ``PrefixStore`` over one)."""
    return dist.distributed_c10d._get_default_store()


def process_group_name(group: Any) -> str:
    """The group's unique name: the same on every member rank, different for every group created."""
    return str(dist.distributed_c10d._get_process_group_name(group))
