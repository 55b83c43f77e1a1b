"""The bottom layer: what every stage shares and nothing of a stage.

The root error (:mod:`~pulsegraph.base.errors`), the durable-file primitives
(:mod:`~pulsegraph.base.durable`), sorted-array helpers (:mod:`~pulsegraph.base.arrays`),
the packed key index (:mod:`~pulsegraph.base.keyindex`) and the process settings every
actor applies (:mod:`~pulsegraph.base.runtime`). It imports no stage; every stage
(``ingest <- snapshots <- compute <- api <- the wiring``) may import it (import-linter
holds both, see ``[tool.importlinter]`` in pyproject.toml).
"""
