"""Where a model is stored, when the engine is only given a path: the volume behind it, the URI that filled it.

``--model /mnt/models`` or ``--model-path /work/models`` names a mount point, not a model. What names the model
is what is mounted there: a ``hostPath`` (``/data1/models/DeepSeek-R1-0528``), a PersistentVolumeClaim
(``llama-3-8b-pvc``), an image volume or a KServe modelcar (``oci://…/modelcar-granite-3-1-8b-instruct:1.5``),
or the URI an init container downloads into it (KServe's storage-initializer: ``s3://…/Qwen2.5-7B-Instruct``).
Each is tried as a model reference, deepest path component first; a place that names no known model (an
``/llm-folder``) is never guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..engines.identity import Identity, identify
from ..kinds import as_list
from ..models.catalog import Catalog

_URI = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_VERSION_DASHES = re.compile(r"(?<=\d)-(?=\d+(?:-|$))")  # "3-1-8b" → "3.1-8b", never "1-8b"


@dataclass(frozen=True)
class Stored:
    """A model found behind a path, and how (for the estimate's sources and a warning)."""

    identity: Identity
    where: str


def is_location(value: str) -> bool:
    """A filesystem path or a storage URI, not a hub id: ``/mnt/models``, ``pvc://…``, ``s3://…``."""
    return value.startswith(("/", "./")) or bool(_URI.match(value))


def oci_names(reference: str) -> list[str]:
    """Model names an OCI modelcar reference may carry: its tag, then its repository's last part.

    ``modelcar-granite-3-1-8b-instruct:1.5`` → ``granite-3.1-8b-instruct``; ``modelcar-catalog:granite-3.1-8b``
    → ``granite-3.1-8b``. Versions written with dashes (``3-1``) read as ``3.1``.
    """
    ref = _URI.sub("", reference).split("@", 1)[0]
    repo, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    base = repo.rsplit("/", 1)[-1]
    out = []
    for name in (tag, base.removeprefix("modelcar-").removesuffix("-modelcar")):
        if name and not re.fullmatch(r"v?\d+(?:\.\d+)*|latest", name) and name != "catalog":
            out.extend([name, _VERSION_DASHES.sub(".", name)])
    return out


def _places(pod: Mapping[str, Any], container: Mapping[str, Any], path: str) -> Iterator[tuple[str, str]]:
    """(reference, where) for what is mounted at or above ``path`` in ``container``, deepest mount first."""
    if _URI.match(path):
        yield path, path
        return
    volumes = {v.get("name"): v for v in as_list(pod.get("volumes")) if isinstance(v, dict)}
    mounts = [m for m in as_list(container.get("volumeMounts")) if isinstance(m, dict)
              and isinstance(m.get("mountPath"), str) and isinstance(m.get("name"), str)]
    mounts.sort(key=lambda m: -len(m["mountPath"]))
    for m in mounts:
        mount = m["mountPath"].rstrip("/") or "/"
        if not (path == mount or path.startswith(mount + "/")):
            continue
        rest = path[len(mount):].strip("/")
        sub = str(m.get("subPath") or "").strip("/")
        volume = volumes.get(m["name"], {})
        host = (volume.get("hostPath") or {}).get("path") if isinstance(volume.get("hostPath"), dict) else None
        claim = volume.get("persistentVolumeClaim")
        image = volume.get("image")
        tail = "/".join(p for p in (sub, rest) if p)
        if isinstance(host, str):
            yield f"{host.rstrip('/')}/{tail}" if tail else host, f"hostPath {host} (volume {m['name']})"
        if isinstance(claim, dict) and isinstance(claim.get("claimName"), str):
            yield f"/{claim['claimName']}/{tail}", f"PersistentVolumeClaim {claim['claimName']} (volume {m['name']})"
        if isinstance(image, dict) and isinstance(image.get("reference"), str):
            for name in oci_names(image["reference"]):
                yield name, f"image volume {image['reference']}"
    # KServe's storage-initializer (and its like): an init container given the URI and this path.
    for init in as_list(pod.get("initContainers")):
        if not isinstance(init, dict):
            continue
        args = [str(a) for a in [*as_list(init.get("command")), *as_list(init.get("args"))]]
        if any(a.rstrip("/") == path.rstrip("/") for a in args):
            for a in args:
                if _URI.match(a):
                    refs = oci_names(a) if a.lower().startswith("oci://") else [a]
                    for ref in refs:
                        yield ref, f"{init.get('name') or 'init container'} {a}"


def stored_model(catalog: Catalog, pod: Mapping[str, Any], container: Mapping[str, Any], path: str,
                 engine: str | None) -> Stored | None:
    """The catalog model mounted or downloaded at ``path``, or None when nothing there names one."""
    for reference, where in _places(pod, container, path):
        if reference.lower().startswith("oci://"):
            candidates = oci_names(reference)
        else:
            candidates = [reference]
        for candidate in candidates:
            found = identify(catalog, candidate, engine)
            if found.spec is not None:
                return Stored(found, where)
    return None


def downloaded_model(catalog: Catalog, pod: Mapping[str, Any], engine: str | None) -> Stored | None:
    """The catalog model an init container downloads (``storage-initializer s3://…/Llama-3.1-8B /mnt/models``),
    for an engine started with no model flag at all (KServe's Hugging Face runtime reads /mnt/models itself)."""
    for init in as_list(pod.get("initContainers")):
        if not isinstance(init, dict):
            continue
        for arg in [*as_list(init.get("command")), *as_list(init.get("args"))]:
            if not isinstance(arg, str) or not _URI.match(arg):
                continue
            for ref in (oci_names(arg) if arg.lower().startswith("oci://") else [arg]):
                found = identify(catalog, ref, engine)
                if found.spec is not None:
                    return Stored(found, f"{init.get('name') or 'init container'} {arg}")
    return None


def mounted_file(pod: Mapping[str, Any], container: Mapping[str, Any], path: str,
                 lookup: Callable[[str, str], str | None]) -> tuple[str, str] | None:
    """The text of ``path`` when a ConfigMap volume of the container holds it, and where it came from."""
    volumes = {v.get("name"): v for v in as_list(pod.get("volumes")) if isinstance(v, dict)}
    for m in as_list(container.get("volumeMounts")):
        if not isinstance(m, dict) or not isinstance(m.get("mountPath"), str):
            continue
        mount = m["mountPath"].rstrip("/")
        sub = m.get("subPath") if isinstance(m.get("subPath"), str) else ""
        if sub and path == mount:
            rel = sub
        elif not sub and path.startswith(mount + "/"):
            rel = path[len(mount) + 1:]
        else:
            continue
        volume = volumes.get(m.get("name"))
        source = volume.get("configMap") if isinstance(volume, dict) else None
        if not isinstance(source, dict) or not isinstance(source.get("name"), str):
            continue
        items = [i for i in as_list(source.get("items")) if isinstance(i, dict)]
        key = next((str(i.get("key")) for i in items if i.get("path") == rel), None) if items else rel
        text = lookup(source["name"], key) if key else None
        if text is not None:
            return text, f"ConfigMap {source['name']} key {key} (mounted at {path})"
    return None
