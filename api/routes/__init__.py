"""The API's routes, one module per resource, each an ``APIRouter`` that :func:`pulsegraph.api.app.create_app` includes.

A route module reads its context and parameters through the dependencies of :mod:`pulsegraph.api.deps`, computes
with :mod:`pulsegraph.api.queries`, and raises the API's errors; the app turns them into the error model.
"""
