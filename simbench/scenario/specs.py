"""A scenario's parts as validated pydantic models: its dataset (a histogram file, a bundled one or a synthetic
log-normal), hardware profile, strategies, outputs, `--quick` settings and 4D layout."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, StrictBool, StrictInt, Tag,
                      ValidationError, field_validator, model_validator)

from simbench.costmodels import HardwareProfile, load_hardware
from simbench.costmodels.layout import ParallelLayout
from simbench.errors import InputError
from simbench.histogram import LengthHistogram, bundled_histograms, load_histogram
from simbench.sim.plans import ExecutionPlan, PlanType, plan_fields, plan_from_fields, plan_type
from simbench.validation import DEFAULT_HARDWARE, DEVICES_MAX, check_max_depth

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
    profile: str = Field(DEFAULT_HARDWARE, description="a hardware preset or a profile YAML file, e.g. one written by "
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
    attention: Literal["row", "dense-mask", "block-mask", "varlen"] | None = Field(
        None, description="packers (`none` included, not `sort`) and `packed-varlen`: how a row's attention runs: "
        "`row` one attention over the whole row, its documents attending to each other (SDPA without a mask); "
        "`dense-mask` a "
        "block-diagonal attn_mask as a dense tensor (SDPA off its flash kernel; priced from an H200 measurement); "
        "`block-mask` FlexAttention's document mask, fully masked 128-token blocks skipped (an assumed rate); "
        "`varlen` per-document varlen kernels (flash_attention_2, Megatron-LM's THD), the same as `packed-varlen`. "
        "Default: `row` for a packer, `varlen` for `packed-varlen`; a label names any other, e.g. "
        "`lpfhp:max:attention=dense-mask`")
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
