"""What a table can do, as functions and builders over a
:class:`~lamina.operations.handle.TableHandle` (the table's catalog context and
record).

The rule of this layer: values in, a plan made with the pure rules of
:mod:`lamina.core`, one commit through :class:`lamina.write.WriteTransaction` and a
``PublishPlan``. Nothing here imports the public facade (:mod:`lamina.table`) or the
catalog (:mod:`lamina.catalog`); ``tests/test_layers.py`` enforces it.

One module per operation (append, overwrite, lineage, push, transaction), a package
per big concept (:mod:`~lamina.operations.upsert`, :mod:`~lamina.operations.compaction`),
one place where writes branch on the kind of table (:mod:`~lamina.operations.kinds`) and
one retry policy (:mod:`~lamina.operations.retry`).
"""
