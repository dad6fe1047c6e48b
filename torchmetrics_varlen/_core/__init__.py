"""The metric side's private core: what every ``Varlen*`` metric, :class:`~torchmetrics_varlen.Varlen` and
:class:`~torchmetrics_varlen.VarlenCollection` share (docs/pages/internals.md is the map).

- ``seam.py``: the guarded sync seam (one guarded sync per ``compute()``, shared across a compute group);
- ``ledger.py``: the sample ledger (every batch enters through ``Ledger.batch``: sampler positions, the padding cut,
  the counters, rejected rows, the ``SyncReport``);
- ``checkpoint.py``: resuming from every rank's saved states on any world size (``load_rank_states``);
- ``snapshot.py``: one snapshot / restore of a metric's states around a batch that ``forward`` refuses;
- ``batch.py``: the batch transaction of the package's metrics (check, take, roll back), run inside torchmetrics' own
  update wrapper;
- ``columns.py``: the per-sample integer columns of a batch with ids or extras;
- ``strategies.py`` / ``sharded.py``: how a metric syncs and computes (the strategies and what they share);
- ``wrapped.py``: what ``Varlen`` and ``VarlenCollection`` check of a wrapped metric and its batches;
- ``wrapped_batch.py``: the batch transaction of ``Varlen`` (check, cut, pass on, roll back);
- ``dedup.py`` / ``states.py`` / ``joint.py``: the states' forms.

No module here imports the public classes; the classes reach the transport (``_dist``) only through this package.
"""
