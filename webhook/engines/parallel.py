"""Distributed serving: the parallelism layout one engine rank runs in, and how it spreads a model's weights.

An engine instance may span many GPUs and pods: tensor parallel (TP) and pipeline parallel (PP) split one
rank's model; data parallel (DP) runs several ranks side by side, each with its own KV cache; expert
parallel (EP) and DP attention change which parts of a mixture-of-experts model each GPU holds.

- vLLM (vllm/model_executor/layers/fused_moe/config.py ``FusedMoEParallelConfig.make``): a MoE layer's
  experts are always sharded over the flattened DP × TP ranks (``flatten_tp_across_dp``), as expert
  parallel with ``--enable-expert-parallel`` and tensor parallel without it; attention, dense layers,
  shared experts and the vocabulary stay TP-split and are replicated on every DP rank. A pod runs
  ``--data-parallel-size-local`` ranks (all of them when unset and the instance is one pod).
  ``--decode-context-parallel-size`` shares one sequence's KV over that many ranks of the TP group.
- SGLang (python/sglang/srt/server_args.py, layers/dp_attention.py): ``--tp-size`` counts every GPU of
  the instance (over ``--nnodes`` pods); MoE and dense layers are split over all of them (EP only moves
  which rank holds which expert). With ``--enable-dp-attention`` attention, embeddings and the head are
  split over ``tp / dp`` GPUs only, each DP group serving its own requests. Without it, ``--dp-size``
  runs that many independent TP replicas.

The layout is a pure function of the values read; where one is only known at run time it says so.
``moe`` is None for a model the catalog does not hold: its experts, if any, are priced with the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Layout:
    """One engine instance's parallelism, as read, and what it means for the memory of each GPU."""

    tp: int = 1
    pp: int = 1
    dp: int = 1  # data-parallel ranks of the instance (over its whole group of pods)
    dp_local: int | None = None  # ranks per pod (vLLM --data-parallel-size-local)
    ep: bool = False
    dp_attention: bool = False
    dcp: int = 1
    # GPUs one rank's model is priced on (TP × PP); experts and attention spread as below (0: over these).
    rank_gpus: int = 1
    expert_split: int = 0
    attention_split: int = 0
    warnings: tuple[str, ...] = field(default=())
    sources: tuple[tuple[str, str], ...] = field(default=())

    @property
    def distributed(self) -> bool:
        return self.dp > 1 or self.ep or self.dp_attention or self.dcp > 1


def vllm_layout(tp: int, pp: int, dp: int | None, dp_local: int | None, ep: bool, dcp: int | None,
                pod_gpus: int, group: int, moe: bool | None, dp_unknown: bool = False) -> Layout:
    """vLLM: ranks of TP × PP GPUs; ``dp`` of them over the group, ``dp_local`` per pod; experts over DP × TP."""
    warnings: list[str] = []
    sources: list[tuple[str, str]] = []
    rank = tp * pp
    if dp_unknown:
        # `--data-parallel-size $(( … ))` of a variable set at run time: the GPUs the pods ask for are the ranks.
        dp = max(1, pod_gpus * group // rank)
        warnings.append(f"--data-parallel-size is computed at run time; priced as {dp} ranks of {rank} GPU(s), "
                        f"the {pod_gpus * group} GPU(s) of the group")
    dp = dp or 1
    local = dp_local or (dp if group == 1 else max(1, dp // group))
    if dp > 1 and local * rank != pod_gpus:
        warnings.append(f"--data-parallel-size-local {local} × {rank} GPU(s) per rank (TP {tp} × PP {pp}) is "
                        f"{local * rank} GPU(s), but the pod requests {pod_gpus}")
    if dp > 1 and dp * rank != pod_gpus * group and local * rank == pod_gpus:
        warnings.append(f"--data-parallel-size {dp} × {rank} GPU(s) per rank is {dp * rank} GPU(s), but the "
                        f"{group} pod(s) of the group request {pod_gpus * group}")
    if ep and moe is False:
        warnings.append("--enable-expert-parallel on a model without experts: it changes nothing here")
    expert_split = dp * rank if moe and dp > 1 else 0
    if expert_split:
        how = "expert parallel" if ep else "tensor parallel (no --enable-expert-parallel)"
        sources.append(("parallelism", f"vLLM DP {dp} × TP {tp}" + (f" × PP {pp}" if pp > 1 else "")
                        + f": routed experts {how} over {expert_split} GPUs, attention replicated per DP rank"))
    elif dp > 1:
        sources.append(("parallelism", f"vLLM DP {dp}: {dp} replicas of TP {tp}" + (f" × PP {pp}" if pp > 1 else "")))
    return Layout(tp=tp, pp=pp, dp=dp, dp_local=local, ep=ep, dcp=max(dcp or 1, 1), rank_gpus=rank,
                  expert_split=expert_split, warnings=tuple(warnings), sources=tuple(sources))


def sglang_layout(tp: int, pp: int, dp: int | None, dp_attention: bool, ep_size: int | None, dcp: int | None,
                  pod_gpus: int, group: int, moe: bool | None) -> Layout:
    """SGLang: one instance of TP × PP GPUs over its pods; DP attention splits attention over TP / DP."""
    warnings: list[str] = []
    sources: list[tuple[str, str]] = []
    dp = dp or 1
    rank = tp * pp
    attention_split = 0
    if dp_attention and dp > 1:
        if tp % dp:
            warnings.append(f"--enable-dp-attention with --dp-size {dp} that does not divide --tp-size {tp}")
        attention_split = max(1, tp // dp) * pp
        sources.append(("parallelism", f"SGLang TP {tp} with DP attention {dp}: attention, embeddings and head over "
                        f"{max(1, tp // dp)} GPU(s), MoE and dense layers over {tp}"))
    elif dp > 1:
        sources.append(("parallelism", f"SGLang DP {dp}: {dp} replicas of TP {tp}"))
        if dp * rank != pod_gpus * group:
            warnings.append(f"--dp-size {dp} × --tp-size {tp} is {dp * rank} GPU(s), but the pod(s) request "
                            f"{pod_gpus * group}")
    if ep_size and ep_size > 1:
        if moe is False:
            warnings.append(f"--ep-size {ep_size} on a model without experts: it changes nothing here")
        elif tp % ep_size:
            warnings.append(f"--ep-size {ep_size} does not divide --tp-size {tp}")
    return Layout(tp=tp, pp=pp, dp=dp, ep=bool(ep_size and ep_size > 1), dp_attention=dp_attention and dp > 1,
                  dcp=max(dcp or 1, 1), rank_gpus=rank, attention_split=attention_split,
                  warnings=tuple(warnings), sources=tuple(sources))


def spanning_layouts(engine: str, moe: bool, heads: int | None, per_node: int, pods: int
                     ) -> list[tuple[str, dict[str, int], str]]:
    """(layout, estimate fields, launch flags) that spread one instance over ``pods`` pods of ``per_node`` GPUs.

    vLLM: DP × EP for a MoE model (experts over every GPU, attention per rank: what the wide-EP guides run),
    then TP inside a node × PP across nodes. SGLang: TP over every GPU (``--nnodes``), where TP divides the
    attention heads (or the model is MoE, whose experts split regardless). The rules above.
    """
    total = per_node * pods
    out: list[tuple[str, dict[str, int], str]] = []
    if engine == "vllm":
        if moe:
            out.append((f"DP {total} × EP", {"gpus": 1, "pipeline": 1, "expert_split": total},
                        f"--data-parallel-size {total} --data-parallel-size-local {per_node} --enable-expert-parallel"))
        out.append((f"TP {per_node} × PP {pods}", {"gpus": total, "pipeline": pods},
                    f"--tensor-parallel-size {per_node} --pipeline-parallel-size {pods}"))
    elif engine == "sglang" and (moe or not heads or heads % total == 0):
        out.append((f"TP {total} over {pods} nodes", {"gpus": total, "pipeline": 1}, f"--tp {total} --nnodes {pods}"))
    return out
