"""Every private name of PyTorch, torchmetrics and the standard library that the package relies on, in one place.

The package overrides some of torchmetrics' private methods (its guarded sync replaces the per-state gathers; a
``VarlenCollection`` forms compute groups by its own rule), reads and sets private attributes of metrics and
collections, calls private functions of ``torch.distributed`` and imports the options of collectives from
``torch._C``. None of it is public API: a release may rename or remove any of it without notice,
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

from typing import Any

import torch.distributed as dist

# owner (a module, or a class by its import path) -> the private names of it that the package uses; everything
# imported from a private module counts, its public-looking names included
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    # the options of the collectives called with a per-call timeout (public names, but of a private module)
    "torch._C._distributed_c10d": ("AllToAllOptions", "AllgatherOptions", "AllreduceOptions", "BroadcastOptions"),
    # the default group, its store, and the unique name of a group
    "torch.distributed.distributed_c10d": ("_get_default_group", "_get_default_store", "_get_process_group_name"),
    # the all-gather into one tensor that takes those options (a timeout)
    "torch.distributed.ProcessGroup": ("_allgather_base",),
    # a counter state's version (bumped by every in-place write): its value known on the host stays valid without a
    # read from the device
    "torch.Tensor": ("_version",),
    # saving and restoring a metric's or collection's ledger (sampler segment, counters) with its states; a
    # collection's metrics, replaced by their wrapped form
    "torch.nn.Module": ("_load_from_state_dict", "_modules", "_save_to_state_dict"),
    # torchmetrics.Metric, one line each: why no public route serves
    "torchmetrics.Metric": (
        "_computed",  # the cached value, dropped when a refused batch is put back
        "_defaults",  # read: the states of a wrapped metric (Varlen syncs and checks them; no public registry)
        "_filter_kwargs",  # overridden by Varlen: the keywords its wrapped metric takes (MetricCollection calls it)
        "_forward_cache",  # set by Varlen's forward: the batch value Lightning logs on step
        "_persistent",  # set: Varlen registers its wrapped metric's states, unsaved, as its own
        "_reductions",  # read: Varlen syncs a wrapped metric's states by their reductions
        "_sync_dist",  # overridden: the guarded exchange replaces torchmetrics' per-state gathers
        "_update_count",  # set: a refused update does not count as one (torchmetrics' update wrapper counted it)
        "_wrap_compute",  # overridden: the guard's warnings, the states put back when a compute fails
    ),
    # torchmetrics.MetricCollection
    "torchmetrics.MetricCollection": (
        "_equal_metric_states",  # overridden: only metrics that take a batch by the same rules share states
    ),
    # the caller of compute() that the "never seen" warning points at
    "sys": ("_getframe",),
}

# (owner, name) of PRIVATE_NAMES -> how the package runs where the installed release lacks the name (none today: the
# oldest supported torchmetrics, 1.7.4, has every name above)
MAY_BE_ABSENT: dict[tuple[str, str], str] = {}


def default_group() -> Any:
    """The default process group (``init_process_group``'s)."""
    return dist.distributed_c10d._get_default_group()


def default_store() -> Any:
    """The store of the default process group (a ``TCPStore``, ``FileStore`` or a ``PrefixStore`` over one)."""
    return dist.distributed_c10d._get_default_store()


def process_group_name(group: Any) -> str:
    """The group's unique name: the same on every member rank, different for every group created."""
    return str(dist.distributed_c10d._get_process_group_name(group))
