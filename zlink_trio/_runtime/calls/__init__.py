"""The call objects and clients users hold: single-use rules (``single_use``), Spot, Actor and
worker calls, the route client and the Spot and Actor managers."""
