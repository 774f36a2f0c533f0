"""The semantic runtime: host, registry, Spots, Actors, gates, completion, timers (issue 5).

Pure Trio; it never names a zmq or asyncpg type (specs/boundaries.md).
"""
