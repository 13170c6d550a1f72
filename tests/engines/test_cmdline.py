"""Command lines as the kubelet and shells hand them over: $(VAR), sh -c scripts, argparse prefixes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.engines.cmdline import (
    OptionTable,
    commands_of,
    container_env,
    kubelet_expand,
    parse_argv,
    shell_expand,
    split_script,
)

ENV = {"MODEL": "meta-llama/Llama-3.1-8B", "LEN": "8192", "EMPTY": ""}


# The kubelet's rules (k8s.io/kubernetes third_party/forked/golang/expansion/expand_test.go cases, and
# the API docs of Container.args: "$(VAR_NAME) ... escaped with a double $$ ... unresolvable references
# will never be expanded").
@pytest.mark.parametrize(("text", "want"), [
    ("$(MODEL)", "meta-llama/Llama-3.1-8B"),
    ("--max-model-len=$(LEN)", "--max-model-len=8192"),
    ("$(MODEL)-$(LEN)", "meta-llama/Llama-3.1-8B-8192"),
    ("$(UNDEFINED)", "$(UNDEFINED)"),
    ("$$(MODEL)", "$(MODEL)"),
    ("$$$(MODEL)", "$meta-llama/Llama-3.1-8B"),
    ("$$", "$"),
    ("$", "$"),
    ("$(MODEL", "$(MODEL"),
    ("$MODEL", "$MODEL"),
    ("${MODEL}", "${MODEL}"),
    ("$(EMPTY)x", "x"),
    ("100$", "100$"),
    ("$()", "$()"),
    ("no vars", "no vars"),
])
def test_kubelet_expansion(text: str, want: str) -> None:
    assert kubelet_expand(text, ENV) == want


@given(st.text(alphabet="ab$()", max_size=30))
def test_kubelet_expansion_without_variables_only_unescapes(text: str) -> None:
    # With no variables defined, every reference stays as written; only `$$` collapses.
    out = kubelet_expand(text, {})
    assert out.replace("$", "") == text.replace("$", "")
    assert len(out) <= len(text)


def test_env_values_expand_earlier_variables_only() -> None:
    env, unknown = container_env({"env": [
        {"name": "A", "value": "one"},
        {"name": "B", "value": "$(A)-$(C)"},
        {"name": "C", "value": "three"},
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        {"name": "M", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "model"}}},
    ]})
    assert env == {"A": "one", "B": "one-$(C)", "C": "three"}
    assert unknown == ["S", "M"]


def test_configmaps_resolve_through_a_lookup_and_secrets_never() -> None:
    def lookup(name: str, key: str) -> str | None:
        if name != "cfg":
            return None
        return "MODEL_ID=qwen\nMAX_LEN=4096" if key == "*" else {"model": "qwen"}.get(key)

    env, unknown = container_env({
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "X_"}, {"secretRef": {"name": "hf"}}],
        "env": [{"name": "M", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "model"}}}],
    }, lookup)
    assert env == {"X_MODEL_ID": "qwen", "X_MAX_LEN": "4096", "M": "qwen"}
    assert unknown == ["envFrom secretRef hf"]


@pytest.mark.parametrize(("text", "want"), [
    ("$MODEL", "meta-llama/Llama-3.1-8B"),
    ("${LEN}", "8192"),
    ("${NOPE:-4096}", "4096"),
    ("${EMPTY:-4096}", "4096"),
    ("${EMPTY-4096}", ""),
    ("${LEN:+yes}", "yes"),
    ("'$MODEL'", "'$MODEL'"),
    ("$NOPE", "$NOPE"),
])
def test_shell_parameter_expansion(text: str, want: str) -> None:
    assert shell_expand(text, ENV) == want


def test_scripts_split_into_commands_with_continuations_comments_and_exports() -> None:
    script = """
    set -e
    # download first
    pip install -q hf_transfer && huggingface-cli download $MODEL
    export MAX_LEN=16384
    exec vllm serve "$MODEL" \\
        --max-model-len ${MAX_LEN} \\
        --tensor-parallel-size=2   # two GPUs
    """
    cmds = split_script(script, ENV)
    assert [c.program for c in cmds] == ["set", "pip", "huggingface-cli", "vllm"]
    assert cmds[-1].words == ("vllm", "serve", "meta-llama/Llama-3.1-8B", "--max-model-len", "16384",
                              "--tensor-parallel-size=2")


def test_assignments_prefix_and_env_wrappers() -> None:
    cmds = split_script("VLLM_USE_V1=0 nohup env CUDA_VISIBLE_DEVICES=0 python3 -m vllm.entrypoints.openai.api_server"
                        " --model x; wait", {})
    assert cmds[0].assignments == {"VLLM_USE_V1": "0", "CUDA_VISIBLE_DEVICES": "0"}
    assert cmds[0].words[:3] == ("python3", "-m", "vllm.entrypoints.openai.api_server")


def test_unbalanced_quotes_do_not_raise() -> None:
    assert split_script('vllm serve "unterminated --max-model-len 4', {}) is not None


def test_container_command_forms() -> None:
    env = {"MODEL_ID": "Qwen/Qwen2.5-7B-Instruct"}
    plain = commands_of({"command": ["vllm", "serve"], "args": ["$(MODEL_ID)", "--max-model-len", "8192"]}, env)
    assert plain[0].words == ("vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192")
    shell = commands_of({"command": ["/bin/sh", "-c"], "args": ["vllm serve $(MODEL_ID) --port 8000"]}, env)
    assert shell[0].words == ("vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--port", "8000")
    bash = commands_of({"command": ["bash", "-lc", "echo hi && vllm serve $MODEL_ID"]}, env)
    assert bash[-1].words == ("vllm", "serve", "Qwen/Qwen2.5-7B-Instruct")
    assert commands_of({}, env) == []


TABLE = OptionTable(
    names=frozenset({"--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--enforce-eager",
                     "--model"}),
    aliases={"-tp": "--tensor-parallel-size"}, flags=frozenset({"--enforce-eager"}),
)


def test_argparse_spellings() -> None:
    argv = parse_argv(["--max_model_len", "4096", "--max-num-seq=32", "--enforce-eager", "model-x", "-tp", "2",
                       "--max-num", "7"], TABLE)
    assert argv.get("--max-model-len") == "4096"
    assert argv.get("--max-num-seqs") == "32"  # an unambiguous prefix
    assert argv.get("--enforce-eager") == "true" and argv.positionals == ("model-x",)
    assert argv.get("--tensor-parallel-size") == "2"
    assert argv.get("--max-num-seqs") == "32" and argv.get("--max-num") == "7"  # ambiguous: kept as written
    assert argv.spelled["--max-num-seqs"] == "--max-num-seq"


def test_last_occurrence_wins_and_negative_numbers_are_values() -> None:
    argv = parse_argv(["--max-model-len", "1", "--max-model-len", "2", "--model", "-1"], TABLE)
    assert argv.get("--max-model-len") == "2" and argv.get("--model") == "-1"


def test_a_trailing_comment_ends_at_its_newline() -> None:
    # shlex's comment handling would swallow the newline and join the next command to this one.
    cmds = split_script("pip list | grep vllm  # note\nvllm serve m --max-model-len 4096  # why\necho done", {})
    assert [c.words for c in cmds] == [("pip", "list"), ("grep", "vllm"),
                                        ("vllm", "serve", "m", "--max-model-len", "4096"), ("echo", "done")]
