"""Scenarios: the YAML file that says what `simbench run` simulates, as validated pydantic models.

    >>> from pathlib import Path
    >>> from simbench.scenario import load_scenario
    >>> scenario = load_scenario(Path("scenarios/wiki512.yaml"))
    >>> scenario.name, [plan.label for plan in scenario.strategies][:3]
    ('wiki512', ['none', 'sort', 'greedy:max'])
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import (BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, StrictBool, StrictInt, Tag,
                      ValidationError, field_validator, model_validator)

from simbench.costmodels import COST_MODELS, HardwareProfile, get_model, load_hardware
from simbench.data import bundled_files
from simbench.errors import InputError, InputErrors, did_you_mean, read_text_file
from simbench.yamlfile import load_yaml_documents
from simbench.histogram import LengthHistogram, bundled_histograms, load_histogram
from simbench.costmodels.layout import ParallelLayout
from simbench.sim.memory_fit import DEFAULT_MEMORY_POLICY, MEMORY_POLICIES, MemoryFit, fit_memory, memory_layout
from simbench.sim.plans import (DEFAULT_BASELINE, ExecutionPlan, PlanType, packing_refusals, plan_fields,
                                plan_from_fields, plan_type, with_reference)
from simbench.sim.shapes import DEFAULT_TRAINING_STEPS, TRAINING_STEPS_MAX
from simbench.validation import DEFAULT_DEVICES, DEVICES_MAX, SEEDS_MAX, check_device_counts, check_gpus_per_replica, \
    check_max_depth, check_simulation_work

PLOTS = ("histogram", "packing", "scaling", "gumbel", "timeline", "breakdown")
# Synthetic documents split into pieces are counted up to this length in max-lengths; the tail beyond
# counts as documents of exactly this length.
SPLIT_PIECES_MAX = 64

# Union members are told apart by the input's type, so a mistake yields one error, not one per member.
_SHORT, _FULL = "short form", "full form"


def _by_type(value: Any) -> str:
    return _SHORT if isinstance(value, str) else _FULL


@contextmanager
def _reported_at_key() -> Iterator[None]:
    """In a validator: the library's InputError as the ValueError pydantic reports at the key being
    validated, with its file and line."""
    try:
        yield
    except InputError as error:
        raise ValueError(str(error)) from None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def allowed_keys(cls, data: Any) -> list[str]:
        """The keys a mapping `data` of this model may hold."""
        return list(cls.model_fields)


class LogNormalComponent(_Strict):
    share: float = Field(gt=0, description="share of the sequences (the shares of a mixture are normalised)")
    median_length: float = Field(gt=0, description="median sequence length in tokens")
    sigma: float = Field(gt=0, description="standard deviation of log(length)")


class SyntheticHistogram(_Strict):
    """A log-normal length distribution, or a mixture of them, discretized exactly (no sampling, no seed).

    The expected count of length l is sequences * (F(l + 0.5) - F(l - 0.5)) for 1 <= l < max_length, where F
    is the CDF of a log-normal with median `median_length` and shape `sigma` (of a `mixture`: the
    share-weighted sum of its components' CDFs); lengths below 1.5 count as 1. Sequences longer than
    max_length are truncated to it (`long_sequences: truncate`, as tokenizers do), or cut into pieces of
    max_length and a remainder (`split`, as pre-training cuts documents), counted up to SPLIT_PIECES_MAX
    pieces. Counts are the expected ones rounded cumulatively, count(l) = round(E(<= l)) - round(E(< l)):
    the dataset holds exactly the sequences asked for (and their pieces), and a tail whose lengths are each
    rare keeps its sequences at its quantiles; rounding each length on its own dropped them (1,000 sequences
    of median 20,000 tokens at 131,072 kept 30).
    """

    synthetic: Literal["lognormal"] = Field(description="the distribution: `lognormal`")
    sequences: int = Field(gt=0, description="number of sequences (documents, when split) in the dataset")
    median_length: float | None = Field(None, gt=0, description="median sequence length in tokens")
    sigma: float | None = Field(None, gt=0, description="standard deviation of log(length)")
    mixture: tuple[LogNormalComponent, ...] | None = Field(
        None, min_length=1, description="several log-normals with their shares, instead of median_length and sigma")
    long_sequences: Literal["truncate", "split"] = Field(
        "truncate", description="sequences over max_length: truncated, or split into max_length pieces")

    @model_validator(mode="after")
    def _one_distribution(self) -> SyntheticHistogram:
        single = self.median_length is not None or self.sigma is not None
        if single == (self.mixture is not None) or single and (self.median_length is None or self.sigma is None):
            raise ValueError("a synthetic histogram takes either `median_length` and `sigma`, or a `mixture`")
        return self

    def _cdf(self, edges: np.ndarray) -> np.ndarray:
        from scipy.stats import lognorm

        components = self.mixture or (LogNormalComponent(share=1.0, median_length=self.median_length,
                                                         sigma=self.sigma),)
        total_share = sum(component.share for component in components)
        return sum(component.share / total_share * lognorm.cdf(edges, s=component.sigma, scale=component.median_length)
                   for component in components)

    def build(self, max_length: int) -> LengthHistogram:
        longest = max_length if self.long_sequences == "truncate" else max_length * SPLIT_PIECES_MAX
        edges = np.arange(0.5, longest + 1.0)
        cdf = self._cdf(edges)
        cdf[0], cdf[-1] = 0.0, 1.0
        expected = self.sequences * np.diff(cdf)
        if longest > max_length:
            # Split before rounding: the long tail's lengths are each rare, their pieces are not.
            lengths = np.arange(max_length + 1, longest + 1)
            over = expected[max_length:]
            expected = expected[:max_length].copy()
            expected[-1] += over @ (lengths // max_length)
            expected += np.bincount(lengths % max_length, weights=over, minlength=max_length + 1)[1:]
        counts = np.diff(np.round(np.concatenate([[0.0], np.cumsum(expected)]))).astype(np.int64)
        name = (f"lognormal-{self.median_length:g}-{self.sigma:g}" if self.mixture is None
                else f"lognormal-mixture-{len(self.mixture)}")
        return LengthHistogram(counts, name=name + ("-split" if self.long_sequences == "split" else ""))


class DatasetSpec(_Strict):
    histogram: Annotated[
        Annotated[str, Tag(_SHORT)] | Annotated[SyntheticHistogram, Tag(_FULL)],
        Discriminator(_by_type),
    ] = Field(description="a bundled histogram name, a CSV (`length,count`) or JSON file (a relative path is taken "
                          "from the scenario's folder), or a synthetic histogram (see below)")
    max_length: int | None = Field(None, ge=1, description="pack and pad to this length, at least the longest "
                                   "sequence; default: the histogram's")
    _histogram: LengthHistogram | None = PrivateAttr(None)

    @field_validator("histogram")
    @classmethod
    def _histogram_exists(cls, histogram: str | SyntheticHistogram) -> str | SyntheticHistogram:
        bundled = bundled_histograms()
        if isinstance(histogram, str) and histogram not in bundled and not Path(histogram).is_file():
            raise ValueError(f"no such histogram file or bundled histogram {histogram!r}; "
                             f"bundled: {', '.join(bundled)} (or build one: simbench histogram build)")
        return histogram

    @model_validator(mode="after")
    def _synthetic_needs_length(self) -> DatasetSpec:
        if isinstance(self.histogram, SyntheticHistogram) and self.max_length is None:
            raise ValueError("a synthetic histogram needs `max_length`")
        return self

    @model_validator(mode="after")
    def _loadable(self) -> DatasetSpec:
        # Loaded here so that a histogram longer than max_length, or an empty one, names this line; kept, so
        # that the run uses the very histogram validation checked (a file may change in between).
        with _reported_at_key():
            histogram = self._load()
        if histogram.sequences == 0:
            raise ValueError(f"histogram {histogram.name} holds no sequences: nothing to train on")
        self._histogram = histogram
        return self

    def load(self) -> LengthHistogram:
        """The histogram, padded with empty lengths up to max_length: the one loaded when the spec was read."""
        return self._histogram if self._histogram is not None else self._load()

    def _load(self) -> LengthHistogram:
        if isinstance(self.histogram, str) and self.histogram not in bundled_histograms():
            return self._build()
        # Synthetic and bundled histograms depend on the spec alone and are immutable: validation, its
        # checks and the run (and a sweep's cells) share one, built once (a synthetic one at 131,072
        # tokens takes ~15 ms).
        key = self.model_dump_json()
        if key not in _BUILT_HISTOGRAMS:
            if len(_BUILT_HISTOGRAMS) >= 16:
                _BUILT_HISTOGRAMS.clear()
            _BUILT_HISTOGRAMS[key] = self._build()
        return _BUILT_HISTOGRAMS[key]

    def _build(self) -> LengthHistogram:
        if isinstance(self.histogram, SyntheticHistogram):
            return self.histogram.build(self.max_length)
        histogram = load_histogram(self.histogram)
        max_length = self.max_length or histogram.max_length
        if histogram.longest > max_length:
            raise InputError(f"dataset.max_length {max_length} is shorter than the longest sequence "
                             f"({histogram.longest}) of histogram {self.histogram}")
        counts = np.zeros(max_length, dtype=np.int64)
        counts[:histogram.longest] = histogram.counts[:histogram.longest]
        return LengthHistogram(counts, name=histogram.name)


_BUILT_HISTOGRAMS: dict[str, LengthHistogram] = {}


class HardwareSpec(_Strict):
    profile: str = Field("a100", description="a hardware preset or a profile YAML file, e.g. one written by "
                         "`simbench calibrate` or `simbench fit-logs`")
    overrides: dict[str, Any] = Field(default_factory=dict, description="profile fields to replace, e.g. "
                                      "`{allreduce_bytes_per_s: 1.0e10}`")
    _profile: HardwareProfile | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _loadable(self) -> HardwareSpec:
        with _reported_at_key():
            self._profile = load_hardware(self.profile, self.overrides)
        return self

    def load(self) -> HardwareProfile:
        """The profile with its overrides, as loaded when the spec was read."""
        return self._profile if self._profile is not None else load_hardware(self.profile, self.overrides)


class StrategySpec(_Strict):
    # Other keys are the plan's own parameters (PlanType.parameters), checked by _plan_parameters.
    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(description="a packer from the registry or a simulator plan (`simbench list`)")
    _plan: ExecutionPlan | None = PrivateAttr(None)
    max_depth: int | Literal["max"] | None = Field(
        None, description="packers and `packed-varlen`: most sequences per pack, or `max` for no limit; default: "
        "the packer's own: 3 for `nnlshp` (its fit enumerates every pack of that depth), no limit for the others "
        "(a limit only costs packs: simbench prices a pack by its tokens, not its number of sequences)")
    packer: str | None = Field(None, description="`packed-varlen` only: the packer whose packs it runs with "
                               "per-sequence attention; default `lpfhp`")
    stages: int | None = Field(None, ge=1, description="`vts` and `vts-bucketed`: pipeline stages; default: the "
                               "model's layers, the hardware profile's `vts_layers_per_stage` to a stage")
    window: int | None = Field(None, ge=1, description="`vts-bucketed`: global batches (all devices' samples) per "
                               "window sorted by length and dealt round-robin to the devices; default 8")
    outlier_delay: StrictBool | None = Field(
        None, description="`wlb` and `packed-varlen` over `wlb`: delay documents of at least half the context so that a "
        "step's packs all hold one or none does, as WLB-LLM's outlier queue does; default true")
    label: str | None = Field(None, description="the name in tables and plots; default: the plan's name, e.g. "
                              "`spfhp:3`")

    @field_validator("max_depth", mode="before")
    @classmethod
    def _depth_or_max(cls, depth: Any) -> Any:
        # Checked here so that a bad depth gives one message, not one per member of the union.
        if depth == "max":
            return depth
        try:
            return check_max_depth(depth)
        except InputError:
            raise ValueError(f"max_depth must be a whole number >= 1 or `max`, found {depth!r}") from None

    @field_validator("name")
    @classmethod
    def _known_name(cls, name: str) -> str:
        with _reported_at_key():
            plan_type(name)
        return name

    @model_validator(mode="wrap")
    @classmethod
    def _plan_parameters(cls, data: Any, handler) -> StrategySpec:
        # A key that is not a field must be a parameter the plan declares, valid for its declared type;
        # the other keys' errors are reported with its own.
        if not isinstance(data, dict):
            return handler(data)
        own = {key: value for key, value in data.items() if key not in cls.model_fields}
        found = _plan_type_or_none(data.get("name")) if own else None
        if found is None:
            return handler(data)
        shared = {key: value for key, value in data.items() if key not in own}
        try:
            checked = found.parameter_model().model_validate(own).model_dump(exclude_unset=True)
        except ValidationError as own_errors:
            try:
                handler(shared)
            except ValidationError as shared_errors:
                raise ValidationError.from_exception_data(
                    cls.__name__, [*shared_errors.errors(), *own_errors.errors()]) from None
            raise own_errors from None
        return handler({**shared, **checked})

    @classmethod
    def allowed_keys(cls, data: Any) -> list[str]:
        fields = list(cls.model_fields)
        if isinstance(data, str):
            data = _or_none(plan_fields, data)
        found = _plan_type_or_none(data.get("name")) if isinstance(data, dict) else None
        return fields + [key for key in (found.parameters if found else ()) if key not in fields]

    @model_validator(mode="after")
    def _valid_plan(self) -> StrategySpec:
        with _reported_at_key():
            self._plan = plan_from_fields(self.model_dump(exclude={"label"}))
        if self.label is None:
            object.__setattr__(self, "label", self._plan.name)
        return self

    def plan(self) -> ExecutionPlan:
        """The simulator's plan, e.g. `spfhp:3`, `packed-varlen:spfhp:4`, `vts-bucketed:window=4`: parsed once,
        when the spec was read."""
        return self._plan


def _plan_type_or_none(name: Any) -> PlanType | None:
    """The plan called `name`; None when there is none (the name's own check reports it)."""
    return _or_none(plan_type, name) if isinstance(name, str) else None


def _or_none(read: Callable[[str], Any], text: str) -> Any:
    try:
        return read(text)
    except InputError:
        return None


def _short_form(text: str) -> dict[str, Any]:
    with _reported_at_key():
        return plan_fields(text)


class OutputsSpec(_Strict):
    plots: tuple[Literal[PLOTS], ...] = Field(PLOTS, description="plots to draw (a plot without data, such as "
                                              "`timeline` without a VTS plan, is skipped)")
    formats: tuple[Literal["png", "svg"], ...] = Field(("png", "svg"), description="image formats of every plot")
    lp_bounds: bool = Field(True, description="bound every packing by the LP optimum at its depth (a few seconds "
                            "per depth on Wikipedia)")


class QuickSpec(_Strict):
    steps: StrictInt = Field(5, ge=1, description="simulated steps per strategy and device count under --quick")
    devices: tuple[Annotated[StrictInt, Field(ge=1, le=DEVICES_MAX)], ...] | None = Field(
        None, description="device counts under --quick; default: the smallest, a middle one and the largest")
    lp_bounds: bool = Field(False, description="compute the LP bounds under --quick too")


def _layout_default(name: str) -> Any:
    """`ParallelLayout`'s default for one of its fields: the schema states the layout's, never its own."""
    return next(field.default for field in dataclasses.fields(ParallelLayout) if field.name == name)


class ParallelSpec(_Strict):
    """A replica's 4D layout (`simbench.costmodels.layout.ParallelLayout`); with it, `devices` count GPUs."""

    tp: StrictInt = Field(
        _layout_default("tp"), ge=1,
        description="tensor-parallel GPUs: each layer's heads and feed-forward width split over them, inside one node")
    pp: StrictInt = Field(
        _layout_default("pp"), ge=1,
        description="pipeline stages, each holding about layers / pp of the model (`stage_layers`)")
    cp: StrictInt = Field(
        _layout_default("cp"), ge=1, description="context-parallel ranks, each holding 1 / cp of a row's tokens")
    dp: StrictInt | None = Field(
        _layout_default("dp"), ge=1, description="data-parallel replicas; default devices / (tp x pp x cp), and with "
        "it `devices` defaults to dp x tp x pp x cp")
    microbatches: StrictInt = Field(
        _layout_default("microbatches"), ge=1,
        description="microbatches per replica and step, each of `batch_size` rows, run through the pipeline")
    virtual_stages: StrictInt = Field(
        _layout_default("virtual_stages"), ge=1,
        description="interleaved chunks per pipeline stage (interleaved 1F1B when above 1)")
    cp_sharding: Literal["contiguous", "zigzag", "per-document"] = Field(
        _layout_default("cp_sharding"), description="how a row's tokens are cut over the cp ranks: contiguous blocks, "
        "zigzag (chunks i and 2 cp - 1 - i to rank i) or per document (each document cut over every rank)")
    zero_stage: Literal[0, 1, 2, 3] = Field(
        _layout_default("zero_stage"), description="ZeRO stage over the data-parallel replicas: 1 shards the "
        "optimizer state, 2 the gradients too, 3 the parameters too")
    recompute: Literal["none", "selective", "full"] = Field(
        _layout_default("recompute"),
        description="activation recomputation in the backward pass: none, selective (attention) or full")
    stage_layers: Literal["balanced", "even"] | list[Annotated[StrictInt, Field(ge=0)]] = Field(
        _layout_default("stage_layers"), description="how the layers spread over the pp x virtual_stages pipeline "
        "chunks: balanced (the default: as evenly as possible, the chunks with one layer fewer first and last, since "
        "those also run the embedding and the output layer and loss; Llama 3's 126-layer 405B on pp 16 is 7, 8 x 14, "
        "7), even (equal chunks; refused when the layers do not divide) or each chunk's layer count in pipeline order")
    overlap_gradient_sync: StrictBool = Field(
        _layout_default("overlap_gradient_sync"), description="reduce the gradients during the last microbatch's "
        "backward pass and gather the updated parameters during the next step's forward, as Megatron-LM's "
        "--overlap-grad-reduce and --overlap-param-gather do (both off by default there, as here); off: the whole "
        "sync follows the step")

    @field_validator("zero_stage", mode="before")
    @classmethod
    def _whole_zero_stage(cls, stage: Any) -> Any:
        # A Literal matches by equality, so `true` and `3.0` would pass as stages 1 and 3.
        if isinstance(stage, bool) or isinstance(stage, float):
            raise ValueError(f"Input should be 0, 1, 2 or 3, a whole number, not {str(stage).lower()}")
        return stage

    def layout(self) -> ParallelLayout:
        return ParallelLayout(**self.model_dump())


class Scenario(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="report folder name: letters, digits, _ . -")
    description: str = Field("", description="one line shown at the top of `summary.md`")
    dataset: DatasetSpec = Field(description="the length histogram and the length to pack and pad to (see below)")
    model: Annotated[
        Annotated[str, Tag(_SHORT)] | Annotated[dict[str, int | bool | str], Tag(_FULL)],
        Discriminator(_by_type),
    ] = Field("bert-large", description="a model preset, or dimensions `{layers, hidden, heads, ffn}` with optional "
              "`vocab`, `max_positions` and, for decoders, `family: decoder`, `kv_heads`, `gated_mlp`, `positions` "
              "(`learned`, `rotary`), `tied_embeddings`, `biases` (`all`, `qkv`, `none`), `norm` (`layernorm`, "
              "`rmsnorm`); a model whose learned positions are fewer than `dataset.max_length` is refused; left out, "
              "`validate` and the report say so")
    hardware: HardwareSpec = Field(HardwareSpec(), description="a hardware preset or profile file (`hardware: cs-2` "
                                   "is short for `{profile: cs-2}`), or a mapping (see below)")
    gpus_per_replica: int = Field(1, description="GPUs in one data-parallel device (tensor or context "
                                  "parallel); `devices` count replicas and `scaling.csv` adds per-GPU throughput "
                                  "(`simbench simulate --gpus-per-replica`); with `parallel`, tp x pp x cp instead")
    parallel: ParallelSpec | None = Field(None, description="a 4D layout of each replica (tensor, pipeline, context "
                                          "parallel, microbatches; see below): `devices` then count GPUs, and each "
                                          "replica's step runs a pipeline of context-parallel groups")
    memory: Literal[MEMORY_POLICIES] = Field(
        DEFAULT_MEMORY_POLICY, description="what a strategy whose largest microbatch exceeds HBM gets: `refuse` marks "
        "it `does not fit` (never ranked first), `recompute` raises activation recomputation (none, selective, full) "
        "until it fits, `auto` (the default: trainers make a model fit rather than stop) does that at each ZeRO stage "
        "up to 3 (FSDP) where there are replicas to shard over; the raised settings price the whole run, a scenario "
        "without `parallel` then running as a 1 x 1 x 1 layout; `validate` refuses a scenario where nothing fits and "
        "says what would (see Memory below)")
    cost_model: str = Field("transformer", description="what prices a step: a cost model of the registry (`simbench "
                                                       "list`)")
    strategies: tuple[Annotated[
        Annotated[StrategySpec, Tag(_FULL)],
        Field(description="a name, or a mapping with `name` and parameters"),
    ], ...] = Field(min_length=1, description="the strategies to compare, each a name or a mapping with `name` and "
                    "parameters (see below); padding (`none`) and the `baseline` are always simulated")
    baseline: Annotated[StrategySpec, Field(description="a plan")] = Field(
        DEFAULT_BASELINE, validate_default=True, description="the strategy every speed-up is over (at the same "
        "device count), written as in `strategies`, e.g. `none`, `pad-to-longest`, `sort`; always simulated. The "
        "default, `pad-to-longest` (random batches each padded to its own longest: Hugging Face's "
        "`DataCollatorWithPadding`), is what people run; `none` (every sequence padded to max_length) is what "
        "the packing and un-padding papers and MLPerf measure against. The ideal speed-up and the packing "
        "figures stay over `none`, which is always simulated too; VTS plans are over their own padded pipeline")
    devices: tuple[Annotated[StrictInt, Field(ge=1, le=DEVICES_MAX)], ...] = Field(
        DEFAULT_DEVICES, min_length=1, description="data-parallel cluster sizes to simulate, up to 1,048,576")
    batch_size: StrictInt = Field(32, ge=1, description="sequences (padding, sorting, un-padding, VTS) or packs "
                                  "(packing) per device and step; `token-budget` fills `batch_size x max_length` "
                                  "padded slots (or its `budget_tokens`), `group-by-length` takes the sequences whose mean length fills them")
    compare_at: Literal["equal-tokens", "as-configured"] = Field(
        "equal-tokens", description="equal-tokens: every strategy's optimizer step sized (rows, token budget, "
        "gradient accumulation) to the same expected real tokens, within 5 % of each other (the scenario's step "
        "at the best efficiency any strategy's rows reach; docs/scenarios.md \"Equal footing\"); as-configured: "
        "every strategy at `batch_size` as given, flagged where their real tokens per step differ by over 10 %")
    steps: StrictInt = Field(200, ge=1, description="simulated training steps per strategy and device count")
    shapes: Literal["new", "seen", "auto"] = Field(
        "auto", description="which steps pay a new batch shape's first-sight cost: new (every variable shape, "
        "a run's first steps), seen (none, steady state) or auto (the average over training_steps)")
    training_steps: StrictInt = Field(DEFAULT_TRAINING_STEPS, ge=1, le=TRAINING_STEPS_MAX, description="steps of the training run being "
                                      "simulated: how often a device meets a batch shape for the first time")
    # Strict: `seed: true` is a mistake, not seed 1.
    seed: StrictInt = Field(0, ge=0, description="seeds every random draw; `--seed` replaces it")
    seeds: StrictInt = Field(1, ge=1, le=SEEDS_MAX, description="whole simulations run with seeds seed, seed+1, "
                             "... on the same packings: the report gives their mean and the spread across them "
                             f"(up to {SEEDS_MAX}; `--seeds` replaces it)")
    outputs: OutputsSpec = Field(OutputsSpec(), description="plots, image formats and LP bounds (see below)")
    quick: QuickSpec = Field(QuickSpec(), description="what `--quick` runs (see below)")

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str | dict[str, int | bool | str]) -> str | dict[str, int | bool | str]:
        with _reported_at_key():
            get_model(model)
        return model

    @field_validator("gpus_per_replica", mode="before")
    @classmethod
    def _whole_gpus_per_replica(cls, gpus: Any) -> int:
        try:
            return check_gpus_per_replica(gpus)
        except InputError as error:
            raise ValueError(str(error).removeprefix("gpus_per_replica ")) from None

    @field_validator("cost_model")
    @classmethod
    def _known_cost_model(cls, name: str) -> str:
        with _reported_at_key():
            COST_MODELS.get(name)
        return name

    @field_validator("hardware", mode="before")
    @classmethod
    def _hardware_shorthand(cls, value: Any) -> Any:
        return {"profile": value} if isinstance(value, str) else value

    @field_validator("strategies", mode="before")
    @classmethod
    def _strategy_shorthand(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [_short_form(item) if isinstance(item, str) else item for item in value]
        return value

    @field_validator("baseline", mode="before")
    @classmethod
    def _baseline_shorthand(cls, value: Any) -> Any:
        return _short_form(value) if isinstance(value, str) else value

    @field_validator("strategies")
    @classmethod
    def _distinct_plans(cls, strategies: tuple[StrategySpec, ...]) -> tuple[StrategySpec, ...]:
        # The simulator runs each plan once, so a second label for the same plan would vanish from the report.
        plans = [spec.plan() for spec in strategies]
        names = [plan.name for plan in plans]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"each plan may be listed once; repeated: {', '.join(repeated)}")
        if any(spec.label == "none" for spec in strategies) and not any(plan.is_reference for plan in plans):
            raise ValueError("the label 'none' belongs to padding to max length, always simulated; choose another "
                             "label")
        return strategies

    @field_validator("devices", mode="before")
    @classmethod
    def _one_device_count(cls, devices: Any) -> Any:
        # `devices: 8` means one cluster size, as `--devices 8` does; bool is no count.
        return [devices] if isinstance(devices, int) and not isinstance(devices, bool) else devices

    @field_validator("devices")
    @classmethod
    def _sorted_devices(cls, devices: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted(set(devices)))

    @model_validator(mode="after")
    def _devices_of_layout(self) -> Scenario:
        # With a layout, devices count GPUs; dp alone says how many.
        if self.parallel is not None and "devices" not in self.model_fields_set:
            if self.parallel.dp is None:
                raise ValueError("with `parallel`, give `devices` (GPUs, a multiple of tp x pp x cp) or `parallel.dp`")
            object.__setattr__(self, "devices", (self.parallel.dp * self.parallel.layout().gpus_per_replica,))
        return self

    @property
    def layout(self) -> ParallelLayout | None:
        """The replica's 4D layout, None without `parallel`."""
        return self.parallel.layout() if self.parallel is not None else None

    @property
    def memory_layout(self) -> ParallelLayout:
        """The layout memory is priced on: `layout`, else one device of `gpus_per_replica` GPUs, tensor parallel
        (`sim.memory_fit.memory_layout`)."""
        return memory_layout(self.layout, self.gpus_per_replica)

    @property
    def replica_devices(self) -> tuple[int, ...]:
        """The data-parallel device counts the simulator runs: `devices`, or with a layout the replicas they make."""
        layout = self.layout
        return self.devices if layout is None else tuple(layout.replicas_of(self.devices))

    @property
    def gpus_per_device(self) -> int:
        """GPUs one simulated device stands for: the layout's tp x pp x cp, else `gpus_per_replica`."""
        layout = self.layout
        return self.gpus_per_replica if layout is None else layout.gpus_per_replica

    @property
    def device_batch_size(self) -> int:
        """Rows a simulated device draws a step: `batch_size`, or with a layout every microbatch's rows."""
        return self.batch_size * (1 if self.parallel is None else self.parallel.microbatches)

    @model_validator(mode="after")
    def _unique_labels(self) -> Scenario:
        labels = [plan.label for plan in self.strategies]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ValueError(f"strategies must have distinct labels; repeated: {', '.join(repeated)} "
                             f"(give them different max_depth or a `label`)")
        return self

    @model_validator(mode="after")
    def _baseline_label(self) -> Scenario:
        # A baseline that is not among the strategies adds a row of its own, under its label.
        baseline = self.baseline.plan()
        if any(spec.plan().name == baseline.name for spec in self.strategies):
            return self
        taken = {spec.label for spec in self.strategies} | ({"none"} - {baseline.name})
        if self.baseline.label in taken:
            raise ValueError(f"baseline: the label {self.baseline.label!r} belongs to another strategy; give the "
                             "baseline another `label`")
        return self

    def quickened(self) -> Scenario:
        """The --quick variant: every strategy, fewer steps and device counts, no LP bounds unless asked."""
        devices = self.quick.devices or (self.devices[0], self.devices[len(self.devices) // 2], self.devices[-1])
        outputs = self.outputs.model_copy(update={"lp_bounds": self.outputs.lp_bounds and self.quick.lp_bounds})
        return self.model_copy(update={"steps": self.quick.steps, "devices": tuple(sorted(set(devices))),
                                       "outputs": outputs})

    def depth_warnings(self, histogram: LengthHistogram | None = None) -> list[str]:
        """A warning for each strategy whose depth limit leaves its rows mostly empty on this dataset (or on
        `histogram`, the one a report was made from): `simbench.strategies.shallow_depth_warning`."""
        from simbench.strategies import STRATEGIES, shallow_depth_warning

        histogram, warnings = histogram or self.dataset.load(), []
        for spec in self.strategies:
            request = spec.plan().source.packing_request(spec.plan())
            strategy = STRATEGIES.find(request[0]) if request else None
            if strategy is not None and strategy.uses_depth:
                warning = shallow_depth_warning(spec.label, histogram, histogram.max_length, request[1])
                warnings += [warning] if warning else []
        return warnings

    def unstated_defaults(self) -> list[str]:
        """The keys that shape every figure (model, hardware, batch size) which the scenario leaves to their
        defaults, each as `model: bert-large (default: no `model:` given)`: `validate` and the report say them."""
        values = {"model": self.model, "hardware": self.hardware.profile, "batch_size": self.batch_size}
        return [f"{key}: {value} (default: no `{key}:` given)" for key, value in values.items()
                if key not in self.model_fields_set]

    def input_files(self) -> list[Path]:
        """The user's files this scenario reads (a histogram, a hardware profile): what no output may replace."""
        names = [self.dataset.histogram, self.hardware.profile]
        return [Path(name) for name in names if isinstance(name, str) and Path(name).is_file()]

    def to_yaml(self) -> str:
        """The resolved scenario: defaults filled in and paths absolute; `load_scenario` reads it back."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, default_flow_style=None)


def bundled_scenarios() -> dict[str, Traversable]:
    """Bundled scenario files by name (file stem): `simbench run wiki512` runs `wiki512.yaml`."""
    return bundled_files("scenarios", ".yaml")


def load_scenarios(path: Path | str, *, seed: int | None = None, seeds: int | None = None) -> list[Scenario]:
    """Read and validate a scenario file, or a bundled one by name: one scenario, or several as YAML
    documents separated by `---`.

    Relative paths in it are resolved against the file's folder.
    """
    bundled = bundled_scenarios()
    if str(path) in bundled:
        with resources.as_file(bundled[str(path)]) as bundled_path:
            return load_scenarios(bundled_path, seed=seed, seeds=seeds)
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such scenario file or bundled scenario (bundled: {', '.join(bundled)})",
                         source=str(path))
    scenarios = parse_scenarios(read_text_file(path, "scenario"), source=str(path), base_dir=path.resolve().parent, seed=seed,
                                 seeds=seeds)
    names = [scenario.name for scenario in scenarios]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InputError(f"the scenarios in one file need distinct names; repeated: {', '.join(repeated)}",
                         source=str(path))
    return scenarios


def load_scenario(path: Path | str, *, seed: int | None = None) -> Scenario:
    """Read a file that holds exactly one scenario (a report's resolved.yaml, for instance)."""
    scenarios = load_scenarios(path, seed=seed)
    if len(scenarios) != 1:
        raise InputError(f"expected one scenario, found {len(scenarios)}", source=str(path))
    return scenarios[0]


def parse_scenarios(text: str, *, source: str, base_dir: Path, seed: int | None = None,
                    seeds: int | None = None) -> list[Scenario]:
    """Every scenario of the file; an invalid file raises every error of every document at once."""
    scenarios, errors = [], []
    for root, data in load_yaml_documents(text, source):
        if data is None:
            continue
        try:
            scenarios.append(_validate(data, root, source, base_dir, seed, seeds))
        except InputErrors as error:
            errors += error.errors
        except InputError as error:
            errors.append(error)
    if errors:
        raise InputErrors(errors)
    if not scenarios:
        raise InputError("the file holds no scenario", source=source)
    return scenarios


def scenario_from_mapping(data: dict, root: yaml.Node, source: str, base_dir: Path) -> Scenario:
    """A scenario from YAML already read (`root`, its node tree, gives error lines): a sweep's cells."""
    return _validate(data, root, source, base_dir, None)


def _validate(data: Any, root: yaml.Node, source: str, base_dir: Path, seed: int | None,
              seeds: int | None = None) -> Scenario:
    if not isinstance(data, dict):
        raise InputError("a scenario must be a mapping of keys such as `name`, `dataset`, `strategies`",
                         source=source, line=root.start_mark.line + 1)
    if seed is not None:
        data["seed"] = seed
    if seeds is not None:
        data["seeds"] = seeds
    _resolve_paths(data, base_dir)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as error:
        found = error.errors()
        # A list's own error (too short once its bad items are left out) only echoes its items' errors.
        paths = [tuple(_path_in_yaml(each["loc"])) for each in found]
        errors = [InputError(_describe(each, data), source=source, line=_line_of(root, each["loc"]))
                  for each, path in zip(found, paths)
                  if not any(len(other) > len(path) and other[:len(path)] == path for other in paths)]
        raise InputErrors(sorted(errors, key=lambda each: each.line or 0)) from None
    refused = (_positions_refused(scenario, root, source) + _packings_refused(scenario, root, source)
               + _layout_refused(scenario, root, source))
    refused = refused or _budgets_refused(scenario, root, source)  # a budget from memory needs a sound layout
    refused = refused or _memory_refused(scenario, root, source)  # memory needs the budgets resolved
    if refused:
        raise InputErrors(refused)
    check_scenario_work(scenario, root, source)
    return scenario


def check_scenario_work(scenario: Scenario, root: yaml.Node, source: str, rows: int | None = None) -> None:
    """The simulation's work estimated from the scenario alone, so that `validate` refuses what `run` would
    only refuse after reading it (and names the scenario's keys, not simulate's options); `rows`, when the
    caller knows them already (a sweep's cells, from a figure per step)."""
    from simbench.sim.simulate import simulation_rows

    if rows is None:
        rows = simulation_rows([spec.plan() for spec in scenario.strategies], scenario.dataset.load(),
                               list(scenario.replica_devices), scenario.device_batch_size,
                               scenario.steps, baseline=scenario.baseline.plan())
    try:
        check_simulation_work(rows, raising="simulate the largest sizes alone with `simbench simulate --max-rows`")
    except InputError as error:
        raise InputError(error.message, source=source, line=_line_of(root, ("steps",))) from None


def _positions_refused(scenario: Scenario, root: yaml.Node, source: str) -> list[InputError]:
    """A model whose learned positions end before the dataset's max length, at the `model` key (where the
    default model was taken, at the max length that asks for more)."""
    max_length = scenario.dataset.max_length or scenario.dataset.load().max_length
    problem = get_model(scenario.model).positions_problem(max_length)
    if problem is None:
        return []
    written = _written(root, ("model",))
    key = ("model",) if written or not _written(root, ("dataset", "max_length")) else ("dataset", "max_length")
    default = "" if written else " (the default: no `model:` given)"
    return [InputError(f"model{default}: {problem}", source=source, line=_line_of(root, key))]


def _packings_refused(scenario: Scenario, root: yaml.Node, source: str) -> list[InputError]:
    """Each strategy whose packer refuses the scenario's max length and depth, at its line and key, so
    that `validate` reports it and `run` stops before any work."""
    plans = [spec.plan() for spec in scenario.strategies]
    baseline = scenario.baseline.plan()
    if not any(plan.source.packing_request(plan) for plan in [*plans, baseline]):
        return []
    max_length = scenario.dataset.max_length or scenario.dataset.load().max_length
    refused = []
    for index, error in packing_refusals(plans, max_length):
        # At the strategy's `max_depth` where it is written, else at the strategy (`nnlshp`, `nnlshp:3`).
        key = ("strategies", index, "max_depth")
        if not _written(root, key):
            key = key[:-1]
        refused.append(InputError(f"{'.'.join(map(str, key))} ({plans[index].name}): {error.message}",
                                  source=source, line=_line_of(root, key)))
    for _, error in packing_refusals([baseline], max_length):
        refused.append(InputError(f"baseline ({baseline.name}): {error.message}", source=source,
                                  line=_line_of(root, ("baseline",))))
    return refused


def _layout_refused(scenario: Scenario, root: yaml.Node, source: str) -> list[InputError]:
    """Each way the scenario's 4D layout cannot hold its model, rows, cluster or strategies, at the key that
    set it, so that `validate` reports them all and `run` starts no work."""
    layout = scenario.layout
    if layout is None:
        return []
    refused = []

    def refuse(key: tuple, message: str) -> None:
        refused.append(InputError(f"{'.'.join(map(str, key))}: {message}", source=source, line=_line_of(root, key)))

    if scenario.gpus_per_replica != 1:
        refuse(("gpus_per_replica",), f"{scenario.gpus_per_replica} contradicts `parallel`, whose tp x pp x cp = "
                                      f"{layout.gpus_per_replica:,} GPUs make a replica; leave gpus_per_replica out")
    try:
        layout.replicas_of(scenario.devices)
    except InputError as error:
        refuse(("devices",), error.message.removeprefix("devices "))
    if "devices" not in scenario.model_fields_set:
        # dp x tp x pp x cp made the devices: held to the bound `devices` has, which `run` checks again.
        try:
            check_device_counts(scenario.devices)
        except InputError:
            key = ("parallel", "dp") if _written(root, ("parallel", "dp")) else ("parallel",)
            refuse(key, f"dp x tp x pp x cp = {scenario.devices[0]:,} GPUs, more than the {DEVICES_MAX:,} devices a "
                        "simulation may have")
    model = get_model(scenario.model)
    max_length = scenario.dataset.max_length or scenario.dataset.load().max_length
    problems = layout.problems(layers=model.layers, heads=model.heads, kv_heads=model.kv_heads or model.heads,
                               ffn=model.ffn, max_length=max_length)
    for key, message in problems:
        refuse(("parallel", key) if _written(root, ("parallel", key)) else ("parallel",), message)
    for key, spec in [*((("strategies", index), spec) for index, spec in enumerate(scenario.strategies)),
                      (("baseline",), scenario.baseline)]:
        if not spec.plan().source.layout_aware:
            refuse(key, f"{spec.plan().name} runs its own pipeline and cannot run inside a 4D "
                        f"layout; leave `parallel` out to simulate it")
    return refused


def _budgets_refused(scenario: Scenario, root: yaml.Node, source: str) -> list[InputError]:
    """Each strategy whose token budget cannot run (`memory` where no token fits, a budget below the longest
    sequence, inside a layout a budget over what its HBM holds), at its `budget_tokens` where written, as its
    run would resolve it."""
    from simbench.sim.memory_budget import layout_terms, layout_token_budget, resolved_plans

    histogram, model, hardware = scenario.dataset.load(), get_model(scenario.model), scenario.hardware.load()
    replicas = min(scenario.replica_devices)
    # The layout's own rows are checked against HBM with the layout; a budget may ask for more.
    checks_hbm = scenario.layout is not None and hardware.hbm_capacity_bytes is not None
    allowed = functools.cache(lambda: layout_token_budget(model, hardware, scenario.memory_layout, replicas))
    refused = []
    for index, spec in enumerate(scenario.strategies):
        try:
            (plan,) = resolved_plans([spec.plan()], histogram, model, hardware, scenario.memory_layout, replicas)
            budget = plan.budget_tokens
            if checks_hbm and isinstance(budget, int) and budget > allowed():
                raise InputError(f"strategy {plan.name!r}: {budget:,} tokens a microbatch exceed what "
                                 f"{hardware.name}'s HBM holds on {layout_terms(scenario.memory_layout)}, up to "
                                 f"{allowed():,} (budget_tokens: memory takes that)", parameter="hbm_capacity_bytes")
        except InputError as error:
            key = ("strategies", index, "budget_tokens")
            key = key if _written(root, key) else key[:-1]
            refused.append(InputError(f"{'.'.join(map(str, key))}: {error.message}", source=source,
                                      line=_line_of(root, key), parameter=error.parameter))
    return refused


def check_scenario_memory(scenario: Scenario, root: yaml.Node, source: str) -> None:
    """InputErrors where no strategy fits memory (`_memory_refused`): for a sweep's cells that differ from a
    validated one only in values whose own checks do not see memory (batch_size, devices)."""
    refused = _memory_refused(scenario, root, source)
    if refused:
        raise InputErrors(refused)


def _memory_refused(scenario: Scenario, root: yaml.Node, source: str) -> list[InputError]:
    """The scenario refused where no strategy's largest microbatch fits HBM under any setting its `memory` policy
    may choose, at the key the first way out changes (`simbench.resolved.scenario_memory`, as `run` checks it)."""
    from simbench.sim.memory_budget import resolved_plans

    try:
        plans = resolved_plans([spec.plan() for spec in scenario.strategies], scenario.dataset.load(),
                               get_model(scenario.model), scenario.hardware.load(),
                               scenario.memory_layout, min(scenario.replica_devices))
        scenario_memory(scenario, configured_plans(scenario, plans))
    except InputError as error:
        key = (error.parameter,) if error.parameter in type(scenario).model_fields else ("memory",)
        key = key if _written(root, key) or not _written(root, ("memory",)) else ("memory",)
        return [InputError(f"{key[0]}: {error.message}", source=source, line=_line_of(root, key),
                           parameter=error.parameter)]
    return []


def plan_labels(scenario: Scenario, plans: Sequence[ExecutionPlan]) -> dict[str, str]:
    """Plan name -> label; a label left to its default names the plan as it runs (a `memory` budget as its number)."""
    return {plan.name: spec.label if spec.label != spec.plan().name else plan.name
            for plan, spec in zip(plans, scenario.strategies)}


def scenario_memory(scenario: Scenario, plans: Mapping[str, ExecutionPlan],
                    histogram: LengthHistogram | None = None) -> MemoryFit | None:
    """The memory check (`sim.memory_fit.fit_memory`) of the scenario's resolved `plans` by label (padding's
    and the baseline's included: `configured_plans`, or the run's as sized) at the fewest replicas simulated: what
    `validate` refuses and `run` prices by; None where the profile states no HBM."""
    hardware = scenario.hardware.load()
    if hardware.hbm_capacity_bytes is None:
        return None
    # A replica of several GPUs without `parallel` is priced by the plain cost model, which prices no recompute.
    can_raise = scenario.layout is not None or scenario.gpus_per_replica == 1
    return fit_memory(get_model(scenario.model), hardware, plans,
                      histogram if histogram is not None else scenario.dataset.load(), batch_size=scenario.batch_size,
                      layout=scenario.memory_layout,
                      replicas=min(scenario.replica_devices), policy=scenario.memory, can_raise=can_raise)


def configured_plans(scenario: Scenario, plans: Sequence[ExecutionPlan]) -> dict[str, ExecutionPlan]:
    """The scenario's resolved `plans`, padding and the baseline by label, at the scenario's own sizes."""
    labels = plan_labels(scenario, plans)
    return {labels.get(plan.name, plan.name): plan
            for plan in with_reference(list(plans), scenario.baseline.plan())}


def _written(root: yaml.Node, path: tuple) -> bool:
    """Whether the YAML holds a node at `path` (mapping keys and list indices)."""
    node = root
    for part in path:
        if isinstance(node, yaml.MappingNode):
            node = next((value for key, value in node.value if key.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return False
        if node is None:
            return False
    return True


def _resolve_paths(data: dict, base_dir: Path) -> None:
    """Make relative file paths absolute against the scenario's folder (bundled names stay names)."""
    dataset = data.get("dataset")
    if isinstance(dataset, dict) and isinstance(dataset.get("histogram"), str):
        dataset["histogram"] = _resolve_file(dataset["histogram"], base_dir)
    hardware = data.get("hardware")
    if isinstance(hardware, str):
        data["hardware"] = _resolve_file(hardware, base_dir)
    elif isinstance(hardware, dict) and isinstance(hardware.get("profile"), str):
        hardware["profile"] = _resolve_file(hardware["profile"], base_dir)


def _resolve_file(name: str, base_dir: Path) -> str:
    candidate = base_dir / name
    return str(candidate.resolve()) if candidate.is_file() else name


def _path_in_yaml(loc: tuple) -> list:
    return [part for part in loc if part not in (_SHORT, _FULL)]


def _line_of(root: yaml.Node | None, loc: tuple) -> int | None:
    """Line of the deepest YAML node along `loc`: the key's line for mapping entries."""
    node, line_node = root, root
    for part in _path_in_yaml(loc):
        if isinstance(node, yaml.MappingNode):
            match = next(((key, value) for key, value in node.value if key.value == part), None)
            if match is None:
                break
            line_node, node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            line_node = node = node.value[part]
        else:
            break
    return line_node.start_mark.line + 1 if line_node is not None else None


def _describe(error: dict, data: Any) -> str:
    """One line: the dotted key, what is wrong and, where known, the allowed keys or values."""
    path = _path_in_yaml(error["loc"])
    key = ".".join(str(part) for part in path) or "(top level)"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(path[:-1], data)
        return f"unknown key {path[-1]!r};{did_you_mean(path[-1], allowed)} allowed keys here: {', '.join(allowed)}"
    if error["type"] == "missing":
        return f"missing required key {key!r}"
    return f"{key}: {message}"


def _allowed_keys(parent: list, data: Any) -> list[str]:
    """Keys of the model at `parent` in the schema (list indices and union tags skipped), for the
    mapping found there in `data` (a strategy's keys depend on its plan)."""
    model: type[_Strict] = Scenario
    for part in parent:
        data = _child(data, part)
        if isinstance(part, int):
            continue
        annotation = model.model_fields[part].annotation
        nested = _nested_model(annotation)
        if nested is None:
            break
        model = nested
    return model.allowed_keys(data)


def _child(data: Any, part: str | int) -> Any:
    if isinstance(data, dict):
        return data.get(part)
    return data[part] if isinstance(data, list) and isinstance(part, int) and part < len(data) else None


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in getattr(annotation, "__args__", ()) + getattr(annotation, "__metadata__", ()):
        found = _nested_model(argument)
        if found is not None:
            return found
    return None
