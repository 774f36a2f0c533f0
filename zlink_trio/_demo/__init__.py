"""``zlink-trio demo``: a workload over several host processes, watched live (specs/demo.md).

The command (``main``) runs N host processes on one store, each ``python -m zlink_trio demo
--child FILE`` (``child_main``), moves them together through the phases ready / set up / run /
stop / shut down, shows the workload once a second and ends with a summary table. Only the
public API is used, plus ``_inspect`` (activations per node, read from the store), ``_node``
(the node configuration format) and ``EmbeddedPostgres`` (the temporary store).

The modules, each named for what it owns; each imports only modules listed above it:

- ``app``: the application every host serves (messages, rooms, counters, users) and the
  adapters that carry their state through a relocation (DEMO-7)
- ``workload``: one host's ``Plan`` and the ``Workload`` of sends and requests (DEMO-2), whose
  loops also check that no read goes back (DEMO-8)
- ``protocol``: the lines between the parent and a host, JSON events up, bare commands down
- ``child``: one host process, which follows those commands (DEMO-1, DEMO-5, DEMO-6), and
  relocates when told to (DEMO-7)
- ``record``: what the parent records of each host, and how its numbers read
- ``store``: the Spot and Actor records of the demo's hosts, read from the store
- ``view``: the live view, drawn by rich on a terminal, plain lines otherwise (DEMO-3)
- ``summary``: the summary table, likewise rich or plain (DEMO-4)
- ``update``: the rolling update mid-workload, the parent's side (DEMO-7, DEMO-9)
- ``parent``: starts the hosts and orders the phases and the shutdown (DEMO-1, DEMO-5)
- ``command``: the store, the signals and the exit status around one run (DEMO-1, DEMO-6)
"""

from __future__ import annotations

from zlink_trio._demo.child import child_main
from zlink_trio._demo.command import main

__all__ = ["child_main", "main"]
