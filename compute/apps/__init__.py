"""Kineograph's applications over each sealed epoch: components, landmark paths, K-exposure topics, hashtag trends.

Each is an :class:`~pulsegraph.compute.apps.base.Application` with ``initialize(graph)`` and
``update(graph, delta, previous)``, run by :class:`~pulsegraph.compute.apps.runner.Applications`
(which the compute actor drives). NumPy/SciPy only: no Ray, no FastAPI, no snapshot stage.
"""
