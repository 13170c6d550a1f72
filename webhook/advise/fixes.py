"""Suggestions as fixes: RFC 6902 JSON Patches against the original document, re-judged before they are offered.

A suggestion from :func:`webhook.decide.placement.structured_suggestions` is semantic ("context 24576", "2 GPUs with
tensor parallel 2"). Here each change becomes an edit of the place the value came from — the engine flag in
``command``/``args`` (``--flag value``, ``--flag=value``, or inside an ``sh -c`` script), the env variable, the
``vramgate.io/*`` annotation — or, where nothing declared it, the engine's flag added to the container's argv
(its env twin for engines configured by env), else the annotation on the pod template. A GPU count changes
``resources.limits["nvidia.com/gpu"]`` (and requests) together with the engine's tensor-parallel flag.

Every patch is applied (``jsonpatch``) and the patched document judged again on the same inventory; only
patches whose workload is then admitted are offered. ``--fix`` writes a chosen patch back into the file with
ruamel.yaml's round-trip mode, so comments, ordering and quoting of everything else are kept.
"""

from __future__ import annotations

import difflib
import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from ..cluster.snapshot import Snapshot
from ..config import Config
from ..decide.demand import Demand
from ..decide.placement import Change, Code, fewer_gpus_suggestions, structured_suggestions
from ..decide.verdict import Judgement, judge
from ..engines import engine_named, read_container
from ..engines.cmdline import is_shell
from ..kinds import Runtimes
from ..models.catalog import Catalog
from ..units import declaration as d

Patch = list[dict[str, Any]]

# The annotation that declares each change (read before any flag or env).
ANNOTATION: dict[str, str] = {
    "precision": d.A_PRECISION, "context": d.A_CONTEXT, "kv_dtype": d.A_KV_DTYPE, "batch": d.A_BATCH,
    "gradient_checkpointing": d.A_GRAD_CKPT, "finetune": d.A_FINETUNE, "parallelism": d.A_PARALLELISM,
    "utilization": d.A_UTIL,
}
# The engine setting (webhook.engines tables) that says each change.
SETTING: dict[str, str] = {"context": "context", "kv_dtype": "kv_dtype", "max_seqs": "max_seqs", "tp": "tp",
                           "precision": "quantization", "gradient_checkpointing": "gradient_checkpointing",
                           "utilization": "util"}
@dataclass(frozen=True)
class Fix:
    """A suggestion that was checked: its text, its JSON Patch, and whether it only declares (annotation)."""

    suggestion: int  # 1-based, among the fixes offered for this workload
    description: str
    patch: Patch
    declares_only: bool = False  # True: it sets a vramgate.io annotation; the engine must be told the same
    changes: tuple[Change, ...] = ()  # the semantic changes the patch makes (what autofit judges eligibility by)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"suggestion": self.suggestion, "description": self.description, "patch": self.patch}
        if self.declares_only:
            out["note"] = "sets the vramgate.io annotation only: make the engine or checkpoint match it"
        return out


def escape(token: str) -> str:
    """A JSON Pointer reference token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def find_pointer(doc: Any, target: Any, path: str = "") -> str | None:
    """The JSON Pointer of ``target`` (by identity) inside ``doc``, or None."""
    if doc is target:
        return path
    if isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(v, dict | list):
                found = find_pointer(v, target, f"{path}/{escape(str(k))}")
                if found is not None:
                    return found
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            if isinstance(v, dict | list):
                found = find_pointer(v, target, f"{path}/{i}")
                if found is not None:
                    return found
    return None


@dataclass
class _Target:
    """Where in the original document a demand's pod lives."""

    doc: dict[str, Any]
    demand: Demand
    meta_ptr: str | None  # pointer of the pod (template) metadata, whether or not it exists yet
    meta: dict[str, Any] | None
    containers: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (pointer, container) GPU ones

    @property
    def engine(self) -> str:
        return self.demand.engine or ""


def _target(doc: dict[str, Any], demand: Demand) -> _Target | None:
    view = demand.view
    spec_ptr = find_pointer(doc, view.spec)
    if spec_ptr is None:
        return None  # the pod spec is built from another object (a runtime): nothing here to patch
    meta_ptr = find_pointer(doc, view.meta)
    meta: dict[str, Any] | None = view.meta if meta_ptr is not None else None
    if meta_ptr is None and spec_ptr.endswith("/spec"):
        parent = spec_ptr[: -len("/spec")]
        meta_ptr = f"{parent}/metadata"
    names = set(demand.gpu_containers)
    containers: list[tuple[str, dict[str, Any]]] = []
    for key in ("containers", "initContainers"):
        for i, c in enumerate(view.spec.get(key) or []):
            if isinstance(c, dict) and str(c.get("name", "")) in names:
                containers.append((f"{spec_ptr}/{key}/{i}", c))
    if not containers:
        return None
    # The container that speaks for the pod first (as demand reads it): the one naming a model.
    containers.sort(key=lambda pc: 0 if (s := read_container(pc[1]).settings) and s.get("model") else 1)
    return _Target(doc, demand, meta_ptr, meta, containers)


def _annotation_ops(t: _Target, key: str, value: str) -> Patch:
    meta = t.meta
    if t.meta_ptr is None:
        return []
    if meta is None:
        return [{"op": "add", "path": t.meta_ptr, "value": {"annotations": {key: value}}}]
    ann = meta.get("annotations")
    if not isinstance(ann, dict):
        return [{"op": "add", "path": f"{t.meta_ptr}/annotations", "value": {key: value}}]
    return [{"op": "add" if key not in ann else "replace", "path": f"{t.meta_ptr}/annotations/{escape(key)}",
             "value": value}]


_TOKEN = r"(\"[^\"]*\"|'[^']*'|[^\s;&|]+)"


def _flag_ops(ptr: str, container: dict[str, Any], flag: str, value: str) -> Patch | None:
    """Replace the value of ``flag`` where the container's command line says it."""
    for key in ("command", "args"):
        words = container.get(key)
        if not isinstance(words, list):
            continue
        for j, word in enumerate(words):
            if not isinstance(word, str):
                continue
            if word == flag and j + 1 < len(words):
                return [{"op": "replace", "path": f"{ptr}/{key}/{j + 1}", "value": value}]
            if word.startswith(flag + "="):
                return [{"op": "replace", "path": f"{ptr}/{key}/{j}", "value": f"{flag}={value}"}]
            pattern = re.compile(r"(?<![\w-])" + re.escape(flag) + r"(=|[ \t]+)" + _TOKEN)
            if (" " in word or "\n" in word) and (m := pattern.search(word)):
                edited = word[: m.start(2)] + value + word[m.end(2):]
                return [{"op": "replace", "path": f"{ptr}/{key}/{j}", "value": edited}]
    return None


def _env_ops(ptr: str, container: dict[str, Any], name: str, value: str, *, add: bool) -> Patch | None:
    env = container.get("env")
    if isinstance(env, list):
        for k, e in enumerate(env):
            if isinstance(e, dict) and e.get("name") == name:
                if "value" in e or "valueFrom" not in e:
                    return [{"op": "add" if "value" not in e else "replace", "path": f"{ptr}/env/{k}/value",
                             "value": value}]
                return None  # from a ConfigMap or Secret: not in this file
        if add:
            return [{"op": "add", "path": f"{ptr}/env/0", "value": {"name": name, "value": value}}]
        return None
    if add and env is None:
        return [{"op": "add", "path": f"{ptr}/env", "value": [{"name": name, "value": value}]}]
    return None


def _add_arg_ops(ptr: str, container: dict[str, Any], flag: str, value: str, spelled: Sequence[str]) -> Patch | None:
    """Add ``flag value`` to the container's command line: to its argv, or into its ``sh -c`` script."""
    raw_command, raw_args = container.get("command"), container.get("args")
    command: list[Any] = raw_command if isinstance(raw_command, list) else []
    args: list[Any] = raw_args if isinstance(raw_args, list) else []
    words = [str(w) for w in [*command, *args]]
    if not words:
        return None
    if not is_shell(words):
        key = "args" if "args" in container else "command"
        return [{"op": "add", "path": f"{ptr}/{key}/-", "value": flag}, {"op": "add", "path": f"{ptr}/{key}/-",
                                                                         "value": value}]
    # A script: put the flag right after another flag of the same engine command (so it reaches that program).
    for key, seq in (("command", command), ("args", args)):
        for j, word in enumerate(seq):
            if not isinstance(word, str) or not ("\n" in word or " " in word):
                continue
            for other in spelled:
                m = re.search(r"(?<![\w-])" + re.escape(other) + r"(=|[ \t]+)" + _TOKEN, word)
                if m:
                    edited = word[: m.end()] + f" {flag} {value}" + word[m.end():]
                    return [{"op": "replace", "path": f"{ptr}/{key}/{j}", "value": edited}]
    return None


# Changes that are vramgate's own declarations: the annotation is the whole fix (no engine reads them).
_DECLARATIONS = frozenset({"batch"})


def _engine_ops(t: _Target, what: str, value: str) -> Patch | None:
    """Edit the flag or env variable the engine read the value from, else add the engine's own way to say it."""
    eng = engine_named(t.engine)
    engine_value = eng.fix_values.get(what, value) if eng else value
    setting = SETTING.get(what)
    if what == "precision" and value != "fp8":
        return None  # a 4/8-bit integer checkpoint is another model: declared, no flag makes it
    for ptr, c in t.containers:
        settings = read_container(c).settings
        found = settings.get(setting) if settings and setting else None
        if found is None:
            continue
        if found.source.startswith("arg "):
            ops = _flag_ops(ptr, c, found.source[4:], engine_value)
            if ops:
                return ops
        elif found.source.startswith("env "):
            ops = _env_ops(ptr, c, found.source[4:], engine_value, add=False)
            if ops:
                return ops
    how = eng.fix_adds.get(what) if eng else None
    if eng is None or how is None or not t.containers:
        return None
    ptr, c = t.containers[0]
    kind, name, fmt = how
    text = fmt.format(n=value)
    if kind == "env":
        return _env_ops(ptr, c, name, text, add=True)
    settings = read_container(c).settings
    spelled = [f.source[4:] for f in (settings.values.values() if settings else []) if f.source.startswith("arg ")]
    ops = _add_arg_ops(ptr, c, name, text, spelled)
    twin = eng.fix_env_twins.get(what)
    if ops is None and twin is not None:
        ops = _env_ops(ptr, c, twin[1], twin[2].format(n=value), add=True)
    return ops


def _setting_ops(t: _Target, what: str, value: str) -> tuple[Patch, bool] | None:
    """The engine's flag or env where it can be said, and the annotation where one declares it (or nothing else
    can). Returns the patch and whether it only declares (an annotation the engine does not read)."""
    ann_key = ANNOTATION.get(what)
    engine = _engine_ops(t, what, value)
    annotated = ann_key is not None and ann_key in t.demand.view.annotations
    ops: Patch = list(engine or [])
    if ann_key and (annotated or not engine):
        ops.extend(_annotation_ops(t, ann_key, value))
    if not ops:
        return None
    return ops, not engine and what not in _DECLARATIONS


def _gpu_ops(t: _Target, gpus: int) -> Patch | None:
    if t.demand.group_size > 1 or len(t.containers) != 1:
        return None  # the count is the group's; or several GPU containers: no one edit says it
    ptr, c = t.containers[0]
    resources = c.get("resources") or {}
    resource = next((r for sec in ("limits", "requests") for r in (resources.get(sec) or {})
                     if isinstance(r, str) and r.endswith("/gpu")), None)
    if resource is None:
        return None
    ops: Patch = []
    for sec in ("limits", "requests"):
        section = resources.get(sec)
        if isinstance(section, dict) and resource in section:
            old = section[resource]
            ops.append({"op": "replace", "path": f"{ptr}/resources/{sec}/{escape(resource)}",
                        "value": str(gpus) if isinstance(old, str) else gpus})
    eng = engine_named(t.engine)
    says_tp = eng is not None and "tp" in eng.fix_adds
    tp = _setting_ops(t, "tp", str(gpus)) if says_tp else None
    if says_tp and tp is None:
        return None  # the engine would keep the model on one GPU
    return ops + (tp[0] if tp else [])


def patch_for(doc: dict[str, Any], demand: Demand, changes: Sequence[Change]) -> tuple[Patch, bool] | None:
    """The JSON Patch that makes ``changes`` in ``doc`` for the pod of ``demand``, or None when none can."""
    t = _target(doc, demand)
    if t is None:
        return None
    ops: Patch = []
    declares = False
    for change in changes:
        if change.what == "gpus":
            g = _gpu_ops(t, int(change.value))
            if g is None:
                return None
            ops.extend(g)
            continue
        s = _setting_ops(t, change.what, str(change.value))
        if s is None:
            return None
        ops.extend(s[0])
        declares = declares or s[1]
    # Two changes editing the same path (e.g. precision and GPUs both in a script) cannot both apply.
    paths = [op["path"] for op in ops if not op["path"].endswith("/-")]
    if len(paths) != len(set(paths)):
        return None
    return ops, declares


Judge = Callable[[dict[str, Any]], Judgement]


def fixes_for(doc: dict[str, Any], judgement: Judgement, role_index: int | None, snapshot: Snapshot,
              rejudge: Judge) -> list[Fix]:
    """The checked fixes for one rejected workload (or role ``role_index`` of a multi-role one)."""
    if judgement.allowed or judgement.demand is None:
        return []
    nodes = [n for n in snapshot.by_vram if n.is_gpu_node]
    if not nodes:
        return []
    if judgement.code == str(Code.VRAM_TOO_SMALL):
        suggestions = structured_suggestions(judgement.demand, nodes)
    elif judgement.code == str(Code.TOO_FEW_GPUS):
        # The message says "fewer GPUs per pod with a smaller precision or context": here is the count.
        suggestions = fewer_gpus_suggestions(judgement.demand, nodes)
    else:
        return []
    out: list[Fix] = []
    for s in suggestions:
        if s.changes and (fix := checked_fix(doc, judgement.demand, s.changes, s.text, rejudge, role_index,
                                             len(out) + 1)):
            out.append(fix)
    return out


def checked_fix(doc: dict[str, Any], demand: Demand, changes: Sequence[Change], text: str, rejudge: Judge,
                role_index: int | None = None, number: int = 0) -> Fix | None:
    """``changes`` as a patch of ``doc``, kept only when the patched document (or its role ``role_index``)
    is admitted when judged again."""
    made = patch_for(doc, demand, changes)
    if made is None:
        return None
    patch, declares = made
    try:
        patched = jsonpatch.apply_patch(doc, patch)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
        return None
    again = rejudge(patched)
    if role_index is None:
        ok = again.allowed
    else:
        ok = role_index < len(again.roles) and again.roles[role_index].judgement.allowed
    return Fix(number, text, patch, declares, tuple(changes)) if ok else None


def rejudger(snapshot: Snapshot, config: Config, catalog: Catalog, runtimes: Runtimes | None) -> Judge:
    def again(obj: dict[str, Any]) -> Judgement:
        return judge(obj, snapshot, config, catalog, runtimes=runtimes)

    return again


# --- writing fixes back into files -----------------------------------------------------------------------------


def _yaml() -> Any:
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096  # never re-wrap long lines
    return y


def _indents(text: str) -> tuple[int, int]:
    """(sequence indent, dash offset) the file uses: ``- `` under its key, or indented by 2."""
    lines = text.splitlines()
    for i, line in enumerate(lines[1:], start=1):
        m = re.match(r"^(\s*)- ", line)
        prev = lines[i - 1]
        k = re.match(r"^(\s*)[^\s#-][^:]*:\s*$", prev)
        if m and k:
            offset = len(m.group(1)) - len(k.group(1))
            return (offset + 2, offset) if offset > 0 else (2, 0)
    return 2, 0


def _walk(node: Any, parts: list[str]) -> Iterator[Any]:
    yield node
    for p in parts:
        node = node[int(p)] if isinstance(node, list) else node[p]
        yield node


def _styled(old: Any, new: Any) -> Any:
    """``new`` in the scalar style of ``old`` (a literal block stays a literal block, quotes stay quotes)."""
    from ruamel.yaml.scalarstring import ScalarString

    if isinstance(old, ScalarString) and isinstance(new, str):
        return type(old)(new)
    return new


def apply_to_node(root: Any, patch: Patch) -> None:
    """Apply add/replace/remove ops to a ruamel round-trip tree in place (so comments stay where they are)."""
    for op in patch:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = list(_walk(root, parts[:-1]))[-1]
        last = parts[-1]
        kind = op["op"]
        if isinstance(parent, list):
            if last == "-":
                parent.append(op["value"])
            elif kind == "add":
                parent.insert(int(last), op["value"])
            elif kind == "replace":
                parent[int(last)] = _styled(parent[int(last)], op["value"])
            else:
                del parent[int(last)]
        else:
            if kind == "remove":
                del parent[last]
            else:
                parent[last] = _styled(parent.get(last), op["value"])


@dataclass(frozen=True)
class Edit:
    """A patch for one object of a file: the YAML document it is in and the pointer prefix inside it."""

    document: int
    prefix: str  # "" or "/items/3" for an object of a List
    patch: Patch


def rewrite(path: str | Path, edits: Sequence[Edit]) -> tuple[str, str]:
    """The file's text before and after the edits.

    Each edit is made in the text itself at the positions ruamel.yaml reports, so every byte it does not
    change stays as it was; where an edit cannot be placed that way, that document is re-emitted by
    ruamel.yaml's round-trip dumper (comments and order kept, indentation normalised).
    """
    text = Path(path).read_text(encoding="utf-8")
    is_json = text.lstrip().startswith(("{", "["))
    y = _yaml()
    docs = list(y.load_all(text))  # JSON is YAML in flow style: the same positions serve both
    try:
        return text, _splice(text, docs, edits, json_style=is_json)
    except _CannotSplice:
        pass
    if is_json:
        data = json.loads(text)
        for e in edits:
            data = jsonpatch.apply_patch(data, [{**op, "path": e.prefix + op["path"]} for op in e.patch])
        return text, json.dumps(data, indent=2) + "\n"
    seq, offset = _indents(text)
    y.indent(mapping=2, sequence=seq, offset=offset)
    touched = {e.document for e in edits}
    for e in edits:
        apply_to_node(docs[e.document], [{**op, "path": e.prefix + op["path"]} for op in e.patch])
    chunks = _split_documents(text)
    if len(chunks) != len(docs):
        buf = io.StringIO()
        y.dump_all(docs, buf)
        return text, buf.getvalue()
    out: list[str] = []
    for i, (chunk, doc) in enumerate(zip(chunks, docs, strict=True)):
        if i not in touched:
            out.append(chunk)
            continue
        head, _body = _split_head(chunk)
        buf = io.StringIO()
        y.dump(doc, buf)
        out.append(head + buf.getvalue())
    return text, "".join(out)


class _CannotSplice(Exception):
    """An edit whose place in the text cannot be found exactly."""


_PLAIN_SAFE = re.compile(r"^[A-Za-z0-9_./-][A-Za-z0-9_./=-]*$")


def _plain_ok(value: str) -> bool:
    """Whether ``value`` can be written unquoted and still read back as this string."""
    if not _PLAIN_SAFE.match(value):
        return False
    try:
        return yaml.safe_load(value) == value
    except yaml.YAMLError:
        return False


def _scalar(value: Any, quote: str = "") -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = str(value)
    if quote == "'":
        return "'" + text.replace("'", "''") + "'"
    if quote == '"' or not _plain_ok(text):
        return json.dumps(text, ensure_ascii=False)
    return text


def _block(value: Any, indent: int) -> list[str]:
    """``value`` (a mapping) as block YAML lines at ``indent``."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, dict):
                lines.append(f"{pad}{_scalar(k)}:")
                lines.extend(_block(v, indent + 2))
            elif isinstance(v, list):
                lines.append(f"{pad}{_scalar(k)}:")
                for item in v:
                    sub = _block(item, indent + 2)
                    lines.append(f"{pad}- {sub[0].lstrip()}")
                    lines.extend(sub[1:])
            else:
                lines.append(f"{pad}{_scalar(k)}: {_scalar(v)}")
        return lines
    return [f"{pad}{_scalar(value)}"]


class _Text:
    """Offsets and scalar extents in the original text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)

    def offset(self, line: int, col: int) -> int:
        return self.starts[line] + col

    def line_of(self, offset: int) -> int:
        import bisect

        return bisect.bisect_right(self.starts, offset) - 1

    def line_end(self, offset: int) -> int:
        end = self.text.find("\n", offset)
        return len(self.text) if end < 0 else end

    def indent_at(self, offset: int) -> int:
        start = self.starts[self.line_of(offset)]
        line = self.text[start:self.line_end(start)]
        return len(line) - len(line.lstrip(" "))

    def scalar_end(self, start: int, flow: bool) -> int:
        """The end of the scalar token that starts at ``start``."""
        t = self.text
        ch = t[start] if start < len(t) else ""
        if ch == '"':
            i = start + 1
            while i < len(t):
                if t[i] == "\\":
                    i += 2
                    continue
                if t[i] == '"':
                    return i + 1
                i += 1
            raise _CannotSplice("unterminated string")
        if ch == "'":
            i = start + 1
            while i < len(t):
                if t[i] == "'":
                    if i + 1 < len(t) and t[i + 1] == "'":
                        i += 2
                        continue
                    return i + 1
                i += 1
            raise _CannotSplice("unterminated string")
        if ch in "|>":
            base = self.indent_at(start)
            line = self.line_of(start) + 1
            end = self.line_end(start)
            while line < len(self.starts):
                s = self.starts[line]
                content = t[s:self.line_end(s)]
                if content.strip() and len(content) - len(content.lstrip(" ")) <= base:
                    break
                if content.strip():
                    end = self.line_end(s)
                line += 1
            return end
        end = self.line_end(start)
        stop = re.search(r"[,\]}]|\s#" if flow else r"\s#", t[start:end])
        token_end = start + stop.start() if stop else end
        while token_end > start and t[token_end - 1] in " \t":
            token_end -= 1
        return token_end


def _replace_in_scalar(tx: _Text, start: int, end: int, old: str, new: str) -> str | None:
    """The raw token with the one changed stretch of ``old`` → ``new`` edited in place (scripts keep their shape)."""
    raw = tx.text[start:end]
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    q = 0
    while q < min(len(old), len(new)) - p and old[len(old) - 1 - q] == new[len(new) - 1 - q]:
        q += 1
    before, middle_new = old[:p], new[p:len(new) - q]
    middle_old = old[p:len(old) - q]
    # Anchor on the text just before the change, which must occur once in the raw token.
    for width in (40, 30, 20, 12):
        anchor = before[-width:]
        if "\n" in anchor or not anchor or raw.count(anchor + middle_old) != 1:
            continue
        i = raw.index(anchor + middle_old) + len(anchor)
        if any(c in middle_new for c in "\"\\\n") and raw[:1] in "\"'":
            return None
        return raw[:i] + middle_new + raw[i + len(middle_old):]
    return None


def _splice(text: str, docs: list[Any], edits: Sequence[Edit], *, json_style: bool = False) -> str:
    """Apply every op as a text edit at the place ruamel.yaml located; raises _CannotSplice."""
    out = text
    # Later places first so earlier offsets stay valid.
    for start, end, new in sorted(_splices(text, docs, edits, json_style=json_style), key=lambda s: s[0],
                                  reverse=True):
        out = out[:start] + new + out[end:]
    return out


def text_replacements(path: str | Path, edit: Edit) -> list[tuple[int, int, str]] | None:
    """The edit as (offset, length, inserted text) replacements in the file's text (SARIF ``fixes``), or None
    where it has no exact place in the text."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        docs = list(_yaml().load_all(text))
        found = _splices(text, docs, [edit], json_style=text.lstrip().startswith(("{", "[")))
    except (_CannotSplice, OSError, ValueError):
        return None
    return [(start, end - start, new) for start, end, new in sorted(found)]


def _splices(text: str, docs: list[Any], edits: Sequence[Edit], *, json_style: bool = False
             ) -> list[tuple[int, int, str]]:
    """Each op as (start, end, new text) at the place ruamel.yaml located; raises _CannotSplice."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    tx = _Text(text)
    splices: list[tuple[int, int, str]] = []
    for e in edits:
        ops = [{**op, "path": e.prefix + op["path"]} for op in e.patch]
        i = 0
        while i < len(ops):
            op = ops[i]
            # Consecutive appends to one list are one insertion (a flag and its value).
            values = [op["value"]]
            while (op["path"].endswith("/-") and i + 1 < len(ops) and ops[i + 1]["path"] == op["path"]
                   and ops[i + 1]["op"] == "add"):
                i += 1
                values.append(ops[i]["value"])
            i += 1
            parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
            try:
                parent = list(_walk(docs[e.document], parts[:-1]))[-1]
            except (KeyError, IndexError, TypeError) as exc:
                raise _CannotSplice(str(exc)) from None
            last = parts[-1]
            flow = bool(parent.fa.flow_style()) if hasattr(parent, "fa") else False
            if op["op"] == "replace" and isinstance(parent, CommentedMap | CommentedSeq):
                if isinstance(parent, CommentedSeq):
                    line, col = parent.lc.item(int(last))
                    old = parent[int(last)]
                else:
                    line, col = parent.lc.value(last)
                    old = parent[last]
                if isinstance(old, dict | list):
                    raise _CannotSplice("not a scalar")
                start = tx.offset(line, col)
                end = tx.scalar_end(start, flow)
                raw = text[start:end]
                new = values[0]
                edited = None
                if isinstance(old, str) and isinstance(new, str) and (" " in old or "\n" in old):
                    edited = _replace_in_scalar(tx, start, end, str(old), new)
                if edited is None:
                    if not raw or raw[0] in "|>":
                        raise _CannotSplice("block scalar")
                    # Keep the value's quoting; a plain value that would not read back as this string is quoted.
                    quote = raw[0] if raw[0] in "\"'" else ""
                    edited = json.dumps(new, ensure_ascii=False) if json_style else _scalar(new, quote)
                splices.append((start, end, edited))
            elif op["op"] == "add" and isinstance(parent, CommentedSeq) and last == "-" and len(parent):
                n = len(parent) - 1
                if isinstance(parent[n], dict | list):
                    raise _CannotSplice("append after a nested item")
                line, col = parent.lc.item(n)
                start = tx.offset(line, col)
                end = tx.scalar_end(start, flow)
                quote = text[start] if end > start and text[start] in "\"'" else ""
                rendered = [json.dumps(v, ensure_ascii=False) if json_style else _scalar(v, quote) for v in values]
                if flow:
                    splices.append((end, end, "".join(f", {r}" for r in rendered)))
                else:
                    dash = text.rfind("-", tx.starts[line], start)
                    if dash < 0:
                        raise _CannotSplice("no dash")
                    pad = " " * (dash - tx.starts[line])
                    splices.append((end, end, "".join(f"\n{pad}- {r}" for r in rendered)))
            elif op["op"] == "add" and isinstance(parent, CommentedSeq) and last == "0" and len(parent) and not flow:
                line, col = parent.lc.item(0)
                start = tx.offset(line, col)
                dash = text.rfind("-", tx.starts[line], start)
                if dash < 0 or text[tx.starts[line]:dash].strip():
                    raise _CannotSplice("dash not first on its line")
                pad = " " * (dash - tx.starts[line])
                sub = _block(values[0], len(pad) + 2)
                lines = [f"{pad}- {sub[0].lstrip()}", *sub[1:]]
                splices.append((tx.starts[line], tx.starts[line], "\n".join(lines) + "\n"))
            elif op["op"] in ("add", "replace") and isinstance(parent, CommentedMap) and last not in parent:
                if flow:
                    if not len(parent) or isinstance(values[0], dict | list):
                        raise _CannotSplice("flow mapping")
                    k = list(parent)[-1]
                    if isinstance(parent[k], dict | list):
                        raise _CannotSplice("flow mapping ending in a collection")
                    line, col = parent.lc.value(k)
                    start = tx.offset(line, col)
                    end = tx.scalar_end(start, True)
                    if json_style:
                        splices.append((end, end, f", {json.dumps(last)}: {json.dumps(values[0], ensure_ascii=False)}"))
                    else:
                        splices.append((end, end, f", {_scalar(last)}: {_scalar(values[0])}"))
                    continue
                if not len(parent):
                    raise _CannotSplice("empty mapping")
                k = next(iter(parent))
                line, col = parent.lc.key(k)
                if text[tx.starts[line]:tx.offset(line, col)].strip():
                    raise _CannotSplice("first key not first on its line")
                lines = _block({last: values[0]}, col)
                splices.append((tx.starts[line], tx.starts[line], "\n".join(lines) + "\n"))
            else:
                raise _CannotSplice(f"op {op['op']} at {op['path']}")
    # Two edits at one place would be ambiguous.
    places = [s for s, _, _ in splices]
    if len(places) != len(set(places)):
        raise _CannotSplice("two edits at one place")
    return splices


_SEPARATOR = re.compile(r"^---[ \t]*(#.*)?$", re.M)


def _split_documents(text: str) -> list[str]:
    """The file's text cut into one chunk per YAML document (a chunk keeps its leading ``---`` line)."""
    starts = [m.start() for m in _SEPARATOR.finditer(text)]
    if not starts or (text[: starts[0]].strip("\n") and not _only_comments(text[: starts[0]])):
        starts = [0, *starts]
    elif starts[0] != 0:
        # Comments before the first `---` belong to the first chunk.
        starts[0] = 0
    chunks = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
    # A trailing `---` with nothing after it is no document.
    while len(chunks) > 1 and not _has_content(chunks[-1]):
        tail = chunks.pop()
        chunks[-1] += tail
    return chunks


def _only_comments(text: str) -> bool:
    return all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())


def _has_content(chunk: str) -> bool:
    return any(line.strip() and not line.lstrip().startswith("#") and not _SEPARATOR.match(line)
               for line in chunk.splitlines())


def _split_head(chunk: str) -> tuple[str, str]:
    """A chunk's leading separator line (kept byte for byte) and the rest, which ruamel re-emits."""
    m = _SEPARATOR.match(chunk)
    if m:
        end = chunk.find("\n", m.end())
        end = len(chunk) if end < 0 else end + 1
        return chunk[:end], chunk[end:]
    return "", chunk


def unified(path: str, before: str, after: str) -> str:
    name = str(path).lstrip("/")
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=f"a/{name}", tofile=f"b/{name}"))

