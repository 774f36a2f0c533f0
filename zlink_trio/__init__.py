"""zlink_trio: a distributed actor runtime for Trio (the Python member of the ZLink family).

This module is the public contract: every public name is re-exported here and listed in
``__all__``; everything else lives in ``_``-packages and may change without notice.
"""

from zlink_trio._runtime.actor import (
    Actor,
    ActorCreateResult,
    ActorCreateStatus,
    ActorJoinCompletion,
    ActorJoinOutcome,
)
from zlink_trio._runtime.actor_context import ActorContext, ActorJoinCall
from zlink_trio._runtime.actors import ActorCreateCall, ActorManager
from zlink_trio._runtime.application import Application
from zlink_trio._runtime.calls import (
    ActorRequestCall,
    ActorSendCall,
    SpotCreateCall,
    SpotRequestCall,
    SpotSendCall,
)
from zlink_trio._runtime.config import HostConfig
from zlink_trio._runtime.context import SpotContext
from zlink_trio._runtime.handlers import packet_handler, request_handler, timer_handler
from zlink_trio._runtime.host import Host, open_host
from zlink_trio._runtime.route import Route
from zlink_trio._runtime.spot import (
    ActorCreateResponse,
    EntrySpot,
    InstanceSpot,
    MessageContext,
    Spot,
    SpotActorJoinResult,
    SpotClosingContext,
    SpotCreateResponse,
    SpotCreateResult,
    SpotCreateStatus,
)
from zlink_trio._runtime.spot_timers import SpotTimers
from zlink_trio._runtime.spots import SpotManager
from zlink_trio._runtime.timers import TimerTick
from zlink_trio._runtime.worker_calls import WorkerCall, Workers
from zlink_trio._version import __version__
from zlink_trio.errors import ConfigurationError, ErrorKind, ZLinkError
from zlink_trio.ids import (
    ActorId,
    ActorRef,
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
    "Actor",
    "ActorContext",
    "ActorCreateCall",
    "ActorCreateResponse",
    "ActorCreateResult",
    "ActorCreateStatus",
    "ActorId",
    "ActorJoinCall",
    "ActorJoinCompletion",
    "ActorJoinOutcome",
    "ActorManager",
    "ActorRef",
    "ActorRequestCall",
    "ActorSendCall",
    "Application",
    "ChannelName",
    "ConfigurationError",
    "EntrySpot",
    "ErrorKind",
    "Host",
    "HostConfig",
    "InstanceSpot",
    "MeshName",
    "MessageContext",
    "NodeGeneration",
    "NodeRid",
    "ObjectGeneration",
    "RelocationCoordinationMode",
    "Route",
    "Spot",
    "SpotActorJoinResult",
    "SpotCloseReason",
    "SpotClosingContext",
    "SpotContext",
    "SpotCreateCall",
    "SpotCreateResponse",
    "SpotCreateResult",
    "SpotCreateStatus",
    "SpotFactoryMode",
    "SpotId",
    "SpotKind",
    "SpotManager",
    "SpotRef",
    "SpotRequestCall",
    "SpotSendCall",
    "SpotTimers",
    "StableTypeName",
    "TimerOptions",
    "TimerOverrunPolicy",
    "TimerTick",
    "WorkerCall",
    "Workers",
    "ZLinkError",
    "__version__",
    "open_host",
    "packet_handler",
    "request_handler",
    "timer_handler",
]
