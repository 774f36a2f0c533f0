"""The semantic runtime: pure Trio, one subpackage per subsystem (specs/architecture.md).

It never names a zmq or asyncpg type (specs/boundaries.md). The subsystems, from the top of the
dependency graph to its bottom; each imports only subsystems below it, and a test keeps it so:

- ``host``: ``open_host``, the composition root, and the task tree with the shutdown order
- ``application``: ``Application``, the ``Spot``/``Actor`` base classes and their contexts
- ``calls``: the single-use call objects, the route client and the managers
- ``routing``: local or remote, the routing cache, the wire, work from peers
- ``actors``: Actor activations, lanes, deferred joins, creation
- ``spots``: Spot activations, gates in use, lifecycle, creation, Spot timers
- ``node``: the local node's shared state and the envelope of an admitted message
- ``ownership``: authority records and node membership in the Location Store
- ``declarations``: handler decorators, the frozen registry, ``HostConfig``, value types,
  relocation policies and adapters
- ``engines``: gate, mailbox, completion dispatcher, timers, workers, the application clock
  (know nothing of Spots)

Relocation (issue 14) will be a subsystem of its own; architecture.md says where it fits.
"""
