"""Spots: the host's catalog of activations (``catalog``), one live Spot with its gate task, turns
and lifecycle (``activation``), User Spot create and close (``creation``) and Spot timers
(``timers``)."""
