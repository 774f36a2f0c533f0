"""zlink_trio: a distributed actor runtime for Trio (the Python member of the ZLink family).

This module is the public contract: every public name is re-exported here and listed in
``__all__``; everything else lives in ``_``-packages and may change without notice.
"""

from zlink_trio._version import __version__
from zlink_trio.errors import ConfigurationError, ErrorKind, ZLinkError
from zlink_trio.ids import (
    ActorId,
    ChannelName,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    SpotCloseReason,
    SpotId,
    SpotKind,
    SpotRef,
    StableTypeName,
)
from zlink_trio.options import (
    RelocationCoordinationMode,
    SpotFactoryMode,
    TimerOptions,
    TimerOverrunPolicy,
)

__all__ = [
    "ActorId",
    "ChannelName",
    "ConfigurationError",
    "ErrorKind",
    "MeshName",
    "NodeGeneration",
    "NodeRid",
    "ObjectGeneration",
    "RelocationCoordinationMode",
    "SpotCloseReason",
    "SpotFactoryMode",
    "SpotId",
    "SpotKind",
    "SpotRef",
    "StableTypeName",
    "TimerOptions",
    "TimerOverrunPolicy",
    "ZLinkError",
    "__version__",
]
