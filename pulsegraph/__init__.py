"""pulsegraph: a streaming graph service.

The one installed namespace. Its subpackages, bottom to top (imports point up this list only, and
import-linter holds it: ``[tool.importlinter]`` in pyproject.toml):

- :mod:`pulsegraph.base`: the root error and the helpers every stage shares;
- :mod:`pulsegraph.ingest`, :mod:`pulsegraph.snapshots`, :mod:`pulsegraph.compute`, :mod:`pulsegraph.api`:
  the stages, each in its own top-level folder of the repository (``ingest/`` ...), linked here;
- the modules of this folder: the wiring (settings, the actor topology on Ray, the CLI), which no
  stage imports.
"""
