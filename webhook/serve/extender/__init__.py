"""The kube-scheduler extender: /scheduler/filter and /scheduler/prioritize over the live inventory."""

from .decide import Extender, PodNeed
from .wire import MAX_EXTENDER_PRIORITY, BadRequest, ExtenderArgs, ExtenderFilterResult, HostPriority

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "BadRequest",
    "Extender",
    "ExtenderArgs",
    "ExtenderFilterResult",
    "HostPriority",
    "PodNeed",
]
