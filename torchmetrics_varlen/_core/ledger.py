"""The sample ledger every guarded metric keeps: sampler positions, the padding cut, rejected batches, the dedup
mode, the counters, the ``SyncReport`` and its warning, and what a checkpoint needs to resume on any world size.

One :class:`Ledger` is held by each ``Varlen*`` metric, each :class:`~torchmetrics_varlen.Varlen` and each
:class:`~torchmetrics_varlen.VarlenCollection`. No ``torch.distributed`` here: the host tells the ledger its rank and
world size.

**Positions.** The ledger counts the rows a rank was dealt in *segments*. A segment starts at ``reset()`` (global
position ``base = 0``) or when states saved on other ranks are loaded (``load_rank_states``): then ``base`` is the
number of global sampler positions the old ranks had dealt (``W_old * k`` after ``k`` rows each;
``_core/checkpoint.py``). Row ``j`` of a segment on rank ``r`` of ``W`` has global position ``base + j * W + r``;
positions ``>= dataset_size`` are padding. With ``base = 0`` this is the ``DistributedSampler`` rule; after a resume
it is the rule of a ``DistributedSampler`` over the samples not dealt yet.

**Counters.** A host's counters (rows seen, padding dropped, rejected rows, stored samples) are plain 0-dim int64
tensor states: summed by the sync, reset by ``reset()``, saved in ``state_dict``, shared by a compute group, and read
as they are (reading one writes nothing). Each batch adds to them in place (``state += n``), once, when the ledger
closes the batch (:meth:`Ledger.batch`); a metric's copies and loaded states own their tensors
(``own_tensor_states`` in ``_core/guarded_sync.py``). On the device path the ledger keeps their values on the host too.

**Batches.** Every intake (the package's metrics, ``Varlen``, ``VarlenCollection``) takes a batch through
:meth:`Ledger.batch`: ``with ledger.batch(host, rows, start) as batch: ...`` gives the batch's sampler position,
cuts its padding on request (:meth:`Batch.cut`) and, when the block ends, counts its rows as taken (rows, padding,
stored samples) or, if the block raised, as rejected (they took their sampler positions; nothing was stored).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen._core.callers import lightning_sanity_check, user_stacklevel
from torchmetrics_varlen._core.padding import check_padding, sampler_kept_rows
from torchmetrics_varlen._core.report import SyncReport, report_from_counts
from torchmetrics_varlen._dist.group import group_position
from torchmetrics_varlen.functional._device import on_device
from torchmetrics_varlen.functional._validation import int_ends, ints_within

KEY = "varlen_ledger"  # the state_dict entry (with the host's persistent states): [world, rank, base, origin, *counts]
_COUNTS = ("rows_seen", "padding_dropped", "rejected")


class Batch:
    """One batch of an intake, from :meth:`Ledger.batch` until its ``with`` block ends (see the module docstring).

    Attributes:
        start: The segment position of the batch's first row (``None``: the next one, read when needed).
        rows: The rows it was dealt.
        kept: Of those, the rows that are not sampler padding (``rows`` until :meth:`cut` says otherwise).
        stored: Samples the host stored from it (the ``num_samples`` counter of the package's metrics).
        counted_call: Whether torchmetrics' update wrapper counted the call that brought the batch (``update``):
            then a refusal takes that count back (:meth:`Ledger.refuse`).
    """

    __slots__ = ("counted_call", "host", "kept", "ledger", "process_group", "rows", "start", "stored")

    def __init__(
        self, ledger: Ledger, host: Any, rows: int, start: int | None, process_group: Any, counted_call: bool
    ) -> None:
        self.ledger, self.host, self.rows, self.start, self.process_group = ledger, host, rows, start, process_group
        self.kept, self.stored, self.counted_call = rows, 0, counted_call

    def cut(self) -> int:
        """How many of the batch's rows are not sampler padding (all of them without ``dataset_size``): they are the
        first ``kept`` rows (positions grow with the row index).
        """
        ledger = self.ledger
        if ledger.dataset_size is None:
            return self.kept
        if self.start is None:
            self.start = ledger.position(self.host)
        self.kept = ledger.kept_rows(self.start, self.rows, self.process_group)
        return self.kept

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        ledger, host, rows = self.ledger, self.host, self.rows
        if kind is not None:
            ledger.refuse(host, rows, counted_call=self.counted_call)
            return
        ledger.dealt += rows
        names = ledger.counters
        if names is None:
            own = ledger.own
            own[0] += rows
            own[1] += rows - self.kept
            return
        add = ledger.add
        add(host, names[0], rows)
        if rows != self.kept:
            add(host, names[1], rows - self.kept)
        if self.stored:
            add(host, "num_samples", self.stored)


def writable_state(host: Any, name: str) -> Tensor:
    """The host's tensor state ``name``, to be added to in place. A state made under ``torch.inference_mode()`` (reset
    or synced inside Lightning's evaluation loop) is an inference tensor, which only inference mode may write in place:
    outside it, the state is replaced by a normal copy first, so that the metric takes batches there too.
    """
    value: Tensor = host.__dict__[name]
    if value.is_inference() and not torch.is_inference_mode_enabled():
        value = value.clone()
        setattr(host, name, value)
    return value


class Ledger:
    """The bookkeeping of one guarded metric (see the module docstring).

    Args:
        what: How messages name the host (``"VarlenAUROC"``, ``"Varlen(BinaryAccuracy)"``).
        dataset_size: ``len(dataset)`` of the ``DistributedSampler``, or ``None``.
        counters: The host's tensor states holding rows seen, padding dropped and rejected rows (summed by the
            sync, reset by ``reset()``); ``None``: the ledger keeps them itself (a collection).
    """

    def __init__(self, what: str, dataset_size: int | None, counters: tuple[str, str, str] | None = None) -> None:
        self.what = what
        self.dataset_size = dataset_size
        self.counters = counters
        self.own = [0, 0, 0]
        self.base = 0  # global sampler positions dealt before this segment
        self.origin = 0  # rows + rejected already counted when this segment started (loaded rows)
        self.saved_at: tuple[int, int] | None = None  # (rank, world) of loaded states, until checked
        self.persistent = False  # for a ledger that keeps its own counters (the host's states decide otherwise)
        self.warned = False
        # the ledger of the VarlenCollection that cuts the sampler padding before the host's batches arrive (the host
        # has no dataset_size of its own): the report's ``missing``, the padding check and the warning count against it
        self.cut_by: Ledger | None = None
        # the most rows this rank's batches showed past dataset_size in the epoch, refused batches included (an
        # intake that refuses them at the update, a collection's: its compute() must still fail, :meth:`report`)
        self.padding_shown = 0
        self.dealt = 0  # rows of every batch this process gave the ledger (taken or refused), never reset
        # per counter on the device path: (the tensor, its version, its value), so that a value is read back from the
        # device once, not per batch (``position()`` reads two counters with ``dataset_size``)
        self._known: dict[str, tuple[Tensor, int, int]] = {}

    # ------------------------------------------------------------------ counters and positions

    def batch(
        self,
        host: Any,
        rows: int,
        start: int | None = None,
        process_group: Any = None,
        *,
        counted_call: bool = False,
    ) -> Batch:
        """The one way a batch enters the ledger: ``with ledger.batch(host, rows, start) as batch:`` (module
        docstring). ``start``: the batch's segment position when the caller knows it (``forward``), else the next one;
        ``counted_call``: the batch came through torchmetrics' update wrapper, which counted the call.
        """
        return Batch(self, host, rows, start, process_group, counted_call)

    def refuse(self, host: Any, rows: int, *, counted_call: bool = False) -> None:
        """Count a refused batch: nothing stored, but its rows took their sampler positions (``sync_report.rejected``
        counts them). The one place where a refused call is taken back from the host's update count
        (``counted_call``: torchmetrics' update wrapper counted it), so that a refused batch is no update.
        """
        if counted_call:
            host._update_count -= 1
        self.dealt += rows
        if self.counters is None:
            self.own[2] += rows
        else:
            self.add(host, self.counters[2], rows)

    def add(self, host: Any, name: str, n: int) -> None:
        """Add ``n`` to the host's counter state ``name`` in place (``state += n``, as torchmetrics' metrics add to
        their states); on the device path its value stays known here, so that reading it needs no device read.
        """
        value = writable_state(host, name)
        number = self._known_value(name, value) if on_device(value) else None
        value += n
        if number is not None:
            self._remember(name, value, number + n)

    def _known_value(self, name: str, value: Tensor) -> int | None:
        """The value of ``value`` (the host's counter ``name``, a tensor this ledger did not make) when this ledger
        knows it without reading the device: the same tensor, not written in place since (its version).
        """
        known = self._known.get(name)
        if known is None or known[0] is not value:
            return None
        try:
            return known[2] if value._version == known[1] else None
        except RuntimeError:  # an inference tensor keeps no version
            return None

    def _remember(self, name: str, value: Tensor, number: int) -> None:
        with contextlib.suppress(RuntimeError):  # an inference tensor keeps no version: read each time
            self._known[name] = (value, value._version, number)

    def count(self, host: Any, name: str) -> int:
        """The value of the host's counter state ``name``: read from the host's memory on the CPU, read back from
        the device at most once per tensor on the device path (then kept here, as a Python int).
        """
        value: Tensor = host.__dict__[name]
        if not on_device(value):
            return int(value)
        number = self._known_value(name, value)
        if number is None:
            number = int(value)
            self._remember(name, value, number)
        return number

    def zeroed(self, host: Any) -> None:
        """The host's counter states were just made zero (construction, ``reset()``): known without a read."""
        self._known = {}
        for name in (*(self.counters or ()), "num_samples"):
            value = host.__dict__.get(name)
            if isinstance(value, Tensor):
                self._remember(name, value, 0)

    def counts(self, host: Any) -> list[int]:
        """Rows seen, padding dropped and rejected rows of this rank."""
        if self.counters is None:
            return list(self.own)
        return [self.count(host, name) for name in self.counters]

    def position(self, host: Any) -> int:
        """The segment position of this rank's next row (rows seen + rejected, since the segment started)."""
        if self.counters is None:
            return self.own[0] + self.own[2] - self.origin
        seen, _, rejected = self.counters
        return self.count(host, seen) + self.count(host, rejected) - self.origin

    def kept_rows(self, start: int, rows: int, process_group: Any) -> int:
        """How many of the ``rows`` rows from segment position ``start`` are not sampler padding (all without
        ``dataset_size``).
        """
        if self.dataset_size is None:
            return rows
        rank, world = group_position(process_group)
        return sampler_kept_rows(start, rows, rank, world, self.dataset_size - self.base)

    def check_rank_padding(self, process_group: Any, padding: int) -> None:
        """Raise once this rank has dropped more rows as padding (``padding``, this batch's included) than a
        ``DistributedSampler`` gives one rank (one; none in one process): :func:`check_padding` on this rank's
        counts alone, for an intake whose members may be computed without it (a collection's).
        """
        rank, world = group_position(process_group)
        self.padding_shown = max(self.padding_shown, padding)
        check_padding(self.what, self.dataset_size, world, [padding], rank, self.own[2])

    def stored_mode(self, host: Any, mode: str, column: bool, rows: bool | None = None) -> str | None:
        """The mode (``"ids"``, ``"weights"``) the epoch's first *accepted* batch decided: ``mode`` when the stored
        rows hold the column (``column``), ``"none"`` once rows were taken without it (``rows``; ``None``: the
        ledger's count of taken rows), ``None`` before. A refused batch decides nothing (an update that raises leaves
        every state and mode as it was; its rows count as rejected, never as taken).
        """
        if column:
            return mode
        if rows is None:  # rows of the batches taken since ``reset()`` (loaded ones included)
            rows = (self.own[0] if self.counters is None else self.count(host, self.counters[0])) > 0
        return "none" if rows else None

    def reset(self, host: Any = None) -> None:
        """A new epoch: positions from 0, counters (the host resets its states: with ``host``, they are known to be
        zero now, :meth:`zeroed`) and the warning re-armed.
        """
        self.own, self.base, self.origin, self.saved_at, self.warned = [0, 0, 0], 0, 0, None, False
        self.padding_shown = 0
        if host is not None and self.counters is not None:
            self.zeroed(host)

    # ------------------------------------------------------------------ checks of a batch

    def check_mode(self, mode: str | None, with_ids: bool, *, argument: str = "sample_ids", tail: str = "") -> None:
        """Raise if a batch switches between giving ``argument`` (``sample_ids``, ``sample_weight``) and not within an
        epoch; ``mode`` is what the epoch's first batch decided (``None``: no batch yet; ``"none"``: without it).
        """
        if mode is not None and (mode != "none") != with_ids:
            msg = (
                f"{self.what}: this update {'has' if with_ids else 'has no'} `{argument}` but earlier updates"
                f" {'had none' if mode == 'none' else 'had'}. Pass `{argument}` with every update"
                f"{' of an epoch' if tail else ''} or with none (call reset() to switch).{tail}"
            )
            raise ValueError(msg)

    def check_ids(self, ids: Tensor) -> None:
        """With ``dataset_size``: every id must lie in ``[0, dataset_size)``."""
        if self.dataset_size is None or ids.numel() == 0:
            return
        if self.dataset_size and ints_within(ids, self.dataset_size - 1):
            return  # every id in range, told by one pass over the ids (any id outside: its ends, for the message)
        low, high = int_ends(ids)
        if low < 0 or high >= self.dataset_size:
            bad = low if low < 0 else high
            msg = (
                f"{self.what}: sample id {bad} is outside [0, dataset_size={self.dataset_size}). Ids must be global"
                " indices into the data set; check `sample_ids` and `dataset_size`. The batch was not added."
            )
            raise ValueError(msg)

    # ------------------------------------------------------------------ the report and its warning

    def info(self, host: Any) -> dict[str, int]:
        """This rank's counters for the sync's metadata, and where its segment's positions come from."""
        seen, padding, rejected = self.counts(host)
        info = {"rows_seen": seen, "padding_dropped": padding, "rejected": rejected, "ledger_base": self.base}
        info["ledger_misplaced"] = int(self._misplaced(host))
        # the padding checked at the sync: this rank's, or what its collection saw (refused batches included)
        info["padding_shown"] = max(padding, (self.cut_by or self).padding_shown)
        return info

    def _misplaced(self, host: Any) -> bool:
        if self.saved_at is None:
            return False
        rank, world = group_position(getattr(host, "process_group", None))
        return self.saved_at != (rank, world) and any(self.counts(host))

    def report(self, host: Any, info: list[dict[str, int]] | None, kept: int | None, *, synced: bool) -> SyncReport:
        """The ``SyncReport`` of one evaluation (``info``: every rank's :meth:`info`; ``None``: this rank's alone).

        Raises:
            ValueError: If loaded states cannot be placed exactly (raised on every rank of a sync: all see ``info``).
        """
        info = info or [self.info(host)]
        misplaced = [r for r, i in enumerate(info) if i.get("ledger_misplaced")]
        bases = {i.get("ledger_base", 0) for i in info}
        if misplaced or (self.dataset_size is not None and len(bases) > 1):
            where = f"rank(s) {misplaced}" if misplaced else f"ranks with sampler bases {sorted(bases)}"
            msg = (
                f"{self.what}: the states loaded on {where} were saved on another rank or world size, so their"
                " samples cannot be placed exactly. Load every rank's saved state_dict with"
                " torchmetrics_varlen.load_rank_states(metric, state_dicts) on every rank instead."
            )
            raise ValueError(msg)
        _, world = group_position(getattr(host, "process_group", None))
        partial = not synced and world > 1
        what, size = self._expected()
        if not partial and bases == {0}:  # after a resume on another world size the old ranks' padding is in too
            padding, rejected = [i["padding_shown"] for i in info], sum(i["rejected"] for i in info)
            check_padding(what, size, len(info), padding, rejected=rejected)
        return report_from_counts(info, kept, size, partial=partial)

    def _expected(self) -> tuple[str, int | None]:
        """Who names the data set the evaluation should cover, and its size (``None``: not known)."""
        if self.dataset_size is None and self.cut_by is not None:
            return self.cut_by.what, self.cut_by.dataset_size
        return self.what, self.dataset_size

    def warn(self, report: SyncReport | None) -> None:
        """The "never seen" warning, once per epoch, the same text on every rank (every rank has the report),
        attributed to the user's line: the first caller outside this package, torchmetrics, torch and Lightning (under
        Lightning, the ``self.log(...)`` or ``compute()`` line of the user's module rather than Lightning's logger).
        None in Lightning's sanity check (a few validation batches before every ``fit()``): not a pass of the user's.
        """
        if report is None or not report.missing or self.warned or lightning_sanity_check():
            return
        self.warned = True
        rejected = f" ({report.rejected} rows were in batches that update() rejected)" if report.rejected else ""
        what, size = self._expected()
        warnings.warn(
            f"{what}: dataset_size={size} but only {report.kept} samples were evaluated:"
            f" {report.missing} were never seen{rejected}. The cause cannot be told from here: a partial pass over"
            " the data (Lightning's sanity check, `limit_val_batches`, a loop stopped early), a DistributedSampler"
            " with drop_last=True (it drops the tail; drop_last=False pads instead, and the padding is removed"
            " exactly), a rank that skipped batches, or a dataset_size larger than len(dataset). Raised once per"
            " epoch (until reset()).",
            UserWarning,
            stacklevel=user_stacklevel(),
        )

    # ------------------------------------------------------------------ checkpoints

    def save(self, host: Any, destination: dict[str, Any], prefix: str, persistent: bool) -> None:
        """Add the ledger to a ``state_dict`` (with the host's states: only when they are persistent)."""
        if not persistent:
            return
        rank, world = group_position(getattr(host, "process_group", None))
        values = [world, rank, self.base, self.origin, *self.counts(host)]
        destination[prefix + KEY] = torch.tensor(values, dtype=torch.int64)

    def load(self, host: Any, state_dict: dict[str, Any], prefix: str) -> None:
        """Take the ledger out of a ``state_dict`` being loaded (before the host's states are loaded)."""
        saved = state_dict.pop(prefix + KEY, None)
        if saved is None:
            return
        world, rank, base, origin, *counts = (int(v) for v in saved.tolist())
        self.base, self.origin, self.saved_at, self.warned = base, origin, (rank, world), False
        if self.counters is None:
            self.own = counts


def warning_compute(host: Any, compute: Callable[..., Any]) -> Callable[..., Any]:
    """``compute`` (torchmetrics' wrapped one), then the host ledger's "never seen" warning, on every rank, pointing at
    the caller of ``compute()`` (not inside ``forward``: a batch value is not an evaluation of the data set).
    """

    @functools.wraps(compute)
    def compute_and_report(*args: Any, **kwargs: Any) -> Any:
        value = compute(*args, **kwargs)
        if not host._in_forward:
            host._ledger.warn(host.sync_report)
        return value

    return compute_and_report
