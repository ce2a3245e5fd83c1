"""The scenario's top level: `Scenario`, the pydantic model every run, sweep cell and report works from, its
keys' defaults and descriptions (which generate docs/scenarios.md's key reference) and its checks of one key
against another."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Discriminator, Field, PrivateAttr, StrictInt, Tag, field_validator, model_validator

from simbench.costmodels import COST_MODELS, get_model
from simbench.costmodels.layout import ParallelLayout
from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.scenario.specs import (_FULL, _SHORT, DatasetSpec, HardwareSpec, OutputsSpec, ParallelSpec, QuickSpec,
                                     StrategySpec, _by_type, _reported_at_key, _short_form, _Strict)
from simbench.sim.memory_fit import DEFAULT_MEMORY_POLICY, MEMORY_POLICIES, memory_layout
from simbench.sim.plans import DEFAULT_BASELINE
from simbench.sim.shapes import TRAINING_STEPS_MAX
from simbench.validation import (DEFAULT_BATCH_SIZE, DEFAULT_COST_MODEL, DEFAULT_DEVICES, DEFAULT_GPUS_PER_REPLICA,
                                 DEFAULT_MODEL, DEFAULT_SEED, DEFAULT_SHAPES, DEFAULT_STEPS, DEFAULT_TRAINING_STEPS,
                                 DEVICES_MAX, SEEDS_MAX, check_gpus_per_replica)

class Scenario(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="report folder name: letters, digits, _ . -")
    description: str = Field("", description="one line shown at the top of `summary.md`")
    dataset: DatasetSpec = Field(description="the length histogram and the length to pack and pad to (see below)")
    model: Annotated[
        Annotated[str, Tag(_SHORT)] | Annotated[dict[str, int | bool | str], Tag(_FULL)],
        Discriminator(_by_type),
    ] = Field(DEFAULT_MODEL, description="a model preset, or dimensions `{layers, hidden, heads, ffn}` with optional "
              "`vocab`, `max_positions` and, for decoders, `family: decoder`, `kv_heads`, `gated_mlp`, `positions` "
              "(`learned`, `rotary`), `tied_embeddings`, `biases` (`all`, `qkv`, `none`), `norm` (`layernorm`, "
              "`rmsnorm`); a model whose learned positions are fewer than `dataset.max_length` is refused; left out, "
              "`validate` and the report say so")
    hardware: HardwareSpec = Field(HardwareSpec(), description="a hardware preset or profile file (`hardware: cs-2` "
                                   "is short for `{profile: cs-2}`), or a mapping (see below)")
    gpus_per_replica: int = Field(DEFAULT_GPUS_PER_REPLICA, description="GPUs in one data-parallel device (tensor or context "
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
    cost_model: str = Field(DEFAULT_COST_MODEL, description="what prices a step: a cost model of the registry (`simbench "
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
    batch_size: StrictInt = Field(DEFAULT_BATCH_SIZE, ge=1, description="sequences (padding, sorting, un-padding, VTS) or packs "
                                  "(packing) per device and step; `token-budget` fills `batch_size x max_length` "
                                  "padded slots (or its `budget_tokens`), `group-by-length` takes the sequences whose mean length fills them")
    compare_at: Literal["equal-tokens", "as-configured"] = Field(
        "equal-tokens", description="equal-tokens: every strategy's optimizer step sized (rows, token budget, "
        "gradient accumulation) to the same expected real tokens, within 5 % of each other (the scenario's step "
        "at the best efficiency any strategy's rows reach; docs/scenarios.md \"Equal footing\"); as-configured: "
        "every strategy at `batch_size` as given, flagged where their real tokens per step differ by over 10 %")
    steps: StrictInt = Field(DEFAULT_STEPS, ge=1, description="simulated training steps per strategy and device count")
    shapes: Literal["new", "seen", "auto"] = Field(
        DEFAULT_SHAPES, description="which steps pay a new batch shape's first-sight cost: new (every variable shape, "
        "a run's first steps), seen (none, steady state) or auto (the average over training_steps)")
    training_steps: StrictInt = Field(DEFAULT_TRAINING_STEPS, ge=1, le=TRAINING_STEPS_MAX, description="steps of the training run being "
                                      "simulated: how often a device meets a batch shape for the first time")
    # Strict: `seed: true` is a mistake, not seed 1.
    seed: StrictInt = Field(DEFAULT_SEED, ge=0, description="seeds every random draw; `--seed` replaces it")
    seeds: StrictInt = Field(1, ge=1, le=SEEDS_MAX, description="whole simulations run with seeds seed, seed+1, "
                             "... on the same packings: the report gives their mean and the spread across them "
                             f"(up to {SEEDS_MAX}; `--seeds` replaces it)")
    outputs: OutputsSpec = Field(OutputsSpec(), description="plots, image formats and LP bounds (see below)")
    quick: QuickSpec = Field(QuickSpec(), description="what `--quick` runs (see below)")
    # Where the scenario was read: its YAML node tree and file, so that a check of one key against another
    # (`simbench.checked`) names the key's line; None for a scenario built in code. Copies keep it.
    _origin: tuple[yaml.Node, str] | None = PrivateAttr(None)

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

    def __eq__(self, other) -> bool:
        # What the scenario says, not where it was read: a report's resolved.yaml equals the file it came from.
        return type(other) is type(self) and self.__dict__ == other.__dict__

    __hash__ = _Strict.__hash__

    def read_from(self, root: yaml.Node, source: str) -> Scenario:
        """This scenario, noted as read from `root`, the YAML node tree of file `source` (errors' lines)."""
        self._origin = (root, source)
        return self

    @property
    def origin(self) -> tuple[yaml.Node, str] | None:
        return self._origin

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
        data = _with_non_finite(self.model_dump(mode="json"), self.model_dump())
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def _with_non_finite(as_json, as_python):
    """`as_json` with the infinities and NaNs JSON has no word for (pydantic writes them as null) put back from
    `as_python`: YAML writes `.inf`, so an override of `.inf` reads back as itself, not as null."""
    if isinstance(as_json, dict) and isinstance(as_python, dict):
        return {key: _with_non_finite(value, as_python.get(key)) for key, value in as_json.items()}
    if isinstance(as_json, list) and isinstance(as_python, (list, tuple)) and len(as_json) == len(as_python):
        return [_with_non_finite(value, original) for value, original in zip(as_json, as_python)]
    if as_json is None and isinstance(as_python, float):
        return as_python
    return as_json
