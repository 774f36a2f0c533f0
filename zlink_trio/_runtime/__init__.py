"""The semantic runtime: host, registry, Spots, Actors, gates, completion, timers (issue 5).

Pure Trio; it never names a zmq or asyncpg type (specs/boundaries.md). The modules, each named
for what it owns:

- ``application``: declarations and their one-time validation into a frozen registry
- ``config``: ``HostConfig``; ``host``: ``open_host`` and the host task tree and shutdown order
- ``node``: the state one running host shares among its parts, and its admission seal
- ``completion``: the in-flight call table and the completion dispatcher lane
- ``gate``: the execution gate of a Spot and the running turn
- ``authority``: Spot authority records and object generations in the Location Store
- ``activation``: one live Spot (mailbox, gate task, turns, lifecycle)
- ``creation``: create, get-or-create and close of User Spots
- ``messaging``: sends and requests, cold activation of Instance Spots
- ``calls``: the single-use call objects; ``route`` and ``spots``: the clients that make them
- ``spot``, ``handlers``, ``context``: what applications subclass, decorate and receive
"""
