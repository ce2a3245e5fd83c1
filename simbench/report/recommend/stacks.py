"""Each trainer's own settings for a `TrainingPlan`: TRL, the Hugging Face Trainer, axolotl and Megatron-LM.

A stack either expresses a plan's family (its settings and what differs from what simbench simulated) or
says why it cannot and what its closest setting is; `simbench.report.recommend` then recommends the fastest
strategy of the same run that it can express. Every option written is in the stack's `options`, taken
from the version named in its `source`; tests hold every snippet to that list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from simbench.costmodels.base import Attention
from simbench.report.recommend.plan import Family, RunFacts, TrainingPlan

PACKING_FAMILIES = (Family.PACKS, Family.PACKS_PER_DOCUMENT, Family.GREEDY)
FLASH_ATTENTION = "flash_attention_2"  # transformers' varlen kernel: per-document attention from position_ids
# transformers' default; for packed rows it builds a block-diagonal causal mask from position_ids
# (masking_utils.find_packed_sequence_indices) and hands it to SDPA as a dense tensor: simbench's `dense-mask`.
DENSE_ATTENTION = "sdpa"
# transformers' attn_implementation for each attention simbench prices (`row` is sdpa given no per-document
# position_ids; `block-mask` FlexAttention's document mask).
HF_ATTENTION = {Attention.ROW: DENSE_ATTENTION, Attention.DENSE_MASK: DENSE_ATTENTION,
                Attention.BLOCK_MASK: "flex_attention", Attention.VARLEN: FLASH_ATTENTION}


@dataclass(frozen=True)
class Expression:
    """A plan in a stack's options, and what the stack runs differently from what simbench simulated."""

    settings: dict[str, Any]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stack:
    """A trainer: how it writes a plan (`express`, returning the reason and closest setting as a string where it
    cannot), how its snippet is laid out (`render`), and every option name it may write."""

    name: str
    label: str  # the stack's name in a heading
    title: str  # what the snippet is, for its first comment
    source: str
    options: frozenset[str]
    express: Callable[[TrainingPlan, RunFacts], Expression | str]
    render: Callable[[dict[str, Any], list[str]], str]
    option_names: Callable[[dict[str, Any]], set[str]]
    language: str  # the snippet's language, for a Markdown code block


def attention(plan: TrainingPlan) -> str:
    """transformers' attn_implementation for the attention the run priced."""
    if plan.attention is not None:
        return HF_ATTENTION[plan.attention]
    return FLASH_ATTENTION if plan.per_document_attention else DENSE_ATTENTION


def _row_attention_note(plan: TrainingPlan) -> str | None:
    """What a pack family's attn_implementation runs against what simbench priced."""
    if plan.attention is Attention.ROW:
        return ("simbench priced one attention over the whole row (`row`); with the packs' position_ids, "
                "attn_implementation sdpa isolates the documents with a dense block-diagonal mask, which takes SDPA "
                f"off its flash kernel: `{plan.strategy}:attention=dense-mask` prices that, flash_attention_2 "
                "(`attention=varlen`, simbench's packed-varlen) attends per document")
    if plan.attention is Attention.DENSE_MASK:
        return ("attn_implementation sdpa isolates the packed sequences with a dense block-diagonal mask over the "
                "whole row, as simbench priced this strategy; flash_attention_2 attends per document instead")
    return None


def recomputes(plan: TrainingPlan) -> bool:
    """Whether the plan recomputes activations (None, not stated by the run, is priced as none)."""
    return plan.recompute not in (None, "none")


HF_LAYOUT = ("TrainingArguments' parallelism_config, accelerate's ParallelismConfig, takes tensor and context "
             "parallel sizes but no pipeline stages")


def _shared_notes(plan: TrainingPlan, facts: RunFacts, unwritten_layout: str | None) -> list[str]:
    """What every Hugging Face-based stack says alike: recomputation granularity, a layout it does not write
    (`unwritten_layout`: why; None where it writes it), and where transformers gives an encoder no
    per-document mask."""
    notes = []
    if plan.recompute == "selective":
        notes.append("simbench priced selective recomputation (attention only); gradient_checkpointing recomputes "
                     "whole layers, so expect somewhat less than the figure above")
    parallel = [f"{name} {size}" for name, size in (("TP", plan.tp), ("PP", plan.pp), ("CP", plan.cp)) if size > 1]
    if parallel and unwritten_layout:
        notes.append(f"the run's replica layout ({', '.join(parallel)}) is not written here ({unwritten_layout}); "
                     "the throughput assumes it, and `--for megatron` writes it")
    elif plan.gpus_per_replica > 1 and not parallel:
        notes.append(f"a device of this run is a replica of {plan.gpus_per_replica} GPUs (`gpus_per_replica`, tensor "
                     "or context parallel): the batch settings are per replica")
    if not facts.is_decoder and plan.family in (Family.PACKS, Family.GREEDY):
        notes.append("for an encoder transformers builds no per-document mask from position_ids: packed rows attend "
                     "across documents unless the attention is per document (flash_attention_2)")
    return notes


def _hf_sharding(plan: TrainingPlan) -> dict[str, Any]:
    """TrainingArguments' data-parallel sharding for the plan's ZeRO stage: FSDP for 2 and 3, DeepSpeed for 1."""
    if plan.zero_stage == 3:
        return {"fsdp": "full_shard auto_wrap"}
    if plan.zero_stage == 2:
        return {"fsdp": "shard_grad_op auto_wrap"}
    if plan.zero_stage == 1:
        # TrainingArguments takes a DeepSpeed config as a dict; "auto" values are filled from the arguments.
        return {"deepspeed": {"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": "auto",
                              "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"}}}
    return {}


# --- TRL: SFTConfig (SFTTrainer) ------------------------------------------------------------------------------

TRL_OPTIONS = frozenset({
    # trl/trainer/sft_config.py of TRL 1.16.0 and 1.9.0 (packing_strategy since v0.19, "bfd" since v0.20;
    # max_length and padding_free since v0.16, max_length formerly max_seq_length)
    "packing", "packing_strategy", "padding_free", "max_length", "pad_to_multiple_of", "shuffle_dataset",
    "model_init_kwargs",
    # transformers' TrainingArguments (5.23), which SFTConfig extends (train_sampling_strategy replaced
    # group_by_length in huggingface/transformers#43138, 2026)
    "per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
    "train_sampling_strategy", "fsdp", "deepspeed",
    # model_init_kwargs' key, passed to from_pretrained
    "attn_implementation",
})


def _trl(plan: TrainingPlan, facts: RunFacts) -> Expression | str:
    L = plan.max_length
    family = plan.family
    notes = []
    if family is Family.PAD_TO_MAX:
        data = {"packing": False, "padding_free": False, "max_length": L, "pad_to_multiple_of": L}
        notes.append(f"pad_to_multiple_of {L:,} pads every batch to max_length, as padding to max does")
    elif family in (Family.PAD_TO_LONGEST, Family.GROUP_BY_LENGTH):
        data = {"packing": False, "padding_free": False, "max_length": L}
        if family is Family.GROUP_BY_LENGTH:
            data["train_sampling_strategy"] = "group_by_length"
            notes.append("transformers before #43138 (early 2026) spells it group_by_length: true")
    elif family in (Family.PACKS, Family.PACKS_PER_DOCUMENT):
        data = {"packing": True, "packing_strategy": "bfd", "max_length": L}
        if family is Family.PACKS_PER_DOCUMENT:
            data["padding_free"] = True  # implied by bfd packing; written so the intent is plain
        elif _row_attention_note(plan):
            notes.append(_row_attention_note(plan))
        if plan.packer not in ("bfd", None):
            notes.append(f"TRL packs by best-fit decreasing (simbench's `bfd`), not `{plan.packer}`")
    elif family is Family.GREEDY:
        # Greedy fills rows in a shuffled order; TRL shuffles before packing only when asked.
        data = {"packing": True, "packing_strategy": "wrapped", "shuffle_dataset": True, "max_length": L}
        notes.append("TRL's wrapped packing concatenates the shuffled data and cuts rows at max_length, splitting "
                     "sequences at row ends and attending across them, where greedy keeps each sequence whole and "
                     "pads a row's end: wrapped pads nothing, so expect at least greedy's figure, and tokens that "
                     "see other documents")
    elif family is Family.UNPAD:
        data = {"packing": False, "padding_free": True, "max_length": None}
        notes.append(f"TRL refuses max_length with padding_free and no packing: truncate sequences to {L:,} tokens "
                     "before the trainer")
    else:
        return _cannot("TRL", family)
    settings = {**data, "per_device_train_batch_size": plan.rows_per_device,
                "gradient_accumulation_steps": plan.accumulation_steps,
                "model_init_kwargs": {"attn_implementation": attention(plan)},
                # SFTConfig turns it on by default; the throughput is for the run's setting.
                "gradient_checkpointing": recomputes(plan), **_hf_sharding(plan)}
    return Expression(settings, tuple(notes + _shared_notes(plan, facts, HF_LAYOUT)))


# Why a stack cannot run a family and its closest setting, where every stack says the same.
CLOSEST = {
    Family.SORT: "no sampler walks a length-sorted dataset in order; the closest is length-grouped batches "
                 "(simbench's group-by-length)",
    Family.TOKEN_BUDGET: "no batches by a token budget (fairseq's --max-tokens); the closest hold a near-constant "
                         "token count another way: packs of max-length rows or padding-free batches",
    Family.UNPAD_EXCHANGE: "no exchange of sequences between GPUs before a step; the closest is padding-free "
                           "batches without it (simbench's unpad)",
    Family.VTS: "variable tensor shapes run on Cerebras' own software only",
    Family.OTHER: "a plug-in strategy, whose settings simbench does not know",
}


def _cannot(stack: str, family: Family, closest: dict[Family, str] | None = None) -> str:
    """Why `stack` cannot run `family`, and its closest setting (`closest`: the stack's own words for some)."""
    return f"{stack} cannot run {family.value}: {({**CLOSEST, **(closest or {})})[family]}"


def _render_yaml(settings: dict[str, Any], comments: list[str]) -> str:
    return "\n".join(comments) + "\n" + yaml.safe_dump(settings, sort_keys=False, default_flow_style=False)


def _flat_names(settings: dict[str, Any]) -> set[str]:
    """Every key, nested ones included (a nested mapping's keys are options of the stack too)."""
    names = set()
    for key, value in settings.items():
        names.add(key)
        if isinstance(value, dict) and key != "deepspeed":  # a DeepSpeed config is DeepSpeed's, not the stack's
            names |= _flat_names(value)
    return names


TRL = Stack("trl", "TRL", "TRL's SFTTrainer (an SFTConfig, as YAML for `trl sft --config` or SFTConfig(**...))",
            "TRL 1.16 SFTConfig (max_length was max_seq_length before 0.16) over transformers 5.23's "
            "TrainingArguments", TRL_OPTIONS,
            _trl, _render_yaml, _flat_names, "yaml")


# --- Hugging Face Trainer: TrainingArguments, a collator and the model's attention ---------------------------

HF_OPTIONS = frozenset({
    # transformers' TrainingArguments (transformers/training_args.py, transformers 5.23)
    "output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
    "train_sampling_strategy", "fsdp", "deepspeed",
    # transformers' collators (src/transformers/data/data_collator.py) and their arguments
    "DataCollatorWithPadding", "DataCollatorWithFlattening", "padding", "max_length",
    # the Auto classes' from_pretrained
    "AutoModelForCausalLM", "AutoModelForMaskedLM", "attn_implementation",
})


def _hf(plan: TrainingPlan, facts: RunFacts) -> Expression | str:
    L = plan.max_length
    family = plan.family
    notes = []
    if family is Family.PAD_TO_MAX:
        collator = {"class": "DataCollatorWithPadding", "padding": "max_length", "max_length": L}
    elif family in (Family.PAD_TO_LONGEST, Family.GROUP_BY_LENGTH):
        collator = {"class": "DataCollatorWithPadding"}
    elif family is Family.UNPAD:
        collator = {"class": "DataCollatorWithFlattening"}
        notes.append(f"DataCollatorWithFlattening does not truncate: cut sequences to {L:,} tokens beforehand")
    else:
        return _cannot("the Hugging Face Trainer", family, {
            packing: "the Trainer has no packer; DataCollatorWithFlattening flattens each batch padding-free "
                     "(simbench's unpad), and TRL's SFTTrainer packs (`--for trl`)" for packing in PACKING_FAMILIES})
    arguments = {"per_device_train_batch_size": plan.rows_per_device,
                 "gradient_accumulation_steps": plan.accumulation_steps,
                 "gradient_checkpointing": recomputes(plan), **_hf_sharding(plan)}
    if family is Family.GROUP_BY_LENGTH:
        arguments["train_sampling_strategy"] = "group_by_length"
        notes.append("transformers before #43138 (early 2026) spells it group_by_length=True")
    if collator["class"] == "DataCollatorWithPadding":
        notes.append("DataCollatorWithPadding pads input_ids and attention_mask; to pad a causal LM's labels too "
                     "(with -100), DataCollatorForSeq2Seq batches alike")
    model_class = "AutoModelForCausalLM" if facts.is_decoder else "AutoModelForMaskedLM"
    settings = {"model": {"class": model_class, "attn_implementation": attention(plan)}, "data_collator": collator,
                "training_arguments": arguments}
    return Expression(settings, tuple(notes + _shared_notes(plan, facts, HF_LAYOUT)))


def _render_hf(settings: dict[str, Any], comments: list[str]) -> str:
    collator = dict(settings["data_collator"])
    name = collator.pop("class")
    # DataCollatorWithPadding needs the tokenizer; DataCollatorWithFlattening takes none.
    arguments = (["tokenizer"] if name == "DataCollatorWithPadding" else []) + [
        f"{key}={value!r}" for key, value in collator.items()]
    model_class = settings["model"]["class"]
    lines = [*comments, "# model_name, tokenizer and train_dataset are yours.",
             f"from transformers import {model_class}, {name}, Trainer, TrainingArguments", "",
             f"model = {model_class}.from_pretrained(model_name, "
             f"attn_implementation={settings['model']['attn_implementation']!r})",
             f"data_collator = {name}({', '.join(arguments)})",
             "args = TrainingArguments(", '    output_dir="out",',
             *(f"    {key}={value!r}," for key, value in settings["training_arguments"].items()), ")",
             "trainer = Trainer(model=model, args=args, train_dataset=train_dataset, data_collator=data_collator)"]
    return "\n".join(lines) + "\n"


def _hf_names(settings: dict[str, Any]) -> set[str]:
    collator = settings["data_collator"]
    return ({"output_dir", collator["class"], settings["model"]["class"]}
            | {key for key in [*collator, *settings["model"]] if key != "class"} | set(settings["training_arguments"]))


HF = Stack("hf", "Hugging Face Trainer",
           "the Hugging Face Trainer (TrainingArguments, a collator, the model's attention; Python)",
           "transformers 5.23: TrainingArguments, DataCollatorWithPadding, DataCollatorWithFlattening", HF_OPTIONS,
           _hf, _render_hf, _hf_names, "python")


# --- axolotl: its YAML config ---------------------------------------------------------------------------------

AXOLOTL_OPTIONS = frozenset({
    # axolotl/utils/schemas/config.py and training.py of axolotl 0.21.0 and 0.18 (flash_attention: true and
    # sdp_attention: true are deprecated there for attn_implementation)
    "sequence_len", "sample_packing", "sample_packing_sequentially", "pad_to_sequence_len", "batch_flattening",
    "micro_batch_size", "gradient_accumulation_steps", "attn_implementation", "group_by_length",
    "gradient_checkpointing", "deepspeed", "tensor_parallel_size", "context_parallel_size",
})


def _axolotl(plan: TrainingPlan, facts: RunFacts) -> Expression | str:
    family = plan.family
    notes = []
    if family is Family.PAD_TO_MAX:
        data = {"sample_packing": False, "pad_to_sequence_len": True}
    elif family in (Family.PAD_TO_LONGEST, Family.GROUP_BY_LENGTH):
        data = {"sample_packing": False, "pad_to_sequence_len": False}
        if family is Family.GROUP_BY_LENGTH:
            data["group_by_length"] = True
    elif family in (Family.PACKS, Family.PACKS_PER_DOCUMENT):
        data = {"sample_packing": True, "pad_to_sequence_len": True}
        notes.append("axolotl packs by first-fit decreasing within groups of sample_packing_group_size (100,000) "
                     f"sequences, not by `{plan.packer}` over the whole dataset")
        if family is Family.PACKS and _row_attention_note(plan):
            notes.append(_row_attention_note(plan))
    elif family is Family.GREEDY:
        data = {"sample_packing": True, "sample_packing_sequentially": True, "pad_to_sequence_len": True}
        notes.append("sample_packing_sequentially fills each row in the sampler's (shuffled) order and starts a new "
                     "one when the next sequence does not fit: next-fit, as greedy; axolotl logs a hint about "
                     "curriculum_sampling, which would make the order sequential")
    elif family is Family.UNPAD:
        data = {"sample_packing": False, "batch_flattening": True}
    else:
        return _cannot("axolotl", family)
    settings = {"sequence_len": plan.max_length, **data, "micro_batch_size": plan.rows_per_device,
                "gradient_accumulation_steps": plan.accumulation_steps, "attn_implementation": attention(plan),
                "gradient_checkpointing": recomputes(plan)}
    if plan.zero_stage:
        settings["deepspeed"] = f"deepspeed_configs/zero{plan.zero_stage}.json"  # shipped with axolotl
    if plan.tp > 1:
        settings["tensor_parallel_size"] = plan.tp
    if plan.cp > 1:
        settings["context_parallel_size"] = plan.cp
    layout_notes = _shared_notes(plan, facts, "axolotl has no pipeline parallelism" if plan.pp > 1 else None)
    return Expression(settings, tuple(notes + layout_notes))


AXOLOTL = Stack("axolotl", "axolotl", "axolotl (its YAML config)",
                "axolotl 0.21 config schema (before 0.18 attn_implementation was flash_attention: true or "
                "sdp_attention: true)", AXOLOTL_OPTIONS,
                _axolotl, _render_yaml, _flat_names, "yaml")


# --- Megatron-LM: pretrain_gpt.py's flags ---------------------------------------------------------------------

MEGATRON_OPTIONS = frozenset({
    # megatron/training/arguments.py of megatron-core 0.19.2 (and Megatron-LM main, 0.20 in 2026-08): the flags it
    # declares and those it generates from TrainingConfig, TransformerConfig and DistributedInitConfig
    "--seq-length", "--micro-batch-size", "--global-batch-size", "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size", "--context-parallel-size", "--num-virtual-stages-per-pipeline-rank",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--use-distributed-optimizer",
    "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "--overlap-grad-reduce", "--overlap-param-gather",
    "--sft", "--reset-position-ids", "--reset-attention-mask",
})


def _megatron(plan: TrainingPlan, facts: RunFacts) -> Expression | str:
    family = plan.family
    notes = []
    if family is Family.PACKS_PER_DOCUMENT:
        data = {"--sft": True}
        notes.append("--sft reads JSONL lines of conversations and attends per conversation (THD format, cu_seqlens); "
                     "write each of simbench's packs as one line (`simbench assign` says which sequences go into each "
                     f"pack, e.g. --strategy {plan.packer or 'lpfhp'}). Pre-training data instead: "
                     "--dataloader-inter-document-masking attends per document over rows cut from concatenated "
                     "documents")
    elif family is Family.GREEDY:
        data = {"--reset-position-ids": True, "--reset-attention-mask": True}
        notes.append("Megatron's GPT dataset concatenates the shuffled documents and cuts rows at --seq-length, so a "
                     "document may straddle two rows where greedy keeps each whole and pads a row's end; "
                     "--reset-attention-mask masks attention per document over the whole row, as greedy's")
    elif family is Family.PAD_TO_MAX:
        data = {"--sft": True}
        notes.append("--sft with one conversation a JSONL line pads each to --seq-length")
    else:
        return _cannot("Megatron-LM", family, {
            Family.PACKS: "its rows are a packer's only with --sft, which attends per document (simbench's "
                          "packed-varlen), or documents concatenated and cut at row ends (simbench's greedy, nearly)",
            Family.UNPAD: "its batches are rows of --seq-length; the closest are packs attended per document "
                          "(simbench's packed-varlen)",
            **{padded: "its batches are rows of --seq-length, whole documents padded only with --sft"
               for padded in (Family.PAD_TO_LONGEST, Family.GROUP_BY_LENGTH)}})
    if not facts.is_decoder:
        notes.append("for an encoder, pretrain_bert.py takes the batch and parallel flags; --sft and per-document "
                     "attention are pretrain_gpt.py's")
    flags = {"--seq-length": plan.max_length, "--micro-batch-size": plan.rows_per_device,
             "--global-batch-size": plan.rows_per_device * plan.accumulation_steps * plan.data_parallel,
             "--tensor-model-parallel-size": plan.tp, "--pipeline-model-parallel-size": plan.pp,
             "--context-parallel-size": plan.cp, **data}
    if plan.virtual_stages > 1:
        flags["--num-virtual-stages-per-pipeline-rank"] = plan.virtual_stages
    if plan.recompute == "selective":
        flags["--recompute-granularity"] = "selective"
    elif plan.recompute == "full":
        flags |= {"--recompute-granularity": "full", "--recompute-method": "uniform", "--recompute-num-layers": 1}
    if plan.zero_stage == 1:
        flags["--use-distributed-optimizer"] = True
    elif plan.zero_stage in (2, 3):
        flags |= {"--use-megatron-fsdp": True,
                  "--data-parallel-sharding-strategy": "optim_grads" if plan.zero_stage == 2 else "optim_grads_params"}
    if plan.overlap_gradient_sync:
        flags |= {"--overlap-grad-reduce": True, "--overlap-param-gather": True}
    if plan.cp > 1 and family is Family.PACKS_PER_DOCUMENT and plan.cp_sharding != "per-document":
        notes.append(f"with the THD format Megatron cuts each document over the context-parallel ranks (simbench's "
                     f"cp_sharding per-document); this run priced {plan.cp_sharding}")
    if plan.gpus_per_replica > 1 and plan.tp * plan.pp * plan.cp == 1:
        notes.append(f"a device of this run is a replica of {plan.gpus_per_replica} GPUs (`gpus_per_replica`) "
                     "without a layout: set its tensor or context parallel size yourself")
    return Expression(flags, tuple(notes))


def _render_flags(settings: dict[str, Any], comments: list[str]) -> str:
    """A bash array to pass to pretrain_gpt.py: `torchrun ... pretrain_gpt.py "${SIMBENCH_ARGS[@]}" ...`."""
    lines = [f"    {flag}" if value is True else f"    {flag} {value}" for flag, value in settings.items()]
    return "\n".join([*comments, "SIMBENCH_ARGS=(", *lines, ")"]) + "\n"


MEGATRON = Stack("megatron", "Megatron-LM", "Megatron-LM (pretrain_gpt.py flags, as a bash array)",
                 "Megatron-LM's pretrain_gpt.py, megatron-core 0.19.2 (megatron/training/arguments.py)",
                 MEGATRON_OPTIONS, _megatron, _render_flags, lambda settings: set(settings), "bash")


STACKS = {stack.name: stack for stack in (TRL, HF, AXOLOTL, MEGATRON)}

