"""Upstream CRDs for the e2e suite, taken from the projects' Go modules on the module proxy.

``go mod download -json <module>@<version>`` gives the module's directory; the CRD files are copied
from it into ``.cache/crds/<module>@<version>/`` (never committed) and installed into the test
control plane, so kube-apiserver validates and prunes the objects as a real cluster does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.harness import REPO_ROOT, ApiError, ControlPlane

CACHE = REPO_ROOT / ".cache" / "crds"


@dataclass(frozen=True)
class CrdSource:
    """CRD files inside one module version."""

    module: str
    version: str
    files: tuple[str, ...]


SOURCES = (
    CrdSource("sigs.k8s.io/lws", "v0.7.0", ("config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",)),
    CrdSource("github.com/ray-project/kuberay/ray-operator", "v1.4.0", ("config/crd/bases/ray.io_rayservices.yaml",)),
    CrdSource("github.com/kserve/kserve", "v0.15.2", (
        "config/crd/full/serving.kserve.io_inferenceservices.yaml",
        "config/crd/full/serving.kserve.io_servingruntimes.yaml",
        "config/crd/full/serving.kserve.io_clusterservingruntimes.yaml",
    )),
    CrdSource("github.com/argoproj/argo-workflows/v3", "v3.6.5",
              ("manifests/base/crds/minimal/argoproj.io_workflows.yaml",)),
    CrdSource("knative.dev/serving", "v0.51.0", ("config/core/300-resources/service.yaml",)),
)


class CrdFetchError(RuntimeError):
    """A CRD could not be had: the message says exactly what was tried."""


def fetch(source: CrdSource, timeout: float = 300.0) -> list[Path]:
    """The CRD files of ``source``, from .cache/crds or else via ``go mod download``."""
    here = CACHE / f"{source.module.replace('/', '_')}@{source.version}"
    wanted = [here / Path(f).name for f in source.files]
    if all(p.is_file() for p in wanted):
        return wanted
    cmd = ["go", "mod", "download", "-json", f"{source.module}@{source.version}"]
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=CACHE.parent)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CrdFetchError(f"`{' '.join(cmd)}` failed to run: {exc}") from exc
    try:
        info: dict[str, Any] = json.loads(proc.stdout or "{}")
    except ValueError:
        info = {}
    directory = info.get("Dir")
    if proc.returncode != 0 or not directory:
        raise CrdFetchError(f"`{' '.join(cmd)}` exited {proc.returncode}: "
                            f"{info.get('Error') or proc.stderr.strip() or proc.stdout.strip()}")
    here.mkdir(parents=True, exist_ok=True)
    for rel, dest in zip(source.files, wanted, strict=True):
        src = Path(directory) / rel
        if not src.is_file():
            raise CrdFetchError(f"{source.module}@{source.version} has no {rel} (in {directory})")
        shutil.copyfile(src, dest)
    return wanted


def install(cluster: ControlPlane, paths: list[Path], timeout: float = 60.0) -> list[str]:
    """Create the CRDs (POST: the largest exceed kubectl apply's annotation limit) and wait until Established."""
    names = []
    for path in paths:
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd:
                continue
            try:
                cluster.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd,
                                ok=(201, 409), timeout=60)
            except ApiError as exc:
                raise CrdFetchError(f"kube-apiserver refused {path.name}: {exc}") from exc
            names.append(crd["metadata"]["name"])

    def established() -> bool:
        for name in names:
            got = cluster.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conds = {c["type"]: c["status"] for c in got.get("status", {}).get("conditions", [])}
            if conds.get("Established") != "True":
                return False
        return True

    cluster.wait_for("CRDs established", established, timeout)
    return names
