"""The sans-IO ZLink wire protocol (specs/wire.md): bytes in, typed messages out.

No I/O, no trio, no zmq: the runtime and any client library share this package unchanged.
"""
