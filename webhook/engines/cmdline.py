"""How a container's command line reaches the program: kubelet `$(VAR)` expansion, `sh -c` scripts, argv."""

from __future__ import annotations

import bisect
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..units.bounds import MAX_SCRIPT_BYTES, MAX_WORDS, TooLarge, check_size, spend

_SHELL_NAMES = frozenset({"sh", "bash", "dash", "ash", "zsh"})
# Words that run the next word as the program (`exec vllm serve …`, `env A=1 vllm …`).
_PREFIX_PROGRAMS = frozenset({"exec", "nohup", "time", "env", "command", "stdbuf", "dumb-init", "tini", "--"})
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
# Shell parameter expansion: $VAR, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:=default}.
_SHELL_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", ";;", "(", ")", "\n", "|&"})
_PUNCTUATION = frozenset(";&|()")
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")
# POSIX arithmetic expansion `$(( … ))` (one level of inner parentheses).
_ARITHMETIC = re.compile(r"\$\(\(((?:[^()]|\([^()]*\))*)\)\)")
_ARITH_MARK = re.compile(r"\x00(\d+)\x00")
_ARITH_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\*\*|[-+*/%()]))")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Shell arithmetic is signed 64-bit (dash and bash: intmax_t). A value past it, a literal longer than it, an
# expression of more tokens or deeper nesting than these is "unknown" here, never computed: Python's integers
# have no bound, and `(<4,300 digits>**64) * …` took seconds of the event loop.
_ARITH_MIN, _ARITH_MAX = -(2**63), 2**63 - 1
_ARITH_MAX_TOKENS = 256
_ARITH_MAX_DEPTH = 32
_ARITH_MAX_DIGITS = 19


def kubelet_expand(text: str, env: Mapping[str, str]) -> str:
    """Expand ``$(VAR)`` as the kubelet does (k8s.io/kubernetes third_party/forked/golang/expansion).

    ``$$`` is an escaped ``$``; ``$(VAR)`` of an undefined variable and an unterminated ``$(`` are
    left as written; a ``$`` before any other character is kept with that character.
    """
    if "$" not in text:
        return text
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    n = len(text)
    while cursor < n:
        if text[cursor] == "$" and cursor + 1 < n:
            out.append(text[checkpoint:cursor])
            nxt = text[cursor + 1]
            if nxt == "$":
                out.append("$")
                advance = 1
            elif nxt == "(":
                close = text.find(")", cursor + 2)
                if close < 0:
                    out.append("$(")
                    advance = 1
                else:
                    name = text[cursor + 2 : close]
                    out.append(env.get(name, f"$({name})"))
                    advance = close - cursor
            else:
                out.append("$" + nxt)
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


def container_env(container: Mapping[str, Any], lookup: Callable[[str, str], str | None] | None = None,
                  ) -> tuple[dict[str, str], list[str]]:
    """The container's env as the program sees it, and the names whose values cannot be known here.

    Literal values are expanded against the variables defined before them (the kubelet's rule);
    ``envFrom`` and ``valueFrom.configMapKeyRef`` are resolved through ``lookup(configmap, key)``
    when one is given; for ``envFrom`` the key is ``*`` and the answer newline-separated
    ``KEY=VALUE`` pairs. Secrets are never read: their values stay unknown.
    """
    env: dict[str, str] = {}
    unknown: list[str] = []
    for source in _as_list(container.get("envFrom")):
        if not isinstance(source, dict):
            continue
        ref = source.get("configMapRef")
        prefix = str(source.get("prefix") or "")
        if isinstance(ref, dict) and lookup is not None and isinstance(ref.get("name"), str):
            pairs = lookup(ref["name"], "*")
            if pairs:
                for line in pairs.splitlines():
                    key, sep, value = line.partition("=")
                    if sep:
                        env[prefix + key] = value
                continue
        unknown.append(f"envFrom {_describe_ref(source)}")
    for item in _as_list(container.get("env")):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        name = item["name"]
        if "value" in item and isinstance(item["value"], str | int | float):
            env[name] = kubelet_expand(str(item["value"]), env)
            continue
        ref = (item.get("valueFrom") or {}) if isinstance(item.get("valueFrom"), dict) else {}
        cm = ref.get("configMapKeyRef")
        if isinstance(cm, dict) and lookup is not None:
            resolved = lookup(str(cm.get("name")), str(cm.get("key")))
            if resolved is not None:
                env[name] = resolved
                continue
        if ref.get("configMapKeyRef") is not None or ref.get("secretKeyRef") is not None:
            unknown.append(name)  # a fieldRef (pod name, an LWS label) is metadata, not a hidden setting
        elif "value" not in item:
            env[name] = ""  # declared without a value: the kubelet sets it empty
    return env, unknown


def _describe_ref(source: dict[str, Any]) -> str:
    for key in ("configMapRef", "secretRef"):
        ref = source.get(key)
        if isinstance(ref, dict):
            return f"{key} {ref.get('name')}"
    return "?"


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def shell_expand(text: str, env: Mapping[str, str]) -> str:
    """Expand ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` outside single quotes; unknown names stay."""
    if "$" not in text:
        return text

    def repl(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        op, default = match.group(2), match.group(3)
        value = env.get(name)
        if op in (":-", ":="):
            return value if value else (default or "")
        if op in ("-", "="):
            return value if value is not None else (default or "")
        if op in (":+", "+"):
            return (default or "") if value else ""
        return value if value is not None else match.group(0)

    parts = re.split(r"('[^']*')", text)
    return "".join(p if p.startswith("'") and p.endswith("'") and len(p) > 1 else _SHELL_VAR.sub(repl, p)
                   for p in parts)


def arithmetic_value(expr: str, env: Mapping[str, str]) -> str:
    """``$(( expr ))`` as the shell computes it, or ``${VRAMGATE_UNKNOWN}`` when a variable is not known here.

    Integers, ``+ - * / % **`` and parentheses; a name or ``$NAME`` reads the variable. The shell takes an
    unset name as 0, but here "unset" means "set at run time" (``LWS_WORKER_INDEX``): the value stays unknown.
    """
    text = shell_expand(expr, env)
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if len(tokens) >= _ARITH_MAX_TOKENS:
            return UNKNOWN_VALUE
        match = _ARITH_TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            if text[pos:].strip():
                return UNKNOWN_VALUE
            break
        pos = match.end()
        number, name, op = match.groups()
        if name is not None:
            value = env.get(name, "").strip()
            if not value.lstrip("-").isdigit():
                return UNKNOWN_VALUE
            number = value
        if number is not None and len(number.lstrip("-")) > _ARITH_MAX_DIGITS:
            return UNKNOWN_VALUE  # before int(): converting thousands of digits is itself the cost
        tokens.append(number if number is not None else op)
    try:
        return str(_Arithmetic(tokens).value())
    except (ValueError, ZeroDivisionError, IndexError):
        return UNKNOWN_VALUE


# What a value computed at run time reads as: an unexpanded variable, which every setting reader treats as unknown.
UNKNOWN_VALUE = "${VRAMGATE_UNKNOWN}"


def _bounded(value: int) -> int:
    if not _ARITH_MIN <= value <= _ARITH_MAX:
        raise ValueError("past 64 bits")  # the shell would wrap around; the value is not what was meant
    return value


class _Arithmetic:
    """A recursive-descent reader of shell integer arithmetic (C precedence, truncating division), in 64 bits.

    Every value stays within signed 64 bits (ValueError past it), and nesting (parentheses, unary signs, the
    right-associative ``**``) stops at _ARITH_MAX_DEPTH: recursion here is bounded whatever the input.
    """

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.i = 0
        self.depth = 0

    def _deeper(self) -> None:
        self.depth += 1
        if self.depth > _ARITH_MAX_DEPTH:
            raise ValueError("nested too deep")

    def value(self) -> int:
        result = self._sum()
        if self.i != len(self.tokens):
            raise ValueError("trailing tokens")
        return result

    def _peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _sum(self) -> int:
        left = self._product()
        while self._peek() in ("+", "-"):
            op = self.tokens[self.i]
            self.i += 1
            right = self._product()
            left = _bounded(left + right if op == "+" else left - right)
        return left

    def _product(self) -> int:
        left = self._power()
        while self._peek() in ("*", "/", "%"):
            op = self.tokens[self.i]
            self.i += 1
            right = self._power()
            if op == "*":
                left = _bounded(left * right)
            else:
                quotient = abs(left) // abs(right) * (1 if (left >= 0) == (right >= 0) else -1)
                left = quotient if op == "/" else left - quotient * right
        return left

    def _power(self) -> int:
        base = self._unary()
        if self._peek() == "**":
            self.i += 1
            self._deeper()
            exponent = self._power()
            self.depth -= 1
            if exponent < 0 or exponent > 64:
                raise ValueError("exponent out of range")
            # |base| < 2**63 and exponent <= 64: at most 4,032 bits before the bound, a few microseconds.
            return _bounded(base**exponent)
        return base

    def _unary(self) -> int:
        token = self._peek()
        if token in ("+", "-"):
            self.i += 1
            self._deeper()
            inner = self._unary()
            self.depth -= 1
            return _bounded(-inner if token == "-" else inner)
        if token == "(":
            self.i += 1
            self._deeper()
            inner = self._sum()
            self.depth -= 1
            if self._peek() != ")":
                raise ValueError("unbalanced parentheses")
            self.i += 1
            return inner
        if token is None or not token.lstrip("-").isdigit():
            raise ValueError(f"expected a number, got {token!r}")
        self.i += 1
        return _bounded(int(token))


@dataclass(frozen=True)
class Command:
    """One simple command of a script or container: the program's words and the variables set for it."""

    words: tuple[str, ...]
    assignments: dict[str, str] = field(default_factory=dict)

    @property
    def program(self) -> str:
        return self.words[0].rsplit("/", 1)[-1] if self.words else ""


def split_script(script: str, env: Mapping[str, str], params: Sequence[str] = ()) -> list[Command]:
    """Split a shell script into simple commands, with ``export``/assignments carried forward.

    ``params`` are the positional parameters after ``sh -c SCRIPT`` ($0 first): ``"$@"`` expands to them.
    Raises TooLarge for a script longer than MAX_SCRIPT_BYTES (the tokenizer is Python, char by char).
    """
    check_size(script, MAX_SCRIPT_BYTES, "sh -c script")
    text = script.replace("\\\r\n", " ").replace("\\\n", " ")
    # `$(( … ))` is evaluated where it stands, against the variables known there; until then a marker keeps
    # its parentheses from splitting the command (they would drop every flag after it).
    arithmetic: list[str] = []

    def mark(match: re.Match[str]) -> str:
        arithmetic.append(match.group(1))
        return f"\x00{len(arithmetic) - 1}\x00"

    text = _ARITHMETIC.sub(mark, text)
    # Command substitution is opaque here: `$(NAME)` (left by the kubelet when NAME is not in the
    # template's env, e.g. LWS_GROUP_SIZE injected at run time) reads as the variable, anything else as a word.
    text = _SUBSTITUTION.sub(lambda m: "${" + m.group(1) + "}" if _NAME.match(m.group(1)) else "_", text)
    scope = dict(env)
    commands: list[Command] = []
    positional = list(params[1:])
    for line_words in _words(text):
        spend("the sh -c script")
        words: list[str] = []
        for w in line_words:
            if w in ("$@", "${@}", "$*", "${*}"):
                words.extend(positional)
            else:
                if arithmetic and "\x00" in w:
                    w = _ARITH_MARK.sub(lambda m: arithmetic_value(arithmetic[int(m.group(1))], scope), w)
                words.append(shell_expand(w, scope))
        assigned: dict[str, str] = {}
        while words and (match := _ASSIGNMENT.match(words[0])):
            assigned[match.group(1)] = match.group(2)
            words = words[1:]
        if words and words[0] in ("export", "declare", "local", "readonly"):
            for w in words[1:]:
                if m := _ASSIGNMENT.match(w):
                    scope[m.group(1)] = m.group(2)
            continue
        if not words:
            scope.update(assigned)  # `A=1` alone sets a shell variable
            continue
        while words and words[0].rsplit("/", 1)[-1] in _PREFIX_PROGRAMS:
            words = words[1:]
            while words and (words[0].startswith("-") and len(words) > 1 and words[0] != "--"):
                words = words[1:]
            while words and (m := _ASSIGNMENT.match(words[0])):
                assigned[m.group(1)] = m.group(2)
                words = words[1:]
        if words:
            commands.append(Command(tuple(words), assigned))
    return commands


def _join_quoted_lines(text: str) -> str:
    """Newlines inside quotes become spaces: a quoted JSON value over several lines is one word, not the end
    of the command (``--eplb-config '{"window_size": 1000,⏎ "num_redundant_experts": 32}'``)."""
    if "\n" not in text or ("'" not in text and '"' not in text):
        return text
    out: list[str] = []
    quote = ""
    escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote and ch == quote:
            quote = ""
        elif not quote and ch in "'\"":
            quote = ch
        elif ch == "\n" and quote:
            ch = " "
        out.append(ch)
    return "".join(out)


def _words(text: str) -> Iterable[list[str]]:
    """Shell words grouped into simple commands (split at ``;``, ``&&``, ``|``, newlines …)."""
    lexer = shlex.shlex(_join_quoted_lines(text), posix=True, punctuation_chars=";&|()")
    lexer.whitespace = " \t\r"  # newlines separate commands
    lexer.whitespace_split = True
    # shlex's own comment handling eats the newline that ends the comment (joining the next command
    # to this one); a word that starts with "#" starts a comment up to that newline instead.
    lexer.commenters = ""
    current: list[str] = []
    in_comment = False
    try:
        for token in _tokens_keep_newlines(lexer):
            if in_comment:
                in_comment = token != "\n"
                if not in_comment and current:
                    yield current
                    current = []
                continue
            if token.startswith("#"):
                in_comment = True
                continue
            if token in _SEPARATORS or (token and set(token) <= _PUNCTUATION):
                if current:
                    yield current
                current = []
            else:
                current.append(token)
    except ValueError:
        # Unbalanced quotes: fall back to whitespace splitting of what is left.
        current.extend(lexer.token.split() if isinstance(lexer.token, str) else [])
    if current:
        yield current


def _tokens_keep_newlines(lexer: shlex.shlex) -> Iterable[str]:
    # shlex treats "\n" as an ordinary word character once removed from whitespace; split it off.
    for token in lexer:
        if "\n" not in token:
            yield token
            continue
        pieces = token.split("\n")
        for i, piece in enumerate(pieces):
            if piece:
                yield piece
            if i < len(pieces) - 1:
                yield "\n"


def is_shell(words: list[str]) -> bool:
    """``sh -c``, ``/bin/bash -lc`` and the like: the script is the program."""
    if not words:
        return False
    name = words[0].rsplit("/", 1)[-1]
    if name == "env" and len(words) > 1:
        name = words[1].rsplit("/", 1)[-1]
    return name in _SHELL_NAMES


def commands_of(container: Mapping[str, Any], env: Mapping[str, str]) -> list[Command]:
    """The simple commands a container runs: its command+args, or the script of a ``sh -c``."""
    raw: list[str] = []
    words = sum(len(p) if isinstance(p, list) else 1 for p in (container.get("command"), container.get("args")))
    if words > MAX_WORDS:  # before expanding each of them
        raise TooLarge(f"command line of {words:,} words, more than {MAX_WORDS:,}")
    for key in ("command", "args"):
        part = container.get(key)
        if isinstance(part, list):
            raw.extend(kubelet_expand(str(t), env) for t in part if isinstance(t, str | int | float))
        elif isinstance(part, str):
            raw.append(kubelet_expand(part, env))
    if not raw:
        return []
    if not is_shell(raw):
        return [Command(tuple(raw))]
    rest = raw[1:]
    if raw[0].rsplit("/", 1)[-1] == "env":
        rest = raw[2:]
    script: str | None = None
    params: list[str] = []
    for i, word in enumerate(rest):
        if word.startswith("-") and "c" in word.lstrip("-") and not word.startswith("--"):
            j = i + 1
            if j < len(rest) and rest[j] == "--":
                j += 1  # `bash -lc -- 'script'`: "--" ends the shell's options; the script follows
            script = " ".join(rest[j : j + 1]) if j < len(rest) else ""
            params = rest[j + 1 :]  # `sh -c 'exec trl sft "$@"' -- --model …`: $0, then "$@"
            break
        if not word.startswith("-"):
            script = " ".join(shlex.quote(w) for w in rest[i:])  # `bash script.sh args`
            break
    if script is None:
        return []
    return split_script(script, env, params)


@dataclass(frozen=True)
class Argv:
    """A parsed command line: positionals and every option's values, keyed by canonical name."""

    positionals: tuple[str, ...]
    options: dict[str, list[str]]
    spelled: dict[str, str]  # canonical → the spelling the user wrote (for messages)

    def get(self, name: str) -> str | None:
        values = self.options.get(name)
        return values[-1] if values else None  # argparse and clap: the last occurrence wins

    def has(self, name: str) -> bool:
        return name in self.options


@dataclass(frozen=True)
class OptionTable:
    """The options one program accepts: canonical long names, aliases, which take no value."""

    names: frozenset[str]  # canonical long names, with leading dashes
    aliases: Mapping[str, str]  # other spellings (short flags, old names) → canonical
    flags: frozenset[str]  # options that take no value (store_true)
    abbreviations: bool = True  # argparse accepts unambiguous prefixes; clap and llama.cpp do not
    underscores: bool = True  # `--max_model_len` accepted (vLLM's FlexibleArgumentParser, HfArgumentParser)

    def canonical(self, spelled: str) -> str | None:
        """The canonical option for a spelling, or None when unknown or ambiguous."""
        if spelled in self.aliases:
            return self.aliases[spelled]
        name = spelled
        if self.underscores and name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        if name in self.names:
            return name
        if name in self.aliases:
            return self.aliases[name]
        if self.abbreviations and name.startswith("--") and len(name) > 3:
            # The names that start with ``name`` sit together in sorted order: one bisect, not a scan of all.
            ordered = self._ordered
            at = bisect.bisect_left(ordered, name)
            if at < len(ordered) and ordered[at].startswith(name) and not (
                    at + 1 < len(ordered) and ordered[at + 1].startswith(name)):
                return ordered[at]
        return None

    @cached_property
    def _ordered(self) -> tuple[str, ...]:
        return tuple(sorted(self.names))


def parse_argv(words: Iterable[str], table: OptionTable) -> Argv:
    """Parse words as the program would: ``--flag value``, ``--flag=value``, booleans, prefixes."""
    tokens = list(words)
    if len(tokens) > MAX_WORDS:
        raise TooLarge(f"command line of {len(tokens):,} words, more than {MAX_WORDS:,}")
    options: dict[str, list[str]] = {}
    spelled: dict[str, str] = {}
    positionals: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            positionals.extend(tokens[i + 1 :])
            break
        if token.startswith("-") and len(token) > 1 and not _is_number(token):
            raw, eq, inline = token.partition("=")
            name = table.canonical(raw) or _generic(raw)
            if eq:
                value = inline
            elif name in table.flags:
                value = "true"
            elif i + 1 < len(tokens) and not (tokens[i + 1].startswith("-") and not _is_number(tokens[i + 1])):
                i += 1
                value = tokens[i]
            else:
                value = "true"
            options.setdefault(name, []).append(value)
            spelled.setdefault(name, raw)
        else:
            positionals.append(token)
        i += 1
    return Argv(tuple(positionals), options, spelled)


def _generic(raw: str) -> str:
    return "--" + raw[2:].replace("_", "-") if raw.startswith("--") else raw


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True
