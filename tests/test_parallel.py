"""4D layouts: the scenario's `parallel` keys and their refusals, a replica's step priced from its microbatches
(reducing to today's data-parallel step with one GPU, the analytic bubble with equal microbatches), the
workload-balanced packer, the bundled 128k scenario end to end, and uneven pipeline stages."""

from pathlib import Path

import numpy as np
import pytest

from simbench.costmodels import TransformerCostModel, load_hardware
from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.errors import InputError, InputErrors
from simbench.experiment import run_experiment
from simbench.histogram import LengthHistogram
from simbench.resolved import resolve
from simbench.scenario import SyntheticHistogram
from simbench.checked import load_checked_scenario as load_scenario, parse_checked_scenarios as parse_scenarios
from simbench.costmodels.layout import ParallelLayout
from simbench.sim.parallel.pipeline import analytic_bubble_fraction, pipeline_step
from simbench.sim.replica import ReplicaCostModel
from simbench.strategies import PackOptions, get_strategy
from simbench.strategies.wlb import predicted_step_work

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
LLAMA = """\
name: layout
dataset: {histogram: {synthetic: lognormal, sequences: 2000, median_length: 2000, sigma: 1.0}, max_length: 8192}
model: llama-3.1-8b
hardware: h100-sxm
strategies: [ffd, wlb]
steps: 5
"""


def errors_of(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(InputErrors) as raised:
        parse_scenarios(text, source="s.yaml", base_dir=tmp_path)
    return [str(error) for error in raised.value.errors]


def test_a_layout_that_cannot_split_the_model_names_each_key_and_the_numbers(tmp_path):
    found = errors_of(tmp_path, LLAMA + "parallel:\n  tp: 3\n  pp: 5\n  cp: 7\n  stage_layers: even\ndevices: [100]\n")
    assert any("s.yaml:12: devices: 100 is not a multiple of tp x pp x cp = 3 x 5 x 7 = 105" in e for e in found)
    assert any("s.yaml:11: parallel.stage_layers: the model's 32 layers do not divide into pp x virtual_stages = "
               "5 x 1" in e for e in found)
    assert any("s.yaml:8: parallel.tp: the model's 32 attention heads do not divide over tp = 3" in e for e in found)
    assert any("parallel.cp: zigzag sharding cuts a row of max_length 8,192 tokens into 2 x cp = 14" in e
               for e in found)


def test_dp_must_agree_with_the_devices_and_gpus_per_replica_with_the_layout(tmp_path):
    found = errors_of(tmp_path, LLAMA + "gpus_per_replica: 8\nparallel: {tp: 8, pp: 2, dp: 4}\ndevices: [32]\n")
    assert any("gpus_per_replica: 8 contradicts `parallel`, whose tp x pp x cp = 16 GPUs" in e for e in found)
    assert any("devices: 32 makes 2 replicas of 16 GPUs, but parallel.dp is 4" in e for e in found)


def test_dp_alone_sets_the_devices_and_a_vts_plan_is_refused(tmp_path):
    (scenario,) = parse_scenarios(LLAMA + "parallel: {tp: 8, pp: 4, dp: 2}\n", source="s.yaml", base_dir=tmp_path)
    assert scenario.devices == (64,) and scenario.replica_devices == (2,)
    found = errors_of(tmp_path, LLAMA.replace("[ffd, wlb]", "[ffd, vts]") + "parallel: {tp: 8, dp: 2}\n")
    assert any("strategies.1: vts runs its own pipeline and cannot run inside a 4D layout" in e for e in found)


@pytest.mark.parametrize("written, key", [("zero_stage: true", "zero_stage"), ("zero_stage: 3.0", "zero_stage"),
                                          ("tp: true", "tp"), ("pp: 2.0", "pp"), ("dp: false", "dp"),
                                          ("microbatches: true", "microbatches"),
                                          ("overlap_gradient_sync: 1", "overlap_gradient_sync")])
def test_a_layout_takes_whole_numbers_and_booleans_as_written_never_converted(tmp_path, written, key):
    # true is no stage 1 and 3.0 no stage 3: each is refused at its own key's line.
    found = errors_of(tmp_path, LLAMA + f"devices: [8]\nparallel:\n  {written}\n")
    assert [e.split(": ")[:2] for e in found] == [[f"s.yaml:{len(LLAMA.splitlines()) + 3}", f"parallel.{key}"]], found


@pytest.mark.parametrize("stage", [True, 3.0, np.float64(2.0)])
def test_a_layout_built_in_python_refuses_a_stage_that_is_no_whole_number(stage):
    with pytest.raises(InputError, match="parallel.zero_stage must be one of 0, 1, 2, 3"):
        ParallelLayout(zero_stage=stage)


def test_a_sweep_axis_of_layouts_refuses_a_boolean_stage_at_its_cell(tmp_path):
    from simbench import sweep as sweeps

    path = tmp_path / "stages.yaml"
    path.write_text("name: stages\nbase:\n" + "".join(f"  {line}\n" for line in LLAMA.splitlines()[1:])
                    + "  devices: [8]\n  batch_size: 2\naxes:\n  parallel.zero_stage: [1, true]\n")
    with pytest.raises(InputError, match=r"cell 1 \(parallel.zero_stage=True\): .*whole number"):
        sweeps.load_sweep(path)


@pytest.mark.parametrize("layout", ["{dp: 1099511627776}", "{dp: 1048576, tp: 2}"])
def test_devices_made_by_dp_are_held_to_the_devices_bound_by_validate_as_by_run(tmp_path, layout):
    from simbench.validation import DEVICES_MAX, check_device_counts

    text = LLAMA.replace("[ffd, wlb]", "[ffd]") + f"batch_size: 2\nparallel: {layout}\n"
    (found,) = errors_of(tmp_path, text)
    assert found.startswith(f"s.yaml:{len(text.splitlines())}: parallel.dp: ") and f"{DEVICES_MAX:,} devices" in found
    # The bound is the one run holds the devices to.
    (scenario,) = parse_scenarios(text.replace(layout, "{dp: 1024, tp: 2}"), source="s.yaml", base_dir=tmp_path)
    assert check_device_counts(scenario.devices) == [2048]
    with pytest.raises(InputError):
        check_device_counts([2 * DEVICES_MAX])


def test_a_layout_over_the_hbm_is_refused_before_simulating_with_its_numbers(tmp_path):
    text = LLAMA.replace("llama-3.1-8b", "llama-3.1-70b").replace("max_length: 8192", "max_length: 131072")
    found = errors_of(tmp_path, text + "memory: refuse\nparallel: {tp: 8, zero_stage: 0, dp: 1}\n")
    (memory,) = [e for e in found if "HBM" in e]
    assert "s.yaml:8: parallel: no strategy fits h100-sxm's 80 GiB of HBM per GPU" in memory
    assert "GiB per GPU on 8 GPUs (ZeRO 0, recompute none); shard the model (parallel: tp, pp)" in memory


def test_without_parallel_nothing_changes():
    run = resolve(load_scenario(SCENARIOS / "squad384.yaml"))
    assert run.layout is None and isinstance(run.cost_model, TransformerCostModel)
    assert run.memory is not None and not run.memory.raised


def test_one_gpu_per_replica_reduces_to_the_data_parallel_step(tmp_path):
    base = "name: dp\ndataset: {histogram: squad_1_1_384}\nstrategies: [spfhp, packed-varlen, token-budget]\n" \
           "devices: [1, 4]\nsteps: 20\nbatch_size: 8\n"
    plain = resolve(parse_scenarios(base, source="a.yaml", base_dir=tmp_path)[0]).simulate().summary
    laid_out = resolve(parse_scenarios(base + "parallel: {zero_stage: 0}\n", source="b.yaml",
                                       base_dir=tmp_path)[0]).simulate().summary
    np.testing.assert_allclose(laid_out.step_seconds_mean, plain.step_seconds_mean, rtol=1e-9)
    np.testing.assert_allclose(laid_out.speedup, plain.speedup, rtol=1e-9)


@pytest.mark.parametrize("stages, microbatches", [(4, 8), (8, 8), (16, 64), (64, 256)])
def test_equal_microbatches_give_the_analytic_bubble(stages, microbatches):
    # A free network and one layer a stage: every microbatch the same padded row, nothing between stages.
    free_network = load_hardware("a100", {"allreduce_latency_seconds": 0.0, "allreduce_bytes_per_s": float("inf")})
    gpu = TransformerCostModel({"layers": stages, "hidden": 1024, "heads": 16, "ffn": 4096}, free_network)
    replica = ReplicaCostModel(gpu, ParallelLayout(pp=stages, microbatches=microbatches))
    rows = np.arange(microbatches)
    batch = BatchSet(np.full(microbatches, 300), rows, np.full(microbatches, 512), np.zeros_like(rows), 1)
    step = replica.replica_steps(batch, ExecutionMode.PADDED)
    # The step ends with the stage's launches; its update follows the gradients' sync (`gradient_sync`).
    pipeline_seconds = step.step_seconds[0] - gpu.fixed_step_seconds_of(layers=1, parameters=0)
    simulated = step.bubble_seconds[0] / pipeline_seconds
    assert simulated == pytest.approx(analytic_bubble_fraction(microbatches, stages), rel=0.01)
    assert abs(step.stall_seconds[0]) < 1e-9 * pipeline_seconds


def test_a_replicas_causes_add_up_to_its_step_and_zigzag_balances_whole_rows():
    gpu = TransformerCostModel("llama-3.1-8b", "h100-sxm")
    rng = np.random.default_rng(1)
    lengths, row = [], []
    for index in range(16):  # packs of 8,192 slots, the last few with padding
        room = 8192 - 500 * (index % 3)
        while room > 0:
            length = min(room, int(rng.integers(100, 4000)))
            lengths.append(length)
            row.append(index)
            room -= length
    batch = BatchSet(np.array(lengths), np.array(row), np.full(16, 8192), np.repeat(np.arange(2), 8), 2)
    for sharding in ("contiguous", "zigzag", "per-document"):
        layout = ParallelLayout(tp=2, pp=4, cp=4, microbatches=4, cp_sharding=sharding)
        for mode in (ExecutionMode.PADDED, ExecutionMode.PACKED_VARLEN):
            step = ReplicaCostModel(gpu, layout).replica_steps(batch, mode)
            causes = sum(values for name, values in step.fields.items() if name != "step_seconds")
            np.testing.assert_allclose(causes, step.step_seconds, rtol=1e-12)
            if mode is ExecutionMode.PADDED:
                assert (step.cp_imbalance_seconds > 0).all() == (sharding == "contiguous")


def test_wlb_never_predicts_more_work_than_token_balanced_packing():
    for max_length, median, sigma in [(512, 150, 0.8), (4096, 400, 1.2), (32768, 16000, 0.5), (131072, 2000, 1.5)]:
        histogram = SyntheticHistogram(synthetic="lognormal", sequences=5000, median_length=median,
                                       sigma=sigma).build(max_length)
        options = PackOptions(attention_parity_tokens=max_length / 2)
        balanced = get_strategy("wlb")(histogram, max_length, None, options)
        by_tokens = get_strategy("ffd")(histogram, max_length, None, options)
        assert predicted_step_work(balanced, max_length / 2) <= predicted_step_work(by_tokens, max_length / 2)
        assert balanced.sequences == histogram.sequences


def test_wlb_keeps_short_sequences_off_the_heavy_packs():
    histogram = LengthHistogram.from_counts([8] + [0] * 4 + [2] + [0] * 2)  # two 6-token sequences, eight of 1
    options = PackOptions(attention_parity_tokens=4)  # a 6-token sequence: 6 + 36 / 4 = 15, a 1-token one 1.25
    balanced = get_strategy("wlb")(histogram, 8, None, options)
    assert [[int(length) for length in row if length] for row in balanced.rows] == [[1] * 8, [6]]
    assert balanced.repeats.tolist() == [1, 2]  # work 10, 15, 15; first-fit decreasing: 17.5, 17.5, 5
    by_tokens = get_strategy("ffd")(histogram, 8, None, options)
    assert predicted_step_work(balanced, 4) < predicted_step_work(by_tokens, 4)


def test_wlb_delays_outliers_unless_told_not_to_and_its_label_says_so():
    from simbench.sim.plans import parse_plan, plan_from_fields

    assert parse_plan("wlb").outlier_delay and parse_plan("packed-varlen:wlb").outlier_delay
    undelayed = plan_from_fields({"name": "packed-varlen", "packer": "wlb", "outlier_delay": False})
    assert undelayed.name == "packed-varlen:wlb:max:outlier_delay=false" and not undelayed.outlier_delay
    assert parse_plan(undelayed.name) == undelayed  # the label reads back as the same plan
    assert not parse_plan("ffd").outlier_delay and undelayed.independent_devices
    assert not parse_plan("wlb").independent_devices  # a step's devices share its kind
    with pytest.raises(InputError, match="outlier_delay is a wlb option"):
        plan_from_fields({"name": "ffd", "outlier_delay": True})
    with pytest.raises(InputError, match="outlier_delay must be true or false, found 'sometimes'"):
        parse_plan("wlb:outlier_delay=sometimes")


def test_a_scenario_turns_the_outlier_delay_off_by_key_and_refuses_a_value_not_true_or_false(tmp_path):
    strategies = "[wlb, {name: wlb, outlier_delay: false}, {name: packed-varlen, packer: wlb, outlier_delay: true}]"
    text = LLAMA.replace("[ffd, wlb]", strategies) + "parallel: {tp: 2, pp: 2, dp: 1, microbatches: 2}\nbatch_size: 1\n"
    (scenario,) = parse_scenarios(text, source="s.yaml", base_dir=tmp_path)
    assert [spec.plan().outlier_delay for spec in scenario.strategies] == [True, False, True]
    assert errors_of(tmp_path, text.replace("outlier_delay: false", "outlier_delay: 3")) == [
        "s.yaml:5: strategies.1.outlier_delay: Input should be a valid boolean"]


def test_outlier_delay_evens_a_replicas_microbatches_and_shortens_its_step():
    """A few documents of most of the context among many short ones: with the delay, no step mixes packs holding a
    long document with packs of short ones, so the pipeline stalls less and the same tokens train faster."""
    from simbench.sim.plans import SimulationSettings, parse_plan

    counts = np.zeros(131072, dtype=np.int64)
    counts[199:600] = 10  # 4,010 documents of 200 to 600 tokens: 1.6M tokens, about 13 full rows
    counts[120_000 - 1] = 20  # and 20 of 120,000 tokens, 3.3 times a full row of short ones' work on an 8B model
    histogram = LengthHistogram.from_counts(counts)
    gpu = TransformerCostModel("llama-3.1-8b", "h100-sxm")
    replica = ReplicaCostModel(gpu, ParallelLayout(pp=4, microbatches=4))
    options = PackOptions(attention_parity_tokens=gpu.attention_parity_tokens)
    packing = get_strategy("wlb")(histogram, 131072, None, options)
    steps = {}
    for text in ("packed-varlen:wlb", "packed-varlen:wlb:outlier_delay=false"):
        plan = parse_plan(text)
        source = plan.source(plan, packing, SimulationSettings(histogram, replica, 4, 400, 0, "auto"))
        costs = source.chunk(400, [1])[1]
        steps[plan.outlier_delay] = costs.total_seconds.sum() / costs.real_tokens.sum()
    assert steps[True] < 0.97 * steps[False]


def test_the_128k_scenario_runs_end_to_end_and_reports_its_layout():
    scenario = load_scenario(SCENARIOS / "llama70b-pretrain-128k.yaml").quickened()
    assert scenario.layout.gpus_per_replica == 2048 and max(scenario.devices) == 16384
    tables = run_experiment(scenario, assumptions=False)
    assert set(tables.scaling["devices"]) == set(scenario.replica_devices)
    parallel = tables.parallel
    assert set(parallel["cp_sharding"]) == {"contiguous", "zigzag", "per-document"}
    assert (parallel["peak_memory_gib"] < parallel["hbm_capacity_gib"]).all()
    # One peak per strategy, the Memory section's: its largest microbatch as it runs, not the scenario's nominal one.
    memory = tables.memory.set_index("strategy")["peak_memory_gib"]
    np.testing.assert_array_equal(parallel["peak_memory_gib"], parallel["strategy"].map(memory))
    assert parallel["peak_memory_gib"].nunique() > 1
    padded = parallel[parallel["strategy"] == "none"].set_index("cp_sharding")
    assert padded.loc["contiguous", "cp_imbalance_seconds"] > 0 == padded.loc["zigzag", "cp_imbalance_seconds"]
    from simbench.report.summary import summary_markdown

    text = summary_markdown(scenario, scenario.dataset.load(), tables)
    assert "**4D answer:** on 16,384 GPUs (8 replicas of TP 8 x PP 16 x CP 16" in text
    assert "### Workload-balanced packing against token-balanced packing" in text
    assert "`wlb` delays documents of at least half the context (a chosen threshold: WLB-LLM states none)" in text


def test_run_writes_the_4d_tables_and_plot_redraws_them(tmp_path):
    from typer.testing import CliRunner

    from simbench.cli import app

    path = tmp_path / "small4d.yaml"
    path.write_text("name: small4d\ndataset: {histogram: squad_1_1_384}\nstrategies: [spfhp, packed-varlen, wlb]\n"
                    "parallel: {tp: 2, pp: 2, cp: 2, microbatches: 4}\ndevices: [8, 32]\nbatch_size: 2\n"
                    "outputs: {plots: [scaling], formats: [svg]}\n")
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(out), "--quick", "--quiet"])
    assert result.exit_code == 0, result.output
    summary = (out / "summary.md").read_text()
    assert "**4D answer:** on 32 GPUs (4 replicas of TP 2 x PP 2 x CP 2" in summary
    assert (out / "parallel.csv").is_file()
    redrawn = CliRunner().invoke(app, ["plot", str(out)])
    assert redrawn.exit_code == 0, redrawn.output


# ------------------------------------------------------------------------------------------ uneven stages

def test_balanced_stages_give_the_first_and_last_chunks_fewer_layers():
    assert ParallelLayout(pp=16).chunk_layers(126) == (7,) + (8,) * 14 + (7,)  # Llama 3's 405B, section 3.3.2
    assert ParallelLayout(pp=4).chunk_layers(80) == (20,) * 4  # layers that divide stay even
    assert ParallelLayout(pp=2, virtual_stages=2).chunk_layers(6) == (1, 2, 2, 1)
    assert ParallelLayout(pp=2, virtual_stages=2).stage_layers_of(6) == (3, 3)  # stage 0 holds chunks 0 and 2
    # One-layer chunks: Llama 3's 7 layers on the first and last stages, their first and last chunks empty.
    eight_chunks = ParallelLayout(pp=16, virtual_stages=8)
    assert eight_chunks.chunk_layers(126) == (0,) + (1,) * 126 + (0,)
    assert eight_chunks.stage_layers_of(126) == (7,) + (8,) * 14 + (7,)
    with pytest.raises(InputError, match="need at least 126"):
        eight_chunks.chunk_layers(125)
    with pytest.raises(InputError, match="parallel.stage_layers: the counts sum to 5 layers, the model has 6"):
        ParallelLayout(pp=2, stage_layers=(2, 3)).chunk_layers(6)


def test_a_126_layer_model_is_accepted_on_pp_16_and_even_stages_are_refused(tmp_path):
    llama405 = LLAMA.replace("llama-3.1-8b", "llama-3.1-405b") + "batch_size: 1\n"
    (scenario,) = parse_scenarios(llama405 + "parallel: {tp: 8, pp: 16, dp: 1}\n", source="s.yaml", base_dir=tmp_path)
    assert scenario.layout.chunk_layers(126)[0] == 7
    found = errors_of(tmp_path, llama405 + "parallel: {tp: 8, pp: 16, dp: 1, stage_layers: even}\n")
    assert any("parallel.stage_layers: the model's 126 layers do not divide into pp x virtual_stages = 16 x 1" in e
               for e in found)
    found = errors_of(tmp_path, llama405 + "parallel: {tp: 8, pp: 2, dp: 1, stage_layers: [60, 60]}\n")
    assert any("parallel.stage_layers: the counts sum to 120 layers, the model has 126" in e for e in found)


def test_uneven_stages_run_the_pipeline_on_each_stages_layers():
    # Hand-computed: a 3-layer encoder (no output layer) on 2 stages holding 1 and 2 layers, 2 equal microbatches,
    # a free network. One layer of a microbatch takes t (forward t / 3, backward 2t / 3): stage 0 runs t, stage 1
    # 2t a microbatch. 1F1B: F0 on stage 0 ends at t/3, on stage 1 at t; B0 on stage 1 at 7t/3 (stage 0's F1 ended
    # at 2t/3), on stage 0 at 3t; stage 1's F1 (its input long there) at 3t, B1 at 13t/3, stage 0's B1 at 5t.
    free_network = load_hardware("a100", {"allreduce_latency_seconds": 0.0, "allreduce_bytes_per_s": float("inf")})
    gpu = TransformerCostModel({"layers": 3, "hidden": 1024, "heads": 16, "ffn": 4096}, free_network)
    rows = np.arange(2)
    batch = BatchSet(np.full(2, 300), rows, np.full(2, 512), np.zeros_like(rows), 1)
    one_microbatch = BatchSet(np.full(1, 300), np.zeros(1, dtype=int), np.full(1, 512), np.zeros(1, dtype=int), 1)
    costs = gpu.step_costs(one_microbatch, ExecutionMode.PADDED)
    t = float(costs.compute_seconds[0] + costs.padding_seconds[0] + costs.masked_attention_seconds[0]
              + max(costs.overhead_seconds[0] - gpu.fixed_step_seconds, 0.0)) / 3
    replica = ReplicaCostModel(gpu, ParallelLayout(pp=2, microbatches=2, stage_layers=(1, 2)))
    step = replica.replica_steps(batch, ExecutionMode.PADDED)
    fixed = gpu.fixed_step_seconds_of(layers=2, parameters=0)  # the heavier stage's launches; no update
    assert step.step_seconds[0] == pytest.approx(5 * t + fixed, rel=1e-9)
    # The busy causes are the mean stage's, 3t over the two microbatches; the rest of the step is idle.
    assert step.bubble_seconds[0] + step.stall_seconds[0] == pytest.approx(2 * t, rel=1e-9)


def test_a_decoders_output_layer_runs_on_the_last_chunk():
    gpu = TransformerCostModel("llama-3.1-8b", "h100-sxm")
    rows = np.arange(4)
    batch = BatchSet(np.full(4, 4096), rows, np.full(4, 4096), np.zeros_like(rows), 1)
    seen = {}

    def recording(forward, backward, **options):
        seen["forward"] = np.array(forward)
        return pipeline_step(forward, backward, **options)

    import simbench.sim.replica as replica_module
    original = replica_module.pipeline_step
    replica_module.pipeline_step = recording
    try:
        ReplicaCostModel(gpu, ParallelLayout(pp=4, microbatches=4)).replica_steps(batch, ExecutionMode.PADDED)
    finally:
        replica_module.pipeline_step = original
    forward = seen["forward"][0, 0]
    model = gpu.model
    head_share = 2 * model.hidden * model.vocab / model.forward_linear_flops_per_token
    assert forward[0] == pytest.approx(forward[1]) and forward[1] == pytest.approx(forward[2])
    # The last chunk's extra is the LM head: its share of the dense work, which the even chunks do not hold.
    assert forward[3] > forward[0] * (1 + 0.5 * head_share * 4)


def test_memory_follows_each_stages_layers():
    from simbench.costmodels.memory import activation_bytes_per_token, peak_memory

    layout = ParallelLayout(tp=8, pp=16, microbatches=16, zero_stage=1, recompute="none")
    memory = peak_memory("llama-3.1-405b", layout, tokens_per_microbatch=8192, replicas=128)
    # Stage 1 holds a layer more than stage 0 and one microbatch fewer in flight: 8 x 15 > 7 x 16.
    assert memory.stage == 1 and memory.in_flight_microbatches == 15
    per_token = activation_bytes_per_token("llama-3.1-405b", "none")
    assert memory.activation_bytes == pytest.approx(15 * 8 * per_token * 8192 / 8)
    with pytest.raises(InputError, match="do not divide into pp x virtual_stages = 16 x 1 = 16 equal pipeline chunks"):
        peak_memory("llama-3.1-405b", ParallelLayout(tp=8, pp=16, stage_layers="even"), tokens_per_microbatch=8192)


def test_the_405b_128k_scenario_puts_llama_3s_layers_on_its_stages():
    # Loading checks the layout and its memory; the run itself is the 70B scenario's (tested above, quickened).
    scenario = load_scenario(SCENARIOS / "llama405b-pretrain-128k.yaml")
    layout = scenario.layout
    assert layout.stage_layers_of(126) == (7,) + (8,) * 14 + (7,) and layout.gpus_per_replica == 2048
    assert max(scenario.devices) == 16384


def test_outlier_delay_at_a_million_devices_refuses_quickly_and_says_how_to_draw_them_directly():
    from simbench.histogram import load_histogram
    from simbench.sim.simulate import simulate

    histogram = load_histogram("squad_1_1_384")
    model = TransformerCostModel("bert-large", "a100")
    with pytest.raises(InputError, match="outlier_delay: false lets its devices draw independently"):
        simulate(histogram, ["wlb"], [1, 2**20], model, batch_size=32, steps=5, seed=0)
    undelayed = simulate(histogram, ["wlb:outlier_delay=false"], [1, 2**20], model, batch_size=32, steps=5, seed=0)
    assert 2**20 in set(undelayed.summary["devices"])


def test_a_one_gpu_layout_reads_in_the_singular_without_a_cp_sharding_and_progress_counts_replicas(tmp_path):
    from simbench.report.summary import summary_markdown

    text = ("name: words\ndataset: {histogram: squad_1_1_384}\nstrategies: [spfhp, wlb]\ndevices: [1, 2]\n"
            "batch_size: 2\nsteps: 4\noutputs: {lp_bounds: false}\nparallel: {zero_stage: 3}\n")
    (scenario,) = parse_scenarios(text, source="s.yaml", base_dir=tmp_path)
    tables = run_experiment(scenario, assumptions=False)
    summary = summary_markdown(scenario, scenario.dataset.load(), tables)
    assert "(1 GPU a replica), 1 microbatch, no context parallelism" in summary
    assert "1 GPUs" not in summary and "1 microbatches" not in summary and "zigzag" not in summary
    assert "| none (CP 1) (run) |" in summary and "| -0.0 |" not in summary
    # Two GPUs a replica: the progress lines count replicas and say their GPUs.
    (scenario,) = parse_scenarios(text.replace("{zero_stage: 3}", "{pp: 2, microbatches: 2}").replace(
        "devices: [1, 2]", "devices: [2, 8]"), source="s.yaml", base_dir=tmp_path)
    lines = []
    run_experiment(scenario, stage=lines.append, assumptions=False)
    simulated = [line for line in lines if line.startswith("simulated")]
    assert simulated and all(line.endswith("on 1, 4 replicas (2 to 8 GPUs)") for line in simulated)
    assert lines[-1] == "priced a replica's step by cause under every CP sharding"


def test_a_negative_pipeline_stall_is_explained_and_a_rounding_zero_reads_zero():
    import pandas as pd

    from simbench.report.parallel import _negative_stall_note
    from simbench.report.precision import milliseconds_text

    assert milliseconds_text(-4.4e-13) == "0.0" and milliseconds_text(-0.44) == "-0.4"
    assert milliseconds_text(1.26) == "1.3" and milliseconds_text(163.77) == "163.8"
    # no more than four significant digits: a step of 20.66 s is not known to the microsecond
    assert milliseconds_text(20658.9) == "20,660" and milliseconds_text(2776.44) == "2,776"
    assert _negative_stall_note(pd.DataFrame({"stall_seconds": [0.2, -4.4e-16]})) == ""
    assert "1F1B fills" in _negative_stall_note(pd.DataFrame({"stall_seconds": [0.2, -0.00044]}))
    # The cause, not rounding: 1F1B with its short microbatches at the fill and drain beats equal ones.
    forward = np.array([0.45, 0.90, 0.82, 0.65])[:, None].repeat(3, axis=1)
    step = pipeline_step(forward, 2 * forward, schedule="1f1b")
    assert float(step.stall_seconds) < -0.5
