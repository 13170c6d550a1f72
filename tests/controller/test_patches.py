"""Label and taint patch bodies: only our two labels and our one taint, never anything else."""

from __future__ import annotations

import pytest

from webhook.config import Config
from webhook.controller.health import Transition, event_body, label_changes, merge_taints, node_patch

CFG = Config()
OWN = {"key": "vramgate.io/gpu-unhealthy", "effect": "NoSchedule"}
XID = {"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoSchedule"}
OURS_NOEXEC = {"key": "vramgate.io/gpu-unhealthy", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"}
DEDICATED = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


def test_add_taint_keeps_foreign_taints_in_place() -> None:
    assert merge_taints([XID, DEDICATED], True, CFG) == [XID, DEDICATED, OWN]
    assert merge_taints([], True, CFG) == [OWN]
    assert merge_taints([XID, OWN], True, CFG) is None  # already there


def test_remove_taint_removes_only_ours() -> None:
    assert merge_taints([XID, OWN, DEDICATED, OURS_NOEXEC], False, CFG) == [XID, DEDICATED, OURS_NOEXEC]
    assert merge_taints([XID, DEDICATED], False, CFG) is None
    assert merge_taints([OURS_NOEXEC], False, CFG) is None  # our key, but not the taint we set


def test_merge_copies_instead_of_mutating() -> None:
    current = [dict(XID)]
    out = merge_taints(current, True, CFG)
    assert out is not None
    out[0]["value"] = "changed"
    assert current == [XID]


def test_label_changes_only_owned_and_only_differences() -> None:
    current = {"vramgate.io/gpu-health": "healthy", "vramgate.io/gpu-memory-mib": "81920", "team": "a"}
    assert label_changes(current, {"vramgate.io/gpu-health": "healthy", "vramgate.io/gpu-memory-mib": "81920"},
                         CFG) == {}
    assert label_changes(current, {"vramgate.io/gpu-health": "unhealthy"}, CFG) == {
        "vramgate.io/gpu-health": "unhealthy"
    }
    assert label_changes(current, {"vramgate.io/gpu-health": None}, CFG) == {"vramgate.io/gpu-health": None}
    assert label_changes({}, {"vramgate.io/gpu-health": None}, CFG) == {}  # removing what is absent: no-op
    with pytest.raises(ValueError, match="not the controller's"):
        label_changes(current, {"team": "b"}, CFG)


def node(labels: dict[str, str], taints: list[dict[str, str]], rv: str = "42") -> dict[str, object]:
    return {"metadata": {"name": "n1", "resourceVersion": rv, "labels": labels}, "spec": {"taints": taints}}


def test_node_patch_bodies() -> None:
    desired = {"vramgate.io/gpu-memory-mib": "81920", "vramgate.io/gpu-health": "unhealthy"}
    fresh = node({"nvidia.com/gpu.memory": "81920", "vramgate.io/gpu-health": "healthy"}, [XID])
    assert node_patch(fresh, desired, True, CFG) == {
        "metadata": {
            "resourceVersion": "42",
            "labels": {"vramgate.io/gpu-memory-mib": "81920", "vramgate.io/gpu-health": "unhealthy"},
        },
        "spec": {"taints": [XID, OWN]},
    }
    # Recovery: the label flips, our taint goes, the foreign one stays.
    current = node({"vramgate.io/gpu-memory-mib": "81920", "vramgate.io/gpu-health": "unhealthy"}, [XID, OWN], "43")
    recovered = {"vramgate.io/gpu-memory-mib": "81920", "vramgate.io/gpu-health": "healthy"}
    assert node_patch(current, recovered, False, CFG) == {
        "metadata": {"resourceVersion": "43", "labels": {"vramgate.io/gpu-health": "healthy"}},
        "spec": {"taints": [XID]},
    }
    # Labels only: no spec in the patch; taint left alone (None): no spec either.
    assert node_patch(node({}, [OWN]), {"vramgate.io/gpu-health": "unhealthy"}, True, CFG) == {
        "metadata": {"resourceVersion": "42", "labels": {"vramgate.io/gpu-health": "unhealthy"}}
    }
    assert node_patch(node({}, [OWN]), {}, None, CFG) is None
    # Everything in place: nothing to write.
    done = node({"vramgate.io/gpu-memory-mib": "81920", "vramgate.io/gpu-health": "healthy"}, [XID])
    assert node_patch(done, recovered, False, CFG) is None


def test_node_patch_last_taint_removed_gives_empty_list() -> None:
    patch = node_patch(node({"vramgate.io/gpu-health": "healthy"}, [OWN]), {}, False, CFG)
    assert patch == {"metadata": {"resourceVersion": "42"}, "spec": {"taints": []}}


def test_event_body() -> None:
    t = Transition(node="n1", old="healthy", new="unhealthy", message="GPU health healthy -> unhealthy: 6 of 8")
    body = event_body(t, "uid-1", "vramgate-controller", "pod-a_1234", "2024-05-01T10:00:00Z")
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}
    assert (body["reason"], body["type"], body["metadata"]["namespace"]) == ("GPUUnhealthy", "Warning", "default")
    assert body["message"].endswith("6 of 8") and body["source"] == {"component": "vramgate-controller"}
    healthy = event_body(Transition("n1", "unhealthy", "healthy", "m"), None, "c", "i", "t")
    assert healthy["reason"] == "GPUHealthy" and healthy["type"] == "Normal" and "uid" not in healthy["involvedObject"]
    assert event_body(Transition("n1", None, "degraded", "m"), None, "c", "i", "t")["reason"] == "GPUDegraded"
