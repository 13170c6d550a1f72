"""What every engine module shares: the settings a container declares, where each came from, versions."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import yaml

from ..units.bounds import CONFIG_FILES
from .cmdline import Argv, Command, OptionTable

Version = tuple[int, ...]

_VERSION_IN_TAG = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Found:
    """A declared value and where it came from (``arg --max-model-len``, ``env MODEL_ID``)."""

    value: str
    source: str


@dataclass(frozen=True)
class Setting:
    """One thing an engine reads, and the options and env variables that say it (in precedence order)."""

    options: tuple[str, ...] = ()
    envs: tuple[str, ...] = ()


@dataclass
class Settings:
    """Everything one container declares to its engine, each value with its source."""

    engine: str
    version: Version | None = None
    version_source: str = "newest known"
    values: dict[str, Found] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def get(self, key: str) -> Found | None:
        return self.values.get(key)

    def value(self, key: str) -> str | None:
        found = self.values.get(key)
        return found.value if found else None

    def flag(self, key: str) -> bool:
        """A boolean setting: present and not an explicit false."""
        value = self.value(key)
        return value is not None and value.strip().lower() not in ("false", "0", "no", "off", "")

    def number(self, key: str) -> float | None:
        value = self.value(key)
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            return None

    def put(self, key: str, value: str, source: str) -> None:
        self.values.setdefault(key, Found(value, source))


@lru_cache(maxsize=1024)
def version_of(image: str, repos: tuple[str, ...]) -> Version | None:
    """The release in an image tag (``vllm/vllm-openai:v0.6.3`` → (0, 6, 3)); None for ``latest``."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag or not any(r in name.lower() for r in repos):
        return None
    match = _VERSION_IN_TAG.match(tag.split("@", 1)[0])
    if not match:
        return None
    return tuple(int(g) for g in match.groups() if g is not None)


def parse_version(text: str) -> Version | None:
    """A version a person writes: ``0.8.5``, ``v0.8``, ``2.4.0``."""
    match = _VERSION_IN_TAG.match(text.strip())
    return tuple(int(g) for g in match.groups() if g is not None) if match else None


def read_settings(
    settings: Settings,
    table: Mapping[str, Setting],
    argv: Argv | None,
    env: Mapping[str, str],
    options: OptionTable | None = None,
) -> Settings:
    """Fill ``settings`` from an engine's setting table: command-line options first, then env twins."""
    for key, setting in table.items():
        if argv is not None:
            for opt in setting.options:
                value = argv.get(opt)
                # `--kv-cache-memory-bytes=${UNSET-}` expands to nothing: as if the flag were not there.
                if value is not None and value.strip():
                    settings.put(key, value, f"arg {argv.spelled.get(opt, opt)}")
                    break
        if key in settings.values:
            continue
        for name in setting.envs:
            value = env.get(name)
            if value is not None and value.strip():
                settings.put(key, value.strip(), f"env {name}")
                break
    return settings


def find_command(commands: Sequence[Command], programs: Sequence[str], modules: Sequence[str] = ()) -> int | None:
    """Index of the first command that runs one of ``programs`` or ``python -m <module>``."""
    for i, cmd in enumerate(commands):
        if cmd.program in programs:
            return i
        if cmd.program.startswith("python") and modules:
            words = cmd.words
            for j, w in enumerate(words[:-1]):
                if w == "-m" and any(words[j + 1].startswith(m) for m in modules):
                    return i
    return None


def yaml_mapping(text: str, what: str = "a config file") -> dict[str, object] | None:
    """A config file's text as a YAML mapping (a trainer's YAML, TRT-LLM's extra LLM API options); None when it
    is not YAML or not a mapping. Parsed once per content (units/bounds.py: TooLarge past its bounds); the
    mapping is shared, so callers only read it."""
    try:
        doc = CONFIG_FILES.load(text, what)
    except yaml.YAMLError:
        return None
    return doc if isinstance(doc, dict) else None
