"""simbench against every published figure it is compared with, each marked fitted or predicted.

    >>> from simbench.validation_runs import validation_table
    >>> table = validation_table(simulations=False)
    >>> sorted(set(table["kind"]))
    ['fitted', 'predicted']

A figure is "fitted" when a parameter of simbench was chosen or fitted on that very figure (its error
says only that the fit worked; it is never a reproduction), "predicted" when nothing was tuned to it;
a prediction reproduces when it is within its row's tolerance. Every simbench figure is computed when
the table is built (packings, simulations, log fits); published figures are quoted from their sources.
`simbench.report.validation_table` formats the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

MLPERF_LOGS = {gpus: f"nvidia_v0.7_dgxa100{suffix}_ngc20.06_pytorch_bert_result_0.txt.gz"
               for gpus, suffix in ((8, ""), (16, "_n2"), (256, "_n32"))}
PACKING_PAPER = "Krell et al. 2021 (arXiv 2107.02027)"
# A100 padded phase-2 measurements independent of the MLPerf logs, both NVIDIA DeepLearningExamples READMEs,
# both in the 20.06 containers the MLPerf v0.7 logs used, 8 GPUs of a DGX A100 40GB, sequence length 512,
# mixed precision, 16 rows per micro-step over 256 accumulation steps, every row padded to 512:
# - PyTorch/LanguageModeling/BERT/README.md at commit 78ec6802 (2021-08-26), table "Pre-training NVIDIA DGX
#   A100 (8x A100 40GB)": 620 sequences/s; batch 4096 per GPU over 256 accumulation steps (run_pretraining.py
#   divides the batch by the accumulation steps).
# - TensorFlow/LanguageModeling/BERT/README.md at commit 729963dd, table "Pre-training training performance:
#   single-node on DGX A100 40GB": 572.112 sentences/s, batch 16 per GPU, gradient accumulation 256.
INDEPENDENT_PADDED_RUNS = {
    "PyTorch": dict(sequences_per_s=620.0, gpus=8, per_gpu_batch=16, accumulation_steps=256, max_length=512,
                    source="NVIDIA DeepLearningExamples BERT (PyTorch) README, DGX A100 40GB pre-training "
                           "phase 2, 8 GPUs"),
    "TensorFlow": dict(sequences_per_s=572.112, gpus=8, per_gpu_batch=16, accumulation_steps=256, max_length=512,
                       source="NVIDIA DeepLearningExamples BERT (TensorFlow) README, DGX A100 40GB pre-training "
                              "phase 2, 8 GPUs"),
}

# The same MLPerf v0.7 BERT code and 20.06 container on V100s (mlcommons/training_results_v0.7 at commit c6640611,
# NVIDIA/results/<system>/bert/result_0.txt, the run number the A100 logs use): simbench's log reader's median of
# the per-step seq/s after step 50 and its coefficient of variation. Like the A100 runs, NVIDIA ran un-padded on
# one node (DGX-2H, 16 V100s, --unpad, 27 per GPU) and padded at scale (32 DGX-2H, 512 V100s, 18 per GPU).
V100_MLPERF_RUNS = {
    "un-padded": dict(source="NVIDIA MLPerf v0.7 BERT log, DGX-2H, 16 V100 (dgx2h_ngc20.06_pytorch, result_0)",
                      gpus=16, per_gpu_batch=27, unpadded=True, median_sequences_per_s=1089.81, cv=0.0802),
    "padded": dict(source="NVIDIA MLPerf v0.7 BERT log, 32 DGX-2H, 512 V100 (dgx2h_n32_ngc20.06_pytorch, result_0)",
                   gpus=512, per_gpu_batch=18, unpadded=False, median_sequences_per_s=25717.44, cv=0.0480),
}


@dataclass(frozen=True)
class Claim:
    quantity: str
    source: str
    fitted_on: str  # what simbench's parameters were fitted on ("" when nothing was)
    simbench: float
    published: float | None  # None: a prediction with no published counterpart (it neither reproduces nor misses)
    tolerance_percent: float  # a prediction within it reproduces

    def row(self) -> dict:
        fitted = self.fitted_on.startswith("this figure")
        error = float("nan") if self.published is None else 100 * (self.simbench / self.published - 1)
        reproduces = "" if fitted or self.published is None else ("yes" if abs(error) <= self.tolerance_percent else "no")
        return {"quantity": self.quantity, "source": self.source, "fitted on": self.fitted_on or "nothing",
                "simbench": self.simbench, "published": float("nan") if self.published is None else self.published,
                "error %": error, "kind": "fitted" if fitted else "predicted", "reproduces": reproduces}


def validation_table(mlperf_dir: str | Path | None = None, *, simulations: bool = True) -> pd.DataFrame:
    """One row per compared figure: quantity, source, fitted on, simbench, published, error %, status.

    `mlperf_dir` holds NVIDIA's MLPerf v0.7 BERT logs (their rows are left out without it);
    `simulations=False` leaves out the rows that need a simulation (VTS, seconds each).
    """
    import pandas as pd

    claims = [*_packing_claims(), *_ipu_claims(), *_straggler_claims(), *_unpadding_claims()]
    if simulations:
        claims += _vts_claims() + _four_d_claims() + _llama3_mfu_claims()
    if mlperf_dir is not None and all((Path(mlperf_dir) / name).is_file() for name in MLPERF_LOGS.values()):
        claims += _mlperf_claims(Path(mlperf_dir))
    return pd.DataFrame([claim.row() for claim in claims])


def _packing_claims() -> list[Claim]:
    """Packers are pure algorithms: nothing in them is fitted to the paper's results."""
    from simbench.histogram import load_histogram
    from simbench.strategies import get_strategy

    wikipedia, squad = load_histogram("wikipedia_512"), load_histogram("squad_1_1_384")
    spfhp = get_strategy("spfhp")
    claims = [Claim(f"Wikipedia 512 SPFHP depth {label} efficiency %", f"{PACKING_PAPER}, Table 1", "",
                    100 * spfhp(wikipedia, 512, depth).efficiency, published, 0.1)
              for label, depth, published in (("2", 2, 80.5), ("3", 3, 89.4), ("4", 4, 93.9), ("8", 8, 98.9),
                                              ("max", None, 99.6))]
    claims.append(Claim("Wikipedia 512 LPFHP depth 12 efficiency %", "Graphcore packedBERT README", "",
                        100 * get_strategy("lpfhp")(wikipedia, 512, 12).efficiency, 99.81, 0.1))
    claims += [Claim(f"SQuAD 384 SPFHP depth {label} packs", f"{PACKING_PAPER}, Table 5", "",
                     float(spfhp(squad, 384, depth).packs_total), published, 0.0)
               for label, depth, published in (("2", 2, 45335), ("max", None, 40711))]
    return claims


def _ipu_claims() -> list[Claim]:
    """The IPU preset's packing overhead is a line through these very rows: fitted, not reproduced."""
    from simbench.costmodels.hardware import HARDWARE_PRESETS
    from simbench.histogram import load_histogram
    from simbench.strategies import get_strategy

    ipu = HARDWARE_PRESETS["ipu-m2000"]
    wikipedia = load_histogram("wikipedia_512")
    claims = []
    for depth, published in ((2, 1.544), (3, 1.716), (4, 1.803), (8, 1.895)):
        packing = get_strategy("spfhp")(wikipedia, 512, depth)
        share = ipu.pack_overhead_fraction + ipu.pack_overhead_per_depth_fraction * packing.depth_used
        claims.append(Claim(f"IPU realized speed-up, SPFHP depth {depth} (packing factor x (1 - overhead))",
                            f"{PACKING_PAPER}, Table 1",
                            "this figure's row: the ipu-m2000 overhead line is fitted to Table 1's overheads",
                            packing.packing_factor * (1 - share), published, 0.5))
    return claims


def _straggler_claims() -> list[Claim]:
    """From the paper's own 8-GPU Gumbel fit: the single-device Gumbel and cluster means it implies."""
    from simbench.sim.stragglers import gumbel

    fit_source = "the paper's 8-GPU fit (location 1.6038, scale 0.1288)"
    single = gumbel.single_device_from_cluster(gumbel.PAPER_LOCATION, gumbel.PAPER_SCALE, gumbel.PAPER_DEVICES)
    claims = [Claim("single-GPU Gumbel location", f"{PACKING_PAPER}, appendix E text", fit_source,
                    single.location, 1.94, 1.0),
              Claim("single-GPU Gumbel scale", f"{PACKING_PAPER}, appendix E text", fit_source,
                    single.scale, 0.108, 1.0)]
    for devices, published, words in ((32, 1.5, "drops to 50 %"), (2048, 1.3, "only 30 %")):
        claims.append(Claim(f"mean un-padding speed-up on {devices} GPUs (\"{words}\")",
                            f"{PACKING_PAPER}, appendix E", fit_source,
                            gumbel.expected_min_speedup(single.location, single.scale, devices), published, 2.0))
    return claims


def _unpadding_claims() -> list[Claim]:
    from simbench.costmodels import BatchSet, ExecutionMode, TransformerCostModel
    from simbench.histogram import load_histogram

    lengths = load_histogram("wikipedia_512").sample_lengths(56 * 200, np.random.default_rng(0))
    rows = np.arange(lengths.size)
    batches = BatchSet(lengths, rows, np.full(lengths.size, 512), rows // 56, 200)
    model = TransformerCostModel("bert-large", "a100")
    padded = model.step_costs(batches, ExecutionMode.PADDED).total_seconds.sum()
    unpadded = model.step_costs(batches, ExecutionMode.UNPADDED).total_seconds.sum()
    return [Claim("un-padding over padding, 1 A100, batch 56 (Baidu's also has kernel fusion)",
                  "Baidu, MLPerf v2.0 BERT post", "", padded / unpadded, 2.3, 5.0)]


# WLB-LLM (OSDI '25, arXiv 2503.17924), section 7 on its Llama-2-7B-like model, over Plain-4D (the loader's packing,
# per-sequence CP sharding). Section 7.3 (Figure 13's text) on 7B-128K (TP 8, CP 2, PP 4, DP 1 on 64 H100s,
# Table 1): per-document sharding alone 1.02x, variable-length packing with outlier delay alone 1.28x, both 1.33x;
# section 7.2: 64K contexts gain 1.15x on average (over four model sizes; 7B-64K runs TP 4, CP 2, PP 4, DP 1), and
# all eight configurations of Table 1 1.23x on average, of which simbench can run the two 7B ones (the other
# models' dimensions are not stated).
# docs/validation-4d.md quotes them with what the paper leaves unsaid.
WLB_LLM_SOURCE = "WLB-LLM (arXiv 2503.17924)"
WLB_LLM_ROWS = (
    # (what, context, tp, baseline (packer, sharding), balanced (packer, sharding), published, where it is stated)
    ("wlb + outlier delay + per-document CP over token packing + per-sequence CP", 131072, 8,
     ("ffd", "zigzag"), ("wlb", "per-document"), 1.33, "7B-128K, Figure 13 text"),
    ("per-document CP alone (token packing)", 131072, 8,
     ("ffd", "zigzag"), ("ffd", "per-document"), 1.02, "7B-128K, Figure 13 text"),
    ("wlb + outlier delay alone (per-sequence CP)", 131072, 8,
     ("ffd", "zigzag"), ("wlb", "zigzag"), 1.28, "7B-128K, Figure 13 text"),
    ("wlb + outlier delay + per-document CP at 64K (paper: average of 4 model sizes)", 65536, 4,
     ("ffd", "zigzag"), ("wlb", "per-document"), 1.15, "64K average, section 7.2"),
)
# Table 2, 7B-128K: imbalance degree (largest microbatch's forward latency x PP / the step's total forward latency)
# of the original packing and of WLB-LLM with one outlier queue.
WLB_LLM_IMBALANCE = (("token packing (Plain-4D)", "ffd", False, 1.44), ("wlb + one outlier queue", "wlb", True, 1.24))
WLB_LLM_AVERAGE = 1.23


def _four_d_claims() -> list[Claim]:
    """WLB-LLM's speed-ups predicted by a replica's step (`sim.replica_breakdown`, as a 4D report prices
    its strategies): `wlb` packs with outlier delay against first-fit decreasing's full rows, both with
    document-masked attention, under per-sequence (zigzag) or per-document CP sharding; and Table 2's imbalance
    degrees. Nothing is fitted to these figures. Plain-4D is taken as full rows balanced on tokens (`ffd`): its
    greedy fixed-length re-packing, Fixed-4D, gains only 1.03x over it, which rows left a quarter empty (as
    next-fit leaves these lengths) would not allow. Assumed, as the paper does not state them: Llama-2-7B's
    dimensions, the bundled 128k scenario's synthetic document lengths (cut at each context), 4 microbatches a
    step (global batch = PP x DP with DP 1), no interleaving or recomputation, and one outlier queue from half
    the context (`strategies.wlb.outlier_threshold`)."""
    rows, speeds, both_mechanisms = [], {}, []
    for what, context, tp, baseline, balanced, published, where in WLB_LLM_ROWS:
        if (context, tp) not in speeds:
            speeds[context, tp] = _wlb_llm_replica_speeds(context, tp)
        speedup = speeds[context, tp][balanced] / speeds[context, tp][baseline]
        rows.append(Claim(f"{what}, 7B (TP {tp}, CP 2, PP 4), one replica", f"{WLB_LLM_SOURCE}, {where}", "",
                          speedup, published, 10.0))
        if balanced == ("wlb", "per-document"):
            both_mechanisms.append(speedup)
    rows.append(Claim("wlb + outlier delay + per-document CP, mean of 7B-64K and 7B-128K (paper: mean of its 8 "
                      "configurations, 550M to 70B)", f"{WLB_LLM_SOURCE}, section 7.2", "", float(np.mean(both_mechanisms)),
                      WLB_LLM_AVERAGE, 10.0))
    for what, packer, delay, published in WLB_LLM_IMBALANCE:
        rows.append(Claim(f"imbalance degree, {what}, 7B-128K, predicted dense + attention work",
                          f"{WLB_LLM_SOURCE}, Table 2", "", _wlb_llm_imbalance(packer, delay), published, 10.0))
    return rows


def _llama2_7b_on_h100():
    from simbench.costmodels import TransformerCostModel

    llama2_7b = {"layers": 32, "hidden": 4096, "heads": 32, "ffn": 11008, "vocab": 32000, "max_positions": 131072,
                 "family": "decoder", "gated_mlp": True, "positions": "rotary", "tied_embeddings": False,
                 "biases": "none", "norm": "rmsnorm"}
    return TransformerCostModel(llama2_7b, "h100-sxm")


def _wlb_llm_histogram(context: int):
    from simbench.scenario import load_scenario

    scenario = Path(__file__).parent / "data" / "scenarios" / "llama70b-pretrain-128k.yaml"
    return load_scenario(scenario).dataset.histogram.build(context)


def _wlb_llm_imbalance(packer: str, delay: bool, microbatches: int = 4, steps: int = 20_000) -> float:
    """Table 2's imbalance degree, the mean over steps of the largest microbatch's work x microbatches / the step's
    work, with each row's work predicted as `wlb` predicts it (dense + attention), steps drawn as the simulator
    draws them (one row a microbatch)."""
    from simbench.sim.batching import OutlierDelaySampler, PackSampler
    from simbench.strategies import PackOptions, get_strategy
    from simbench.strategies.wlb import outlier_threshold, pack_work

    gpu, context = _llama2_7b_on_h100(), 131072
    parity = gpu.attention_parity_tokens
    packing = get_strategy(packer)(_wlb_llm_histogram(context), context, None,
                                   PackOptions(seed=0, attention_parity_tokens=parity))
    work = pack_work(packing, parity)
    sampler = OutlierDelaySampler(packing, outlier_threshold(context)) if delay else PackSampler(packing)
    step_work = work[sampler.picks(np.random.default_rng(0), steps, 1, microbatches).reshape(steps, microbatches)]
    return float(np.mean(step_work.max(axis=1) * microbatches / step_work.sum(axis=1)))


def _wlb_llm_replica_speeds(context: int, tp: int) -> dict[tuple[str, str], float]:
    """Real tokens per second per GPU of one WLB-LLM 7B replica at `context`, per (packer, CP sharding)."""
    from simbench.costmodels.layout import ParallelLayout
    from simbench.sim.plans import parse_plan
    from simbench.sim.replica import ReplicaCostModel
    from simbench.sim.replica_breakdown import replica_breakdown
    from simbench.strategies import PackOptions, get_strategy

    gpu, histogram = _llama2_7b_on_h100(), _wlb_llm_histogram(context)
    layout = ParallelLayout(tp=tp, cp=2, pp=4, microbatches=4, recompute="none")
    options = PackOptions(seed=0, batch_size=layout.microbatches, attention_parity_tokens=gpu.attention_parity_tokens)
    plans = [parse_plan(f"packed-varlen:{packer}") for packer in ("ffd", "wlb")]
    packings = {plan.name: get_strategy(plan.packer)(histogram, context, None, options) for plan in plans}
    table = replica_breakdown(histogram, plans, packings, ReplicaCostModel(gpu, layout), layout.microbatches, seed=0,
                              steps=400)
    return {(plan.packer, sharding): speed for plan in plans for (name, sharding), speed in
            table.set_index(["strategy", "cp_sharding"])["tokens_per_s_per_gpu"].items() if name == plan.name}


# Llama 3 (arXiv 2407.21783), section 3.3.2, Table 4: 405B pre-training at sequence 8,192 on 16,384 H100s as
# TP 8, CP 1, PP 16, DP 128, 16 sequences per DP group (16M tokens a step): 400 TFLOPs/GPU, 41 % BF16 MFU.
LLAMA3_405B_8K = dict(gpus=16_384, tp=8, pp=16, dp=128, sequence_tokens=8192, sequences_per_replica=16,
                      tflops_per_gpu=400.0, mfu=0.41,
                      source="Llama 3 (arXiv 2407.21783), Table 4, 405B at 8K on 16,384 H100s")
# H100 SXM's dense BF16 peak without sparsity (NVIDIA H100 datasheet), the denominator of Llama 3's MFU.
H100_BF16_PEAK_FLOPS_PER_S = 989e12


def model_flops_per_token(model, sequence_tokens: int) -> float:
    """Training FLOPs per token as MFU counts them (PaLM, Chowdhery et al. 2022, appendix B): 6 N for the weights'
    forward and backward plus 12 L h T for attention over T tokens, non-causal as that formula counts it (the
    same accounting as Megatron-LM's 72 B s l h^2 (1 + s / 6h + V / 12 h l), Narayanan et al. 2021, section 5.1)."""
    return 6 * model.parameters + 12 * model.layers * model.hidden * sequence_tokens


def _llama3_mfu_claims() -> list[Claim]:
    """Llama 3's absolute throughput at 8K on 16,384 GPUs, predicted from one replica's step plus the gradients'
    synchronisation over 128 replicas and the optimizer update of each GPU's ZeRO-1 shard, all after the step
    (the layout's default: no overlap, as Megatron-LM runs by default), on the h100-sxm preset's rates as its
    provenance gives them (nothing fitted here). The paper (section 3.3.2) runs an interleaved 1F1B schedule with V stages a rank, its bubble
    (PP - 1) / (V M), and the balanced 7, 8 x 14, 7 layer split, but states no V: the prediction takes the
    bundled 128k scenarios' rule, one layer a chunk (V = 8 here), set for those scenarios before this comparison.
    The schedule decides most of the answer: V = 1, 2, 4, 8 give 243, 322, 376, 406 TFLOPs/GPU, so a row without
    interleaving is kept beside it. Also assumed, as Table 4 does not state them: one 8,192-token sequence a
    microbatch (16 a step), every row one causal sequence (no document mask), ZeRO stage 1, no recomputation."""
    run = LLAMA3_405B_8K
    from simbench.costmodels.model import get_model

    one_layer_a_chunk = -(-get_model("llama-3.1-405b").layers // run["pp"])  # 126 layers on 16 ranks: 8 a rank
    interleaved, plain = (_llama3_tflops_per_gpu(virtual_stages) for virtual_stages in (one_layer_a_chunk, 1))
    layout_name = "405B at 8K, 16,384 H100s (TP 8, PP 16, DP 128), 16M tokens a step"
    schedule = f"interleaved 1F1B, one layer a chunk (V = {one_layer_a_chunk}; the paper states no V)"
    return [Claim(f"TFLOPs/GPU, {layout_name}, {schedule}", run["source"], "", interleaved / 1e12,
                  run["tflops_per_gpu"], 10.0),
            Claim(f"BF16 MFU, {layout_name}, {schedule}", run["source"], "",
                  interleaved / H100_BF16_PEAK_FLOPS_PER_S, run["mfu"], 10.0),
            Claim(f"TFLOPs/GPU, {layout_name}, 1F1B without interleaving (the schedule's sensitivity)",
                  run["source"], "", plain / 1e12, run["tflops_per_gpu"], 10.0)]


def _llama3_tflops_per_gpu(virtual_stages: int) -> float:
    """Model FLOP/s per GPU of Llama 3's 8K layout with `virtual_stages` interleaved chunks a pipeline rank."""
    from simbench.costmodels import ExecutionMode, TransformerCostModel
    from simbench.costmodels.base import BatchSet
    from simbench.costmodels.layout import ParallelLayout
    from simbench.sim.replica import ReplicaCostModel

    run = LLAMA3_405B_8K
    gpu = TransformerCostModel("llama-3.1-405b", "h100-sxm")
    layout = ParallelLayout(tp=run["tp"], pp=run["pp"], microbatches=run["sequences_per_replica"],
                            virtual_stages=virtual_stages, zero_stage=1, recompute="none")
    replica = ReplicaCostModel(gpu, layout)
    rows, tokens = run["sequences_per_replica"], run["sequence_tokens"]
    index = np.arange(rows)
    step = replica.replica_steps(BatchSet(np.full(rows, tokens), index, np.full(rows, tokens), np.zeros_like(index), 1),
                                 ExecutionMode.PADDED)
    replica_seconds = float(step.step_seconds[0])
    step_seconds = replica_seconds + float(replica.gradient_sync(run["dp"]).added_seconds(replica_seconds))
    step_flops = model_flops_per_token(gpu.model, tokens) * rows * tokens * run["dp"]
    return step_flops / step_seconds / run["gpus"]


def _vts_claims() -> list[Claim]:
    """A 24-stage layer pipeline on one CS-2 (inputs from the VTS post and the stated cs-2 assumptions);
    simbench's model is BERT-large on every dataset, Cerebras' was Transformer-large on WMT14. Cerebras'
    BERT figures were measured on Open Web Text at 512, so they are compared on the histogram modelled
    from its published statistics (simbench.openwebtext); Wikipedia 512 has no published VTS figure."""
    from simbench.histogram import load_histogram
    from simbench.resolved import Run
    from simbench.scenario import SyntheticHistogram

    wmt_like = SyntheticHistogram(synthetic="lognormal", sequences=4_500_000, median_length=27.8, sigma=0.6).build(256)
    cerebras = "Cerebras VTS post, 2022"
    claims = []
    for histogram, label, source, plans in (
            (wmt_like, "WMT-like (87 % padding)", cerebras, (("vts", 5.0),)),
            (load_histogram("openwebtext_512"), "Open Web Text 512 (modelled from published statistics)",
             f"{cerebras}, BERT-large on Open Web Text at 512", (("vts", 1.2), ("vts-bucketed", 1.4))),
            (load_histogram("wikipedia_512"), "Wikipedia 512", "none published (Cerebras measured Open Web Text)",
             (("vts", None), ("vts-bucketed", None)))):
        # VTS is over its own padded pipeline: no other baseline to draw.
        run = Run.from_options(histogram, [plan for plan, _ in plans], [1], model="bert-large", hardware="cs-2",
                               batch_size=512, steps=20, seed=0, baseline="none")
        result = run.simulate()
        speedups = result.summary.set_index("strategy")["speedup"]
        claims += [Claim(f"{plan} speed-up, {label}, BERT-large, 24 stages, FIFO 1", source, "", float(speedups[plan]),
                         published, 10.0) for plan, published in plans]
    return claims


def _mlperf_claims(folder: Path) -> list[Claim]:
    from simbench.calibrate.logfit import fit_logs
    from simbench.sim.stragglers.mlperf_logs import read_training_log

    runs = {gpus: read_training_log(folder / name) for gpus, name in MLPERF_LOGS.items()}
    table = fit_logs([runs[8]], [runs[16], runs[256]]).table.set_index(["gpus", "quantity"])
    source = "NVIDIA MLPerf v0.7 BERT log, {} GPUs"
    fit_8 = "the 8-GPU log (un-padded efficiency, noise)"
    claims = []
    for gpus, quantity, fitted_on, tolerance in (
            (8, "median seq/s", "this figure: un-padded efficiency fitted on it", 0),
            (8, "CV of seq/s", "this figure: un-padded noise fitted on it", 0),
            (16, "median seq/s", fit_8, 10), (16, "per-GPU scaling", fit_8, 10), (16, "CV of seq/s", fit_8, 20),
            (256, "median seq/s", "this figure: the a100 preset's padded achieved fractions were chosen on it", 5)):
        row = table.loc[(gpus, quantity)]
        claims.append(Claim(f"{quantity}, {gpus} GPUs {row['execution']}", source.format(gpus), fitted_on,
                            float(row["simbench"]), float(row["measured"]), tolerance))
    return (claims + _group_curve_claims(runs[8], runs[16]) + _independent_padded_claims(runs[256])
            + _cross_generation_claims(runs))


def _group_curve_claims(run_8, run_16) -> list[Claim]:
    """The un-padded logs with un-padding priced per length group: the group curve and the noise fitted
    on the 8-GPU log (no flat un-padded fraction), the 16-GPU log's smaller per-GPU batch predicted."""
    from simbench.calibrate.logfit import fit_logs

    fit = fit_logs([run_8], [run_16], free=("unpad_group_half_saturation_tokens", "unpadded_noise_cv"))
    table = fit.table.set_index(["gpus", "quantity"])
    source = "NVIDIA MLPerf v0.7 BERT log, {} GPUs"
    fit_8 = (f"the 8-GPU log (group half saturation {fit.fitted['unpad_group_half_saturation_tokens']:,.0f} "
             f"tokens, noise)")
    claims = []
    for gpus, quantity, fitted_on, tolerance in (
            (8, "median seq/s", "this figure: the group curve fitted on it", 0),
            (16, "median seq/s", fit_8, 10), (16, "per-GPU scaling", fit_8, 10)):
        row = table.loc[(gpus, quantity)]
        claims.append(Claim(f"{quantity}, {gpus} GPUs un-padded, priced per length group", source.format(gpus),
                            fitted_on, float(row["simbench"]), float(row["measured"]), tolerance))
    return claims


def _independent_padded_claims(run_256) -> list[Claim]:
    """The 256-GPU padded log predicted with the a100 rates fitted on another source's padded run."""
    from simbench.calibrate.logfit import fit_logs
    from simbench.calibrate.ratefit import PublishedThroughput, fit_padded_rates

    claims = []
    for framework, run in INDEPENDENT_PADDED_RUNS.items():
        published = PublishedThroughput(**run)
        fit = fit_padded_rates(published, hardware="a100", model="bert-large")
        predicted = fit_logs([run_256], free=(), hardware=fit.profile).table.set_index("quantity").loc["median seq/s"]
        fitted_on = (f"the DeepLearningExamples {framework} 8-GPU figure: the a100 dense and attention rates scaled "
                     f"by {fit.rate_scale:.3f} to match it")
        claims += [Claim(f"seq/s, 8 GPUs x 16 padded, phase 2 (DeepLearningExamples {framework})", published.source,
                         "this figure: the a100 rates scaled to match it", fit.predicted_sequences_per_s,
                         published.sequences_per_s, 0),
                   Claim(f"median seq/s, 256 GPUs padded, rates from DeepLearningExamples {framework}",
                         "NVIDIA MLPerf v0.7 BERT log, 256 GPUs", fitted_on, float(predicted["simbench"]),
                         float(predicted["measured"]), 5)]
    return claims


def _cross_generation_claims(runs: dict) -> list[Claim]:
    """The A100 logs predicted with un-padding's efficiency and noise carried from the same code's V100 runs:
    fitted there, where NVIDIA ran both modes, with the v100-dgx2h preset's compute rates fitted too. Then
    (1) the 8- and 16-GPU un-padded logs on the a100 preset as it is (its padded rates were chosen on the
    256-GPU log), nothing fitted on them; (2) the 256-GPU padded log with the a100 rates and noise fitted on
    the 8-GPU un-padded log instead, so that no A100 padded figure is used."""
    from simbench.calibrate.logfit import PublishedRunStatistics, fit_logs
    from simbench.costmodels.hardware import load_hardware

    v100 = fit_logs([PublishedRunStatistics(**run) for run in V100_MLPERF_RUNS.values()], hardware="v100-dgx2h",
                    free=("compute_rate_scale", "unpadded_flops_fraction", "unpadded_noise_cv"))
    fraction, noise = v100.fitted["unpadded_flops_fraction"], v100.fitted["unpadded_noise_cv"]
    v100_table = v100.table.set_index(["gpus", "quantity"])
    claims = [Claim(f"median seq/s, {run['gpus']} V100 {mode}", run["source"],
                    "this figure: the v100-dgx2h rates, un-padded efficiency and noise fitted on both V100 runs",
                    float(v100_table.loc[(run["gpus"], "median seq/s"), "simbench"]), run["median_sequences_per_s"], 0)
              for mode, run in V100_MLPERF_RUNS.items()]
    # The shipped a100 preset carries these two figures (rounded to 4 digits); tests hold it to this fit.
    carried = fit_logs([runs[8], runs[16]], free=(), hardware="a100").table.set_index(["gpus", "quantity"])
    from_v100 = (f"the shipped a100 preset as it is: un-padded efficiency and noise from the V100 runs ({fraction:.3f} "
                 f"of padded FLOP/s, CV {noise:.3f}), padded rates chosen on the 256-GPU log")
    for gpus, quantity, tolerance in ((8, "median seq/s", 10), (8, "CV of seq/s", 20), (16, "median seq/s", 10),
                                      (16, "CV of seq/s", 20)):
        row = carried.loc[(gpus, quantity)]
        claims.append(Claim(f"{quantity}, {gpus} GPUs un-padded, un-padding carried from V100",
                            f"NVIDIA MLPerf v0.7 BERT log, {gpus} GPUs", from_v100, float(row["simbench"]),
                            float(row["measured"]), tolerance))
    a100 = fit_logs([runs[8]], [runs[256]], hardware=load_hardware("a100", {"unpadded_flops_fraction": fraction}),
                    free=("compute_rate_scale", "unpadded_noise_cv"))
    predicted = a100.table.set_index(["gpus", "quantity"]).loc[(256, "median seq/s")]
    fitted_on = (f"the 8-GPU un-padded log (a100 rates x {a100.fitted['compute_rate_scale']:.3f}, noise) with the "
                 f"V100 runs' un-padded efficiency ({fraction:.3f} of padded FLOP/s)")
    return claims + [Claim("median seq/s, 256 GPUs padded, un-padded efficiency carried from V100",
                           "NVIDIA MLPerf v0.7 BERT log, 256 GPUs", fitted_on, float(predicted["simbench"]),
                           float(predicted["measured"]), 5)]
