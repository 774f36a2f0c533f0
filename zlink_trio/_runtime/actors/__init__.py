"""Actors: the host's catalog of Actor activations (``catalog``), one live Actor with its lane and
deferred joins (``activation``), and create, find and destroy (``creation``). Above the Spots:
every Actor is a member of a Spot of its host."""
