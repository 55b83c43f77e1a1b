"""pulsegraph: a streaming graph service.

This package is the wiring (settings, the actor topology on Ray, the CLI).
It is imported by nothing but its own entry points, except for the leaf
module :mod:`pulsegraph.errors`, which holds the root error of every stage.
"""
