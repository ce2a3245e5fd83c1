"""A 4D replica's training step, priced from its own microbatches: a pipeline of context-parallel groups.
Wraps a one-GPU cost model, so that every plan whose batches go through `step_costs` runs inside the layout.

    >>> from simbench.costmodels import TransformerCostModel
    >>> from simbench.costmodels.layout import ParallelLayout
    >>> from simbench.sim.replica import ReplicaCostModel
    >>> replica = ReplicaCostModel(TransformerCostModel("llama-3.1-8b", "h100-sxm"), ParallelLayout(pp=4, microbatches=8))
    >>> replica.gpus_per_replica
    4

A batch of the simulator is one replica's step: its rows are cut, in order, into `microbatches` microbatches
of equal token slots. Each microbatch is priced by the one-GPU model (its tokens' dense layers, its documents'
attention, padding, per-token overheads), then split: dense work over tp x cp GPUs and pp x virtual_stages
model chunks, attention over tp GPUs and the cp ranks as the sharding gives each rank its causal pairs, the
slowest rank setting the chunk's time (`sim.parallel.context_parallel`). A chunk takes the layer-bound work in
proportion to its layers (`ParallelLayout.chunk_layers`: uneven when the layers do not divide) and the last chunk
the output layer's too; the embedding, a gather, is not priced. Tensor-parallel all-reduces and the
part of the ring KV exchange that attention does not cover add to each chunk; a forward is a third of a
chunk's work, a backward two thirds (plus what recomputation repeats). The pipeline schedule
(`sim.parallel.pipeline`) turns those into the step; the gradients' reduce-scatter and all-gather across
replicas and context-parallel ranks, and the optimizer update between them, are `gradient_sync`, whose exposed
part the simulator adds after the slowest replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simbench.costmodels.base import BatchSet, CostModel, CostModelWrapper, ExecutionMode, StepCosts
from simbench.costmodels.collectives import Link, allgather, allreduce, reduce_scatter
from simbench.costmodels.model import FLOPS_PER_MULTIPLY_ACCUMULATE
from simbench.costmodels.transformer import WHOLE_ROW_MODES, TransformerCostModel
from simbench.errors import InputError
from simbench.costmodels.layout import ParallelLayout
from simbench.sim.batch_rows import _batches_between, _distinct_rows, _microbatch_of_row, _row_keys
from simbench.sim.parallel.context_parallel import (ContextParallelWork, context_parallel_work, kv_bytes_per_token,
                                                    ring_attention_seconds)
from simbench.sim.parallel.gradient_sync import GradientSync
from simbench.sim.parallel.pipeline import pipeline_step

# Microbatches priced at once: each holds (cp, cp) pair counts and (chunks) stage times, so a block of
# this many stays within tens of MB at cp 16 and 80 model chunks.
MICROBATCHES_PER_BLOCK = 4096
# Steps priced at once, at least: a step of hundreds of microbatches (padding sized to equal tokens) would
# otherwise leave a block a few steps wide, and the pipeline's wave-by-wave recurrence pays its Python
# overhead per block (profiled on llama405b-pretrain-128k at 200 steps: 83 s there at 11 steps a block, 14 s at 64;
# the run's peak resident size 606 MB).
STEPS_PER_BLOCK_MIN = 64
# Distinct packed rows whose context-parallel work is remembered per (cp, sharding) (2.3 KB each at cp 16).
ROW_WORK_CACHE_MAX = 50_000
# Rows sharded in one call: per-document sharding cuts each document into 2 cp pieces, and a call's arrays
# grow with pieces x cp.
ROWS_PER_SHARDING = 256
# Backward of a layer: the gradients of its inputs and of its weights, each as much work as the forward.
BACKWARD_SHARE = 2 / 3
# Megatron's tensor parallelism all-reduces a layer's activations twice in the forward pass (after attention
# and after the feed-forward block) and twice in the backward.
TP_ALLREDUCES_PER_LAYER = 4
ACTIVATION_BYTES = 2  # bf16 activations, sent between stages and all-reduced between tensor-parallel GPUs
# The backward ring sends keys, values and their gradients: twice the forward's bytes, over twice its compute.
RING_BACKWARD_FACTOR = 2


@dataclass(frozen=True, eq=False)
class ReplicaSteps:
    """Each replica step's seconds by cause (arrays over the batches); the busy causes are a mean pipeline
    stage's (all stages' work / pp), so that uneven stages' idle time counts in the bubble."""

    step_seconds: np.ndarray
    compute_seconds: np.ndarray  # real tokens' work at the mean context-parallel rank
    padding_seconds: np.ndarray  # padding's work at the mean rank
    masked_attention_seconds: np.ndarray  # attention between a row's documents, computed and masked out
    overhead_seconds: np.ndarray  # the step's fixed cost and per-token overheads (transfer, pack masks)
    communication_seconds: np.ndarray  # tensor-parallel all-reduces and ring KV exchange left exposed
    recompute_seconds: np.ndarray  # forward work the backward repeats
    cp_imbalance_seconds: np.ndarray  # the slowest context-parallel rank's attention beyond the mean rank's
    bubble_seconds: np.ndarray  # the schedule's fill and drain with every microbatch at the step's mean
    stall_seconds: np.ndarray  # what unequal microbatches add beyond that

    @property
    def fields(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


class ReplicaCostModel(CostModel):
    """The cost model of one data-parallel replica laid out as `layout`, over `gpu_model`, the transformer cost
    model of one GPU (built with gpus_per_replica 1): `step_costs` prices a replica's step, `gradient_sync` the
    gradient synchronisation between replicas and the update after it. The rest is the GPU model's."""

    def __init__(self, gpu_model: TransformerCostModel, layout: ParallelLayout):
        # A replica splits one GPU's attention, launch floor and fixed cost over its GPUs: the transformer's.
        if not isinstance(gpu_model, TransformerCostModel):
            # A plug-in's model by its own name, not its stoppable wrapper's.
            named = gpu_model.cost_model if isinstance(gpu_model, CostModelWrapper) else gpu_model
            raise InputError(f"cost model {type(named).__name__} cannot price a 4D layout; use the transformer "
                             "cost model")
        if gpu_model.gpus_per_replica != 1:
            raise InputError("a 4D replica is priced from a cost model of one GPU (gpus_per_replica 1)")
        self.gpu_model, self.layout = gpu_model, layout
        self.chunk_layers = layout.chunk_layers(gpu_model.model.layers)

    @property
    def gpus_per_replica(self) -> int:
        return self.layout.gpus_per_replica

    def ideal_sequence_seconds(self, sequence_lengths) -> np.ndarray:
        """A sequence's least time on the replica: one GPU's over every GPU of it, no bubble, rank or link lost."""
        return self.gpu_model.ideal_sequence_seconds(sequence_lengths) / self.gpus_per_replica

    def first_sight_seconds(self, mode: ExecutionMode) -> float:
        """A new batch shape's first-sight cost on the replica: every GPU of every stage pays it once per distinct
        shape (a constant, not its layers' share of the whole model's), the stages side by side, so a replica's
        step grows by one GPU's cost."""
        return float(self.gpu_model.first_sight_seconds(mode))

    def first_sight_hidden_seconds(self, mode: ExecutionMode) -> float:
        """As one GPU's: each stage's GPU hides it under the work queued for it in the replica's step."""
        return float(self.gpu_model.first_sight_hidden_seconds(mode))

    def vts_pipeline_stages(self) -> int | None:
        return self.gpu_model.vts_pipeline_stages()

    @property
    def vts_buffer_samples(self) -> int:
        return self.gpu_model.vts_buffer_samples

    @property
    def attention_parity_tokens(self) -> float | None:
        return self.gpu_model.attention_parity_tokens

    @property
    def fixed_step_seconds(self) -> float:
        return self.gpu_model.fixed_step_seconds

    @property
    def allreduce_latency_seconds(self) -> float | None:
        return self.gpu_model.allreduce_latency_seconds

    @property
    def unpadded_noise_cv(self) -> float:
        return self.gpu_model.unpadded_noise_cv

    def vts_stage_seconds(self, sequence_lengths, stages):
        raise InputError("VTS plans run their own pipeline; they cannot run inside a 4D layout")

    def step_costs(self, batches: BatchSet, mode: ExecutionMode) -> StepCosts:
        return _as_step_costs(self.replica_steps(batches, mode))

    def replica_steps(self, batches: BatchSet, mode: ExecutionMode) -> ReplicaSteps:
        """Each batch as one replica's step, its seconds by cause."""
        mode = ExecutionMode(mode)
        per_block = max(STEPS_PER_BLOCK_MIN, MICROBATCHES_PER_BLOCK // self.layout.microbatches)
        parts = [self._block(_batches_between(batches, first, min(first + per_block, batches.batches)), mode)
                 for first in range(0, batches.batches, per_block)]
        if not parts:
            return ReplicaSteps(*(np.zeros(0) for _ in ReplicaSteps.__dataclass_fields__))
        return ReplicaSteps(*(np.concatenate([getattr(part, name) for part in parts])
                              for name in ReplicaSteps.__dataclass_fields__))

    def allreduce_seconds(self, devices: int) -> float:
        """The gradients' collectives across `devices` replicas, hidden or not (`gradient_sync` says how much of
        them a step hides, and prices the update that follows them)."""
        return self.gradient_sync(devices).communication_seconds

    def gradient_sync(self, devices: int) -> GradientSync:
        """The gradients' synchronisation across `devices` replicas: every GPU reduces its tp x pp shard of the
        gradients with the GPUs holding the same shard, cp per replica. An all-reduce at ZeRO stage 0;
        from stage 1 a reduce-scatter and an all-gather of the updated parameters, and at stage 3 two more
        all-gathers (the parameters before the forward and before the backward). Between them the optimizer
        updates the heaviest stage's parameters, split over tp GPUs and, from ZeRO stage 1, over the cp x
        `devices` ranks that each hold a shard of its state. With `overlap_gradient_sync` a step's first stage
        hides the collectives under its backward and forward (`sim.parallel.gradient_sync`)."""
        layout, hardware, model = self.layout, self.gpu_model.hardware, self.gpu_model.model
        ranks = devices * layout.cp
        payload = model.parameters * hardware.gradient_bytes_per_parameter / (layout.tp * layout.pp)
        # Megatron-LM's default bucket (DistributedDataParallelConfig.bucket_size): max(40M, 1M x data-parallel
        # ranks) parameters, larger with more ranks to keep each bucket's collective off its latency floor.
        bucket = min(payload, max(40e6, 1e6 * ranks) * hardware.gradient_bytes_per_parameter)
        per_node = hardware.devices_per_node
        # Megatron's rank order fills a node with tensor-parallel GPUs first, then context-parallel ranks and
        # replicas: the rest of a node's GPUs hold the same shard.
        ranks_per_node = None if per_node is None else max(1, per_node // layout.tp)
        intra = Link(hardware.intra_node_latency_seconds, hardware.intra_node_bytes_per_s)
        inter = Link(hardware.allreduce_latency_seconds, hardware.allreduce_bytes_per_s)

        def seconds(collective, size: float) -> float:
            return collective(ranks, ranks_per_node, size, intra, inter).seconds

        if layout.zero_stage == 0:
            reduce, gathers = allreduce, 0
        else:
            reduce, gathers = reduce_scatter, (3 if layout.zero_stage == 3 else 1)
        heaviest = max(layout.stage_layers_of(model.layers))
        updated = model.parameters * heaviest / model.layers / (layout.tp * (ranks if layout.zero_stage else 1))
        backward_cover, forward_cover = self._sync_cover_shares if layout.overlap_gradient_sync else (0.0, 0.0)
        return GradientSync(reduce_seconds=seconds(reduce, payload),
                            update_seconds=self.gpu_model.optimizer_seconds_of(updated),
                            gather_seconds=gathers * seconds(allgather, payload),
                            reduce_floor_seconds=seconds(reduce, bucket),
                            gather_floor_seconds=gathers * seconds(allgather, bucket),
                            backward_cover_share=backward_cover, forward_cover_share=forward_cover)

    # ------------------------------------------------------------------------------------------ pricing

    @cached_property
    def _links(self) -> tuple[tuple[Link, int | None], Link]:
        """The tensor-parallel group's link and how many of its GPUs share a node (None: each alone), and the
        context-parallel ring's link: NVLink while the group fits in a node, the network past it."""
        hardware, layout = self.gpu_model.hardware, self.layout
        intra = Link(hardware.intra_node_latency_seconds, hardware.intra_node_bytes_per_s)
        inter = Link(hardware.allreduce_latency_seconds, hardware.allreduce_bytes_per_s)
        per_node = hardware.devices_per_node or 1
        tensor = (intra, layout.tp) if layout.tp <= per_node else (inter, None)
        return tensor, (intra if layout.tp * layout.cp <= per_node else inter)

    def _block(self, batches: BatchSet, mode: ExecutionMode) -> ReplicaSteps:
        layout, gpu = self.layout, self.gpu_model
        m, chunks = layout.microbatches, layout.stages
        microbatch_of_row = _microbatch_of_row(batches, m)
        microbatches = BatchSet(batches.sequence_lengths, batches.sequence_row, batches.row_slots,
                                microbatch_of_row, batches.batches * m)
        # The launch floor goes per GPU and chunk below, not on one GPU's whole-model step.
        costs = gpu.step_costs(microbatches, mode, floored=False)
        attention = gpu.attention_seconds(microbatches, mode)
        fixed = gpu.fixed_step_seconds
        # One GPU's work on the microbatch, all layers: per-token overheads stay, the step's fixed cost goes once.
        variable_overhead = np.maximum(costs.overhead_seconds - fixed, 0.0)
        shards = layout.tp * layout.cp * chunks
        work = self._rank_work(batches, microbatches, mode)
        slowest_share = _slowest_share(work, microbatches.batches, layout.cp)
        cp_imbalance = attention * (slowest_share - 1.0 / layout.cp) / (layout.tp * chunks)
        compute = costs.compute_seconds / shards
        padding = costs.padding_seconds / shards
        masked = costs.masked_attention_seconds / shards
        overhead = variable_overhead / shards
        slot_tokens = microbatches.per_batch(microbatches.row_slots.astype(np.float64), of="rows")
        communication = (self._tp_seconds(slot_tokens) + self._ring_exposed_seconds(work, slot_tokens)) / chunks
        chunk_busy = compute + padding + masked + overhead + cp_imbalance + communication
        # Every GPU of the replica issues all the kernels of its chunk's layers, however many GPUs share their
        # work (tp x cp): each microbatch on a chunk takes at least that chunk's launch floor.
        launch_bound = np.maximum(gpu.launch_floor_seconds(mode, layers=gpu.model.layers / chunks) - chunk_busy, 0.0)
        overhead, chunk_busy = overhead + launch_bound, chunk_busy + launch_bound
        recompute = _recompute_seconds(layout.recompute, compute + padding + masked, attention / shards, cp_imbalance)
        forward = chunk_busy * (1 - BACKWARD_SHARE)
        backward = chunk_busy * BACKWARD_SHARE + recompute
        per_chunk = chunks > 1 and self._chunk_shares is not None
        if per_chunk:
            # (microbatches, chunks): the layers' work by each chunk's layers, the output layer's on the last.
            head = (compute + padding + masked - attention / shards) * self._output_layer_share
            layer_shares, head_shares = self._chunk_shares
            forward = ((forward - head * (1 - BACKWARD_SHARE))[:, None] * layer_shares
                       + (head * (1 - BACKWARD_SHARE))[:, None] * head_shares)
            backward = ((backward - head * BACKWARD_SHARE)[:, None] * layer_shares
                        + (head * BACKWARD_SHARE)[:, None] * head_shares)
        per_step = lambda values: values.reshape(batches.batches, m).sum(axis=1) * layout.virtual_stages  # noqa: E731
        busy = per_step(chunk_busy + recompute)
        if chunks == 1:
            # One stage runs its microbatches back to back: nothing to schedule.
            step_seconds = equal_seconds = busy
        else:
            step_seconds, equal_seconds = self._scheduled(forward, backward, slot_tokens, batches.batches,
                                                          chunks if per_chunk else 1)
        # The step ends with the heaviest stage's launches; its update follows the gradients' reduction across
        # the replicas, and is priced with it (`gradient_sync`), where the replica count is known.
        fixed_here = gpu.fixed_step_seconds_of(layers=max(layout.stage_layers_of(gpu.model.layers)), parameters=0)
        return ReplicaSteps(step_seconds=step_seconds + fixed_here,
                            compute_seconds=per_step(compute), padding_seconds=per_step(padding),
                            masked_attention_seconds=per_step(masked),
                            overhead_seconds=per_step(overhead) + fixed_here,
                            communication_seconds=per_step(communication), recompute_seconds=per_step(recompute),
                            cp_imbalance_seconds=per_step(cp_imbalance),
                            bubble_seconds=np.maximum(equal_seconds - busy, 0.0),
                            stall_seconds=step_seconds - np.maximum(equal_seconds, busy))

    def _scheduled(self, forward: np.ndarray, backward: np.ndarray, slot_tokens: np.ndarray, steps: int,
                   width: int) -> tuple[np.ndarray, np.ndarray]:
        """Each replica step's seconds through the pipeline schedule, and as it would be with equal microbatches;
        `width` columns of times per microbatch (one per chunk, or one for all). Replica steps of the same
        microbatch times (every padded step, say) are scheduled once."""
        layout = self.layout
        m, chunks = layout.microbatches, layout.stages
        p2p = np.broadcast_to(self._p2p_seconds(slot_tokens)[:, None], (steps * m, width))
        times = np.stack([np.reshape(forward, (-1, width)), np.reshape(backward, (-1, width)), p2p])
        times = times.reshape(3, steps, m, width)
        distinct, inverse = _distinct_rows(times.transpose(1, 0, 2, 3).reshape(steps, 3 * m * width))
        forward, backward, p2p = distinct.reshape(-1, 3, m, width).transpose(1, 0, 2, 3)
        p2p = p2p[..., :1]
        shape = (distinct.shape[0], m, chunks)
        step = pipeline_step(np.broadcast_to(forward, shape), np.broadcast_to(backward, shape),
                             schedule=self._schedule, virtual_stages=layout.virtual_stages, p2p_seconds=p2p)
        return step.step_seconds[inverse], step.equal_step_seconds[inverse]

    @property
    def _schedule(self) -> str:
        return "1f1b" if self.layout.virtual_stages == 1 else "interleaved-1f1b"

    @cached_property
    def _sync_cover_shares(self) -> tuple[float, float]:
        """The first pipeline stage's backward of the last microbatch and its forward of the first, as shares of
        a step of equal microbatches: what the gradients' reduction and the parameters' gather can hide under.
        Each chunk's work goes by its layers and the output layer's; transfers between stages, attention's
        varying share and what selective recomputation repeats are left out. Under interleaving the first
        stage's other chunks finish their last backward earlier, so this covers them at least as well."""
        layout = self.layout
        chunks = layout.stages
        if self._chunk_shares is None:
            work = np.full(chunks, 1.0 / chunks)
        else:
            layer_shares, head_shares = self._chunk_shares
            head = self._output_layer_share
            work = (layer_shares * (1 - head) + head_shares * head) / chunks
        forward = work * (1 - BACKWARD_SHARE)
        backward = work * BACKWARD_SHARE + (forward if layout.recompute == "full" else 0.0)
        m = layout.microbatches
        if chunks == 1:
            step = m * float(forward[0] + backward[0])
        else:
            shape = (1, m, chunks)
            step = float(pipeline_step(np.broadcast_to(forward, shape), np.broadcast_to(backward, shape),
                                       schedule=self._schedule, virtual_stages=layout.virtual_stages,
                                       equal_reference=False).step_seconds[0])
        first_stage = slice(0, chunks, layout.pp)
        return float(backward[first_stage].sum()) / step, float(forward[first_stage].sum()) / step

    @cached_property
    def _chunk_shares(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Each chunk's share of a microbatch's layer-bound work and of its output layer's, each summing to the
        number of chunks (a chunk's time is the mean chunk's times its share); None for an encoder's equal chunks,
        whose shares are all 1 (a decoder's last chunk always holds the output layer too)."""
        layers = np.asarray(self.chunk_layers, dtype=np.float64)
        model = self.gpu_model.model
        if np.all(layers == layers[0]) and not model.is_decoder:
            return None
        chunks = layers.size
        head = np.zeros(chunks)
        head[-1] = chunks
        return layers / layers.sum() * chunks, head

    @cached_property
    def _output_layer_share(self) -> float:
        """The output layer's (LM head's) share of the dense work: a decoder's h x vocab multiply-accumulates
        per token among its layers'."""
        model = self.gpu_model.model
        if not model.is_decoder:
            return 0.0
        return FLOPS_PER_MULTIPLY_ACCUMULATE * model.hidden * model.vocab / model.forward_linear_flops_per_token

    def _rank_work(self, batches: BatchSet, microbatches: BatchSet, mode: ExecutionMode) -> ContextParallelWork | None:
        """Each microbatch's context-parallel work: its rows' causal pairs by (query rank, key rank), summed (the
        ring runs a microbatch's rows together); None with one rank.

        Whole-row attention (padded rows, a pack under a block-diagonal mask computed densely) is one causal
        sequence per row; variable-length kernels (and a document block mask) attend within each document. Rows of one sequence that fills
        them, alike under both, scale one template; rows of several documents are sharded as laid out."""
        cp = self.layout.cp
        if cp == 1:
            return None
        rows = batches.row_slots.size
        documents = np.bincount(batches.sequence_row, minlength=rows)
        filled = np.bincount(batches.sequence_row, weights=batches.sequence_lengths, minlength=rows)
        whole_row = (np.ones(rows, dtype=bool) if mode in WHOLE_ROW_MODES
                     else (documents <= 1) & (filled >= batches.row_slots))
        # Whole rows scale the template (pairs with the square of their slots, tokens with their slots); rows of
        # several documents, each (cp x cp pairs, cp query tokens, cp key-value tokens), are summed as they are.
        scale = np.where(whole_row, batches.row_slots / self._template_tokens, 0.0)
        template = self._template_work
        squares = np.bincount(microbatches.row_batch, weights=scale**2, minlength=microbatches.batches)
        linear = np.bincount(microbatches.row_batch, weights=scale, minlength=microbatches.batches)
        summed = np.concatenate([squares[:, None] * template[None, :cp * cp], linear[:, None] * template[None, cp * cp:]],
                                axis=1)
        packed_rows = np.flatnonzero(~whole_row & (documents > 0))
        if packed_rows.size:
            packed_work = self._packed_row_work(batches, packed_rows)
            owner = microbatches.row_batch[packed_rows]
            for column in range(summed.shape[1]):
                summed[:, column] += np.bincount(owner, weights=packed_work[:, column], minlength=microbatches.batches)
        return ContextParallelWork(pairs=summed[:, :cp * cp].reshape(-1, cp, cp), query_tokens=summed[:, cp * cp:cp * cp + cp],
                                   kv_tokens=summed[:, cp * cp + cp:])

    def _packed_row_work(self, batches: BatchSet, packed_rows: np.ndarray) -> np.ndarray:
        """(rows, cp x cp + 2 cp) work of rows holding several documents. Packs repeat from step to step: each
        distinct row (its documents in order, its slots) is sharded once and remembered, whichever cost model meets it."""
        layout, cp = self.layout, self.layout.cp
        cache = _ROW_WORK.setdefault((cp, layout.cp_sharding), {})
        keys = [key.tobytes() for key in _row_keys(batches)[packed_rows]]
        missing = sorted({row for row, key in zip(packed_rows.tolist(), keys) if key not in cache})
        if missing:
            if len(cache) + len(missing) > ROW_WORK_CACHE_MAX:
                cache.clear()
            distinct = np.asarray(missing)
            divisor = 2 * cp if layout.cp_sharding == "zigzag" else cp
            row_tokens = -(-batches.row_slots[distinct] // divisor) * divisor
            key_of = dict(zip(packed_rows.tolist(), keys))
            for tokens in np.unique(row_tokens):
                for first in range(0, int(np.count_nonzero(row_tokens == tokens)), ROWS_PER_SHARDING):
                    chosen = distinct[row_tokens == tokens][first:first + ROWS_PER_SHARDING]
                    in_chosen = np.isin(batches.sequence_row, chosen)
                    row_index = np.searchsorted(chosen, batches.sequence_row[in_chosen])
                    found = _flat(context_parallel_work(batches.sequence_lengths[in_chosen], int(tokens), cp,
                                                        layout.cp_sharding, row_of_document=row_index))
                    cache.update((key_of[row], work) for row, work in zip(chosen.tolist(), found))
        return np.array([cache[key] for key in keys])

    @cached_property
    def _template_tokens(self) -> int:
        # 64 positions a zigzag chunk: the diagonal's share of the pairs (1 / 64 of a chunk's) barely shows.
        return 2 * self.layout.cp * 64

    @cached_property
    def _template_work(self) -> np.ndarray:
        """A row-long causal sequence of `_template_tokens` as sharded (pairs scale with its square, tokens with it)."""
        tokens = self._template_tokens
        return _flat(context_parallel_work([tokens], tokens, self.layout.cp, self.layout.cp_sharding))[0]

    def _tp_seconds(self, slot_tokens: np.ndarray) -> np.ndarray:
        """Each microbatch's tensor-parallel all-reduces, all layers, on one GPU (a ring inside the group)."""
        layout, model = self.layout, self.gpu_model.model
        if layout.tp == 1:
            return np.zeros_like(slot_tokens)
        # Inside a node a ring beats a tree at every size (NCCL's tuner): linear in the payload.
        link, ranks_per_node = self._links[0]
        latency = allreduce(layout.tp, ranks_per_node, 0.0, link, link).seconds
        per_token = allreduce(layout.tp, ranks_per_node, 1e9, link, link).seconds - latency
        payload_tokens = slot_tokens / layout.cp * model.hidden * ACTIVATION_BYTES / 1e9
        return TP_ALLREDUCES_PER_LAYER * model.layers * (latency + per_token * payload_tokens)

    def _ring_exposed_seconds(self, work: ContextParallelWork | None, slot_tokens: np.ndarray) -> np.ndarray:
        """Each microbatch's ring KV exchange that its attention does not hide, all layers, forward and backward:
        `ring_attention_seconds` of one layer's forward, the slowest rank's time beyond its compute."""
        layout, model, hardware = self.layout, self.gpu_model.model, self.gpu_model.hardware
        if work is None:
            return np.zeros_like(slot_tokens)
        link = self._links[1]
        # Microbatches of the same pairs (padded ones all share a template) run the same ring: priced once.
        flat = _flat(work)
        distinct, inverse = _distinct_rows(flat)
        cp = layout.cp
        work = ContextParallelWork(pairs=distinct[:, :cp * cp].reshape(-1, cp, cp), query_tokens=distinct[:, cp * cp:cp * cp + cp],
                                   kv_tokens=distinct[:, cp * cp + cp:])
        ring = ring_attention_seconds(
            work, attention_flops_per_token_squared=model.forward_attention_flops_per_token_squared / model.layers
            / layout.tp, attention_flops_per_s=hardware.attention_flops_per_s,
            kv_bytes_per_token=kv_bytes_per_token(model.kv_heads or model.heads, model.hidden // model.heads,
                                                  tp=layout.tp),
            link_bytes_per_s=link.bytes_per_s, link_latency_seconds=link.latency_seconds)
        exposed_forward = np.maximum(ring.layer_seconds - ring.compute_seconds.max(axis=-1), 0.0)[inverse]
        return (1 + RING_BACKWARD_FACTOR) * exposed_forward * model.layers

    def _p2p_seconds(self, slot_tokens: np.ndarray) -> np.ndarray:
        """A microbatch's activations sent from one pipeline chunk to the next (stages sit in different nodes)."""
        layout, model, hardware = self.layout, self.gpu_model.model, self.gpu_model.hardware
        payload = slot_tokens / (layout.cp * layout.tp) * model.hidden * ACTIVATION_BYTES
        return hardware.allreduce_latency_seconds + payload / hardware.allreduce_bytes_per_s


# The context-parallel work of rows already sharded, by (cp, sharding) and row key: a memo of a pure function.
_ROW_WORK: dict[tuple[int, str], dict[bytes, np.ndarray]] = {}


def _flat(work: ContextParallelWork) -> np.ndarray:
    """(rows, cp x cp + 2 cp): each row's pairs, query tokens and key-value tokens side by side."""
    rows = work.pairs.shape[0]
    return np.concatenate([work.pairs.reshape(rows, -1), work.query_tokens, work.kv_tokens], axis=1)


def _as_step_costs(steps: ReplicaSteps) -> StepCosts:
    """The simulator's causes: communication and recomputation count as overhead; bubbles, stalls and the
    slowest rank's excess as the stall a device spends inside its own step."""
    return StepCosts(compute_seconds=steps.compute_seconds, padding_seconds=steps.padding_seconds,
                     overhead_seconds=steps.overhead_seconds + steps.communication_seconds + steps.recompute_seconds,
                     masked_attention_seconds=steps.masked_attention_seconds,
                     stall_seconds=steps.bubble_seconds + steps.stall_seconds + steps.cp_imbalance_seconds)


def _slowest_share(work, microbatches: int, cp: int) -> np.ndarray:
    """Each microbatch's share of its attention work on the busiest context-parallel rank (1 without ranks'
    work: one rank does it all; 1/cp where there is no work)."""
    if work is None:
        return np.ones(microbatches)
    rank_work = work.rank_squared_tokens
    total_work = rank_work.sum(axis=-1)
    return np.where(total_work > 0, rank_work.max(axis=-1) / np.where(total_work > 0, total_work, 1.0), 1.0 / cp)


def _recompute_seconds(recompute: str, work: np.ndarray, attention: np.ndarray, cp_imbalance: np.ndarray) -> np.ndarray:
    """What the backward pass runs again of a microbatch's forward: all of it (`work`, its attention and the
    context-parallel imbalance included) under full recomputation, its attention under selective, else nothing."""
    forward_work = (work + cp_imbalance) * (1 - BACKWARD_SHARE)
    if recompute == "full":
        return forward_work
    if recompute == "selective":
        return (attention + cp_imbalance) * (1 - BACKWARD_SHARE)
    return np.zeros_like(forward_work)
