"""Every private name of PyTorch, torchmetrics and the standard library that the package relies on, in one place.

The package overrides some of torchmetrics' private methods (its guarded sync replaces the per-state gathers; a
``VarlenCollection`` forms compute groups by its own rule), reads and sets private attributes of metrics and
collections, calls private functions of ``torch.distributed`` and torch's grad mode switch, and imports the options
of collectives from ``torch._C``. None of it is public API: a release may rename or remove any of it without notice,
and the package would then fail far from the cause (a sync deep in a user's job), or, for an override, silently stop
being called.

:data:`PRIVATE_NAMES` lists each such name under the object that owns it. ``tests/test_compat.py`` keeps it true:

- it parses every module of the package and fails on a private name (``_x``, not a dunder) the package reads,
  writes, overrides, names in a string (``getattr``, ``__dict__``, a tuple of attribute names) or imports, that the
  package does not define itself and that this registry does not list (the failure names the file, the line and the
  owner to list it under);
- it fails on a listed name that the installed torch / torchmetrics no longer has (naming the owner and the name),
  and on a listed name the package no longer uses.

The supported range (``pyproject.toml``) is tested at both ends (``nox -s oldest`` runs ``tests/test_compat.py``
against the lower bounds). A name that the oldest supported release lacks and whose absence the package handles goes
into :data:`MAY_BE_ABSENT` as well, saying how it is handled; the test then accepts its absence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

# owner (a module, or a class by its import path) -> the private names of it that the package uses; everything
# imported from a private module counts, its public-looking names included
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    # torch._C: the grad mode switch itself (what torch.set_grad_enabled sets, without building its context object)
    "torch": ("_C",),
    "torch._C": ("_set_grad_enabled",),
    # the options of the collectives called with a per-call timeout (public names, but of a private module)
    "torch._C._distributed_c10d": ("AllToAllOptions", "AllgatherOptions", "AllreduceOptions", "BroadcastOptions"),
    # the default group, its store, and the unique name of a group
    "torch.distributed.distributed_c10d": ("_get_default_group", "_get_default_store", "_get_process_group_name"),
    # the all-gather into one tensor that takes those options (a timeout)
    "torch.distributed.ProcessGroup": ("_allgather_base",),
    # whether stored pieces are views of the shared zeros (then merged without a copy); a counter state's version
    # (bumped by every in-place write): its value known on the host stays valid without a read from the device
    "torch.Tensor": ("_base", "_version"),
    # saving and restoring a metric's or collection's ledger (sampler segment, counters) with its states; a
    # collection's metrics, replaced by their wrapped form
    "torch.nn.Module": ("_load_from_state_dict", "_modules", "_save_to_state_dict"),
    # The guarded sync replaces the per-state gathers (_sync_dist) inside torchmetrics' compute wrapper
    # (_wrap_compute); list states are snapshot without a copy (_copy_state_dict); a wrapper merges update kwargs
    # (_filter_kwargs); the package's metrics and Varlen run the update wrapper's bookkeeping themselves (_wrap_update,
    # overridden, calling _move_list_states_to_cpu as it does), and Varlen runs it once for both metrics when the
    # wrapped metric's update is torchmetrics' own wrapper (own_update below). Instance attributes read or set: the
    # update counter, the cached value, the sync flags, the state registry (defaults, reductions, persistence), and
    # what forward() switches and puts back (forward's batch value, _should_unsync, _enable_grad).
    "torchmetrics.Metric": (
        "_computed",
        "_copy_state_dict",
        "_defaults",
        "_enable_grad",
        "_filter_kwargs",
        "_forward_cache",
        "_is_synced",
        "_move_list_states_to_cpu",
        "_persistent",
        "_reductions",
        "_should_unsync",
        "_sync_dist",
        "_to_sync",
        "_update_count",
        "_wrap_compute",
        "_wrap_update",
    ),
    # VarlenCollection's compute groups: which metrics share states (_equal_metric_states, overridden), the sharing
    # itself (_compute_groups_create_state_ref, overridden per update), the groups and whether they are formed yet,
    # and whether the members hold copies of the shared states
    "torchmetrics.MetricCollection": (
        "_compute_groups_create_state_ref",
        "_equal_metric_states",
        "_groups",
        "_groups_checked",
        "_state_is_copy",
    ),
    # the caller of compute() that the "never seen" warning points at
    "sys": ("_getframe",),
}

# (owner, name) of PRIVATE_NAMES -> how the package runs where the installed release lacks the name (none today: the
# oldest supported torchmetrics, 1.7.4, has every name above)
MAY_BE_ABSENT: dict[tuple[str, str], str] = {}


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
