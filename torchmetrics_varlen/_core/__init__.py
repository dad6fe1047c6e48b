"""The metric side's private core: what every metric of the package, ``Varlen`` and ``VarlenCollection`` share.

docs/pages/internals.md is the map; each file is named for what it decides:

- ``intake.py``: how a package metric takes a batch (check, cut, store or count; all or nothing), run inside
  torchmetrics' own update wrapper; ``wrapped_intake.py``: the same for ``Varlen``'s wrapped metric;
- ``rollback.py``: the rollback of a batch that ``forward`` refuses (every state and plain attribute put back);
- ``ledger.py``: the sample ledger (every batch enters through ``Ledger.batch``: sampler positions, the counters,
  rejected rows, the dedup mode, what a checkpoint saves);
- ``padding.py``: the sampler padding rule (``sampler_kept_rows``, ``check_padding``);
- ``report.py``: what a ``compute()`` evaluated (``SyncReport``, counted from every rank's counters);
- ``guarded_sync.py``: one guarded sync per ``compute()``, shared across a compute group; states restored on error;
- ``strategies.py`` / ``sharded.py``: how a metric syncs and computes (the strategies and what they share);
- ``dedup.py``: de-duplication by sample id; ``states.py``: list-state forms on the wire; ``joint.py``: one sync for a
  collection's members; ``columns.py``: the per-sample integer columns of a batch with ids or extras;
- ``wrapped.py``: what ``Varlen`` and ``VarlenCollection`` check of a wrapped metric and its batches;
- ``checkpoint.py``: resuming from every rank's saved states on any world size (``load_rank_states``);
- ``callers.py``: who called (the user's line a warning points at, Lightning's sanity check).

No module here imports the public classes; the classes reach the transport (``_dist``) only through this package.
"""
