"""The host, the composition root: ``open_host`` builds and wires every subsystem (``host``); the
task tree runs the parts and encodes the shutdown order (``tree``)."""
