"""The real node's preflight and network settings, without starting it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.node.host import POD_CIDR, NodeUnavailable, RealNode, preflight

pytestmark = pytest.mark.e2e_node


def test_preflight_names_each_missing_piece_and_how_to_get_it(tmp_path: Path) -> None:
    problems = preflight(tmp_path)
    for b in ("kubelet", "kube-proxy", "crictl"):
        assert f"{tmp_path / b} missing (bash tests/e2e/build.sh)" in problems


def test_a_loopback_control_plane_is_refused_with_the_reason(tmp_path: Path) -> None:
    from tests.e2e.harness import ControlPlane

    with pytest.raises(NodeUnavailable, match="routable address"):
        RealNode(ControlPlane(tmpdir=tmp_path, logs_dir=tmp_path))


def test_the_pod_network_never_masquerades() -> None:
    node = RealNode.__new__(RealNode)
    node.dir = Path("/nonexistent")
    bridge = node.cni_config()["plugins"][0]
    assert bridge["ipMasq"] is False and bridge["isGateway"] is True
    assert bridge["ipam"]["ranges"] == [[{"subnet": POD_CIDR, "gateway": "10.244.0.1"}]]
