"""Where a workload named its model, said precisely for ``--explain``: the field, the variable, the ConfigMap key,
the command of a script.

The finder (demand.read_demand) tries, in order of trust: the ``vramgate.io/model`` annotation, the engine's own
flags and env (read by its reader in engines/), the generic model env, then what the workload's kind says (an
operator's field, a claim attached to the pod). This module only describes what was found; it never picks.
"""

from __future__ import annotations

from typing import Any

from ..engines import ConfigMapLookup, ContainerReading
from ..engines.base import Found
from ..kinds import PodView
from ..models.hub import repo_id


def with_operator_field(view: PodView, found: Found | None) -> Found | None:
    """``found``, or the model the workload's kind names (:attr:`PodView.named_model`).

    A command the operator starts from its own field carries that field's value: then the field is where the
    model was named, not the command vramgate wrote for it. A pod that names no model of its own takes the kind's
    (a warm pool a ModelClaim attaches to)."""
    named = view.named_model
    if named is None or not named[0]:
        return found
    if found is None:
        return Found(named[0], named[1])
    if found.value == named[0] and found.source.startswith("arg "):
        return Found(found.value, named[1])
    return found


def described(main: ContainerReading, found: Found, lookup: ConfigMapLookup | None) -> str:
    """``found.source`` with how the value got there: the variable it came through, the ConfigMap key holding
    that variable's value, and which command of a shell script names it."""
    source = found.source
    if source.startswith("vramgate.io/"):
        return source
    variable = source[len("env "):].split(" ", 1)[0] if source.startswith("env ") else _variable(main, found)
    parts = [source]
    if variable and not source.startswith("env "):
        parts.append(f"via env {variable}")
    origin = _env_origin(main.container, variable, lookup) if variable else ""
    if origin:
        parts.append(origin)
    if source.startswith("arg "):
        parts.append(_in_script(main, found.value))
    head, *rest = [p for p in parts if p]
    return f"{head} ({', '.join(rest)})" if rest else head


def _variable(main: ContainerReading, found: Found) -> str:
    """The env variable whose value the command line expanded into the model, or ""."""
    text = main.command_text
    if "$" not in text:
        return ""
    for name, value in main.env.items():
        if value == found.value and (f"$({name})" in text or f"${name}" in text or f"${{{name}" in text):
            return name
    return ""


def _env_origin(container: dict[str, Any], name: str, lookup: ConfigMapLookup | None) -> str:
    """``ConfigMap NAME key KEY`` when the variable's value comes from a ConfigMap, else "" (a literal, a Secret,
    the downward API). The kubelet's precedence: ``env`` over ``envFrom``, a later ``envFrom`` over an earlier."""
    for entry in container.get("env") or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            ref = entry.get("valueFrom", {}).get("configMapKeyRef") if isinstance(entry.get("valueFrom"), dict) \
                else None
            if isinstance(ref, dict) and ref.get("name"):
                return f"ConfigMap {ref['name']} key {ref.get('key', name)}"
            return ""
    for source in reversed(container.get("envFrom") or []):
        ref = source.get("configMapRef") if isinstance(source, dict) else None
        prefix = str(source.get("prefix") or "") if isinstance(source, dict) else ""
        if not isinstance(ref, dict) or not ref.get("name") or not name.startswith(prefix):
            continue
        key = name[len(prefix):]
        if lookup is not None and lookup(str(ref["name"]), key) is not None:
            return f"ConfigMap {ref['name']} key {key} by envFrom"
    return ""


def _in_script(main: ContainerReading, model: str) -> str:
    """``command 13 of 13 of its shell script (trtllm-serve …)`` where the container runs a script of several
    commands, the engine's among them; "" for a plain command line."""
    commands = main.commands
    if len(commands) < 2:
        return ""
    for i, command in enumerate(commands):
        if any(w == model or w.endswith(f"={model}") for w in command.words[1:]):
            words = command.words
            # `python3 -m sglang.launch_server`, `vllm serve`: the program as one would grep the script for it.
            shown = words[:3] if len(words) > 2 and words[1] == "-m" else words[:2]
            what = "" if command.program in _SHELL_WORDS else f": {' '.join(shown)} …"
            return f"command {i + 1} of {len(commands)} of its shell script{what}"
    return ""


_SHELL_WORDS = frozenset({"if", "then", "else", "elif", "while", "until", "do", "for", "case", "[[", "[", "{"})


def make_known(model: str) -> str:
    """The one command that puts a model the catalog lacks into it, for the warning saying it is unknown: the
    entry ``vramgate models import`` prints from the model's config.json, added to the models file."""
    repo = repo_id(model)
    name = repo or model.rstrip("/").rsplit("/", 1)[-1] or model
    also = "; `vramgate check --hub` reads it from the hub" if repo else ""
    return (f"to make it known, add to the models file the entry `vramgate models import <its config.json> "
            f"--name {name}` prints{also}")
