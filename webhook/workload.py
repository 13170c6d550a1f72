"""Where a workload keeps its pod: the names older modules import, now kept in ``webhook.kinds``."""

from __future__ import annotations

from .kinds import KINDS
from .kinds.pods import TEMPLATE_PATHS, pod_view
from .kinds.view import PodView, WorkloadError, as_list, dig

# Every kind vramgate judges (the built-in ones and the kinds LLMs ship in), e.g. for metric labels.
WORKLOAD_KINDS = KINDS
_dig = dig

__all__ = ["TEMPLATE_PATHS", "WORKLOAD_KINDS", "PodView", "WorkloadError", "as_list", "pod_view"]
