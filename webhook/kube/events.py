"""core/v1 Events as vramgate writes them: one shape for the controller, the audit and autofit."""

from __future__ import annotations

from typing import Any, Literal


def event_body(involved: dict[str, Any], namespace: str, *, reason: str, message: str,
               type: Literal["Normal", "Warning"], component: str, instance: str, action: str,
               timestamp: str) -> dict[str, Any]:
    """A new Event (``generateName`` after the object) about ``involved`` (apiVersion, kind, name[, uid])."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": type,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance[:128],
        "action": action,
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
        "count": 1,
    }
