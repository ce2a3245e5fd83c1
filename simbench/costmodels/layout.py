"""A replica's 4D layout: tensor, pipeline and context parallel degrees, microbatches and their checks.

    >>> from simbench.costmodels.layout import ParallelLayout
    >>> layout = ParallelLayout(tp=8, pp=16, cp=16, microbatches=16)
    >>> layout.gpus_per_replica, layout.replicas_of([16384])
    (2048, [8])

Every decision a layout implies is made here once: how many GPUs a replica holds, how a cluster of GPUs
divides into data-parallel replicas, and whether a model and row length can be split this way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from numbers import Integral

from simbench.errors import InputError
from simbench.validation import check_choice, check_whole_number

CP_SHARDINGS = ("contiguous", "zigzag", "per-document")
STAGE_LAYER_RULES = ("balanced", "even")
RECOMPUTE = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class ParallelLayout:
    """How one data-parallel replica is laid out, and how it trains a step.

    `tp` GPUs split each layer's heads and feed-forward width, `pp` stages (each split further into
    `virtual_stages` interleaved chunks) hold the layers, `cp` ranks hold a row's tokens; a step runs
    `microbatches` microbatches through the pipeline. `dp`, when given, is the replica count the
    cluster must have. `overlap_gradient_sync` starts reducing the gradients during the last microbatch's
    backward pass and gathering the parameters during the next step's forward (`sim.parallel.gradient_sync`).
    """

    tp: int = 1
    pp: int = 1
    cp: int = 1
    dp: int | None = None
    microbatches: int = 1
    virtual_stages: int = 1
    cp_sharding: str = "zigzag"
    zero_stage: int = 1
    recompute: str = "none"
    stage_layers: str | tuple[int, ...] = "balanced"
    # Off, as Megatron-LM runs by default (DistributedDataParallelConfig.overlap_grad_reduce and
    # overlap_param_gather are False unless --overlap-grad-reduce / --overlap-param-gather are given): the
    # bundled 4D scenarios lay replicas out Megatron's way, and off keeps the sync fully exposed.
    overlap_gradient_sync: bool = False

    def __post_init__(self):
        for name in ("tp", "pp", "cp", "microbatches", "virtual_stages"):
            check_whole_number(getattr(self, name), f"parallel.{name}", minimum=1)
        if self.dp is not None:
            check_whole_number(self.dp, "parallel.dp", minimum=1)
        check_choice(self.cp_sharding, "parallel.cp_sharding", CP_SHARDINGS)
        check_choice(self.recompute, "parallel.recompute", RECOMPUTE)
        # A whole number, not 3.0 or true, which equal stages 3 and 1.
        whole = isinstance(self.zero_stage, Integral) and not isinstance(self.zero_stage, bool)
        if not whole or self.zero_stage not in ZERO_STAGES:
            raise InputError(f"parallel.zero_stage must be one of 0, 1, 2, 3, found {self.zero_stage!r}",
                             parameter="parallel.zero_stage")
        if not isinstance(self.overlap_gradient_sync, bool):
            raise InputError(f"parallel.overlap_gradient_sync must be true or false, found "
                             f"{self.overlap_gradient_sync!r}", parameter="parallel.overlap_gradient_sync")
        if isinstance(self.stage_layers, str):
            check_choice(self.stage_layers, "parallel.stage_layers", STAGE_LAYER_RULES)
        else:
            object.__setattr__(self, "stage_layers", tuple(self.stage_layers))
            for count in self.stage_layers:
                check_whole_number(count, "parallel.stage_layers", minimum=0)

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one data-parallel replica: tp x pp x cp."""
        return self.tp * self.pp * self.cp

    @property
    def stages(self) -> int:
        """Pipeline chunks a microbatch passes through: pp x virtual_stages."""
        return self.pp * self.virtual_stages

    def chunk_layers(self, layers: int) -> tuple[int, ...]:
        """Layers of each model chunk in pipeline order (chunk c on stage c mod pp), summing to `layers`;
        InputError naming parallel.stage_layers where the rule cannot split them."""
        problem = self._stage_layers_problem(layers)
        if problem is not None:
            raise InputError(f"parallel.stage_layers: {problem}", parameter="parallel.stage_layers")
        if not isinstance(self.stage_layers, str):
            return self.stage_layers
        chunks = self.stages
        counts = [layers // chunks] * chunks
        # The chunks taking one layer more are the middle ones: the first chunk also runs the embedding and the
        # last the output layer and loss, so they are the lighter ones (Llama 3's 405B on 16 stages: 126 layers
        # as 7, 8 x 14, 7; Llama 3 paper, section 3.3.2).
        inner_first = sorted(range(chunks), key=lambda c: (-min(c, chunks - 1 - c), c))
        for c in inner_first[:layers % chunks]:
            counts[c] += 1
        return tuple(counts)

    def stage_layers_of(self, layers: int) -> tuple[int, ...]:
        """Layers held by each of the pp pipeline stages (the sum of its chunks)."""
        chunk = self.chunk_layers(layers)
        return tuple(sum(chunk[s::self.pp]) for s in range(self.pp))

    def _stage_layers_problem(self, layers: int) -> str | None:
        chunks = self.stages
        if self.stage_layers == "even" and layers % chunks:
            return (f"the model's {layers} layers do not divide into pp x virtual_stages = {self.pp} x "
                    f"{self.virtual_stages} = {chunks} equal pipeline chunks; leave stage_layers at \"balanced\" "
                    f"to give the first and last chunks fewer")
        # The first and last chunks may hold no layer (the embedding alone, the output layer alone: Llama 3's 126
        # layers on 16 stages of 8 one-layer chunks); a middle chunk without one would be a stage doing nothing.
        if self.stage_layers == "balanced" and layers < chunks - 2:
            return (f"the model's {layers} layers leave pipeline chunks between the first and last without one: "
                    f"pp x virtual_stages = {self.pp} x {self.virtual_stages} = {chunks} chunks need at least "
                    f"{chunks - 2}")
        if not isinstance(self.stage_layers, str):
            if len(self.stage_layers) != chunks:
                return (f"{len(self.stage_layers)} counts given, one per pipeline chunk needed: pp x virtual_stages "
                        f"= {self.pp} x {self.virtual_stages} = {chunks}")
            if sum(self.stage_layers) != layers:
                return f"the counts sum to {sum(self.stage_layers)} layers, the model has {layers}"
        return None

    def replicas_of(self, gpu_counts: Iterable[int]) -> list[int]:
        """The data-parallel replica count of each cluster size in GPUs; a size that is not a whole number of
        replicas, or that contradicts `dp`, is refused with the numbers."""
        replicas = []
        for gpus in gpu_counts:
            if gpus % self.gpus_per_replica:
                raise InputError(f"devices {gpus:,} is not a multiple of tp x pp x cp = {self.tp} x {self.pp} x "
                                 f"{self.cp} = {self.gpus_per_replica:,} GPUs per replica", parameter="devices")
            count = gpus // self.gpus_per_replica
            if self.dp is not None and count != self.dp:
                raise InputError(f"devices {gpus:,} makes {count:,} replicas of {self.gpus_per_replica:,} GPUs, "
                                 f"but parallel.dp is {self.dp}", parameter="devices")
            replicas.append(count)
        return replicas

    def problems(self, *, layers: int, heads: int, kv_heads: int, ffn: int, max_length: int) -> list[tuple[str, str]]:
        """(key, message) for each way the model or row length cannot be split this way; empty if none."""
        found = []
        stage_problem = self._stage_layers_problem(layers)
        if stage_problem is not None:
            found.append(("stage_layers" if self.stage_layers != "balanced" else "pp", stage_problem))
        if heads % self.tp:
            found.append(("tp", f"the model's {heads} attention heads do not divide over tp = {self.tp} GPUs"))
        if kv_heads % self.tp and self.tp % kv_heads:
            # Fewer key-value heads than GPUs is fine when each GPU keeps a copy of one.
            found.append(("tp", f"the model's {kv_heads} key-value heads neither divide over tp = {self.tp} GPUs "
                                f"nor replicate evenly onto them"))
        if ffn % self.tp:
            found.append(("tp", f"the model's feed-forward width {ffn} does not divide over tp = {self.tp} GPUs"))
        if self.cp_sharding == "zigzag" and max_length % (2 * self.cp):
            found.append(("cp", f"zigzag sharding cuts a row of max_length {max_length:,} tokens into 2 x cp = "
                                f"{2 * self.cp} equal chunks, and {max_length:,} is not a multiple of {2 * self.cp}"))
        elif max_length % self.cp:
            found.append(("cp", f"a row of max_length {max_length:,} tokens does not divide over cp = {self.cp} ranks"))
        if self.virtual_stages > 1 and self.microbatches % self.pp:
            found.append(("microbatches", f"interleaved 1F1B runs microbatches in groups of pp = {self.pp}; "
                                          f"{self.microbatches} microbatches is not a multiple of it"))
        return found
