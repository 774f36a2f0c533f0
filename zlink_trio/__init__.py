"""zlink_trio: a distributed actor runtime for Trio (the Python member of the ZLink family).

This module is the public contract: every public name is re-exported here and listed in
``__all__``; everything else lives in ``_``-packages and may change without notice.
"""

from zlink_trio._runtime.application.application import Application
from zlink_trio._runtime.application.bases import Actor, EntrySpot, InstanceSpot, Spot
from zlink_trio._runtime.application.contexts import ActorContext, ActorJoinCall, SpotContext
from zlink_trio._runtime.calls.actor_calls import ActorCreateCall, ActorRequestCall, ActorSendCall
from zlink_trio._runtime.calls.actor_manager import ActorManager
from zlink_trio._runtime.calls.route import Route
from zlink_trio._runtime.calls.spot_calls import SpotCreateCall, SpotRequestCall, SpotSendCall
from zlink_trio._runtime.calls.spot_manager import SpotManager
from zlink_trio._runtime.calls.worker_calls import WorkerCall, Workers
from zlink_trio._runtime.declarations.config import HostConfig
from zlink_trio._runtime.declarations.handlers import (
    packet_handler,
    request_handler,
    timer_handler,
)
from zlink_trio._runtime.declarations.relocation import (
    ActorRelocationAdapter,
    RelocationPolicy,
    SpotRelocationAdapter,
    disable_relocation,
    preserve_state_with,
    recreate_on_relocation,
)
from zlink_trio._runtime.declarations.values import (
    ActorCreateResponse,
    ActorCreateResult,
    ActorCreateStatus,
    ActorJoinCompletion,
    ActorJoinOutcome,
    MessageContext,
    SpotActorJoinResult,
    SpotClosingContext,
    SpotCreateResponse,
    SpotCreateResult,
    SpotCreateStatus,
)
from zlink_trio._runtime.engines.timers import TimerTick
from zlink_trio._runtime.host.host import Host, open_host
from zlink_trio._runtime.spots.timers import SpotTimers
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
    HostStatus,
    RelocationCoordinationMode,
    RelocationMode,
    RelocationOutcome,
    RelocationReadyCompletion,
    RelocationReadyOutcome,
    RelocationReason,
    RelocationResult,
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
    "ActorRelocationAdapter",
    "ActorRequestCall",
    "ActorSendCall",
    "Application",
    "ChannelName",
    "ConfigurationError",
    "EntrySpot",
    "ErrorKind",
    "Host",
    "HostConfig",
    "HostStatus",
    "InstanceSpot",
    "MeshName",
    "MessageContext",
    "NodeGeneration",
    "NodeRid",
    "ObjectGeneration",
    "RelocationCoordinationMode",
    "RelocationMode",
    "RelocationOutcome",
    "RelocationPolicy",
    "RelocationReadyCompletion",
    "RelocationReadyOutcome",
    "RelocationReason",
    "RelocationResult",
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
    "SpotRelocationAdapter",
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
    "disable_relocation",
    "open_host",
    "packet_handler",
    "preserve_state_with",
    "recreate_on_relocation",
    "request_handler",
    "timer_handler",
]
