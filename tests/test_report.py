"""Report pieces on their own: atomic writes, the headline answer, deterministic plots."""

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simbench.report import plots, styles
from simbench.report.summary import _headline, _winners_table
from simbench.atomic import atomic_directory, atomic_file
from simbench.errors import InputError


def listing(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


MARKER = ".simbench-folder.json"


def old_report(target: Path) -> None:
    with atomic_directory(target) as staging:
        (staging / "old.csv").write_text("old")


def test_atomic_directory_replaces_the_old_folder(tmp_path):
    target = tmp_path / "report"
    old_report(target)
    with atomic_directory(target) as staging:
        (staging / "new.csv").write_text("new")
        assert listing(target) == [MARKER, "old.csv"]  # nothing visible until the swap
    assert listing(target) == [MARKER, "new.csv"]
    assert listing(tmp_path) == ["report"]


@pytest.mark.parametrize("failure", [ValueError, KeyboardInterrupt])
def test_atomic_directory_keeps_the_old_folder_on_failure(tmp_path, failure):
    target = tmp_path / "report"
    old_report(target)
    with pytest.raises(failure):
        with atomic_directory(target) as staging:
            (staging / "half.csv").write_text("half")
            raise failure()
    assert listing(target) == [MARKER, "old.csv"] and (target / "old.csv").read_text() == "old"
    assert listing(tmp_path) == ["report"]


def test_atomic_directory_creates_a_missing_target(tmp_path):
    target = tmp_path / "deep" / "report"
    with atomic_directory(target) as staging:
        (staging / "a.csv").write_text("a")
    assert listing(target) == [MARKER, "a.csv"]


@pytest.mark.parametrize("user_files, was_report, reason", [
    (["thesis.tex", "resolved.yaml"], False, "holds no .simbench-folder.json"),  # a report's file name is no proof
    (["NOTES.md"], True, r"holds 1 file\(s\) simbench did not write \(NOTES.md\)"),
])
def test_a_folder_with_files_simbench_did_not_write_is_never_replaced(tmp_path, user_files, was_report, reason):
    target = tmp_path / "report"
    if was_report:
        old_report(target)  # a real report into which the user put a file of their own
    else:
        target.mkdir()
    for name in user_files:
        (target / name).write_text("mine")
    with pytest.raises(InputError, match=reason):
        with atomic_directory(target) as staging:
            (staging / "new.csv").write_text("new")
    assert all((target / name).read_text() == "mine" for name in user_files)
    assert listing(tmp_path) == ["report"]


def test_a_file_simbench_wrote_and_the_user_edited_is_never_replaced(tmp_path):
    target = tmp_path / "report"
    old_report(target)
    (target / "old.csv").write_text("old, with my notes")
    with pytest.raises(InputError, match=r"1 file\(s\) changed since simbench wrote them \(old.csv\)"):
        with atomic_directory(target) as staging:
            (staging / "new.csv").write_text("new")
    assert (target / "old.csv").read_text() == "old, with my notes" and listing(tmp_path) == ["report"]


def test_a_report_written_before_hashes_were_recorded_is_still_replaced(tmp_path):
    target = tmp_path / "report"
    target.mkdir()
    (target / "old.csv").write_text("old")
    (target / MARKER).write_text('{"written_by": "simbench", "files": ["old.csv"]}')
    with atomic_directory(target) as staging:
        (staging / "new.csv").write_text("new")
    assert listing(target) == [MARKER, "new.csv"]


def test_leftovers_of_killed_runs_are_swept_and_a_report_moved_aside_is_restored(tmp_path):
    target = tmp_path / "report"
    old_report(target)
    (tmp_path / ".report.partial-abc").mkdir()  # killed while writing
    (tmp_path / ".report.partial-abc" / "half.csv").write_text("half")
    target.rename(tmp_path / ".report.old-def")  # killed between moving the old report aside and the swap
    (tmp_path / "other").mkdir()  # another folder's business
    with atomic_directory(target) as staging:
        assert (target / "old.csv").read_text() == "old"  # the only whole copy came back first
        (staging / "new.csv").write_text("new")
    assert listing(tmp_path) == ["other", "report"] and listing(target) == [MARKER, "new.csv"]


def test_sigterm_while_writing_removes_the_staging_folder(tmp_path):
    target = tmp_path / "report"
    old_report(target)
    with pytest.raises(SystemExit) as stopped:
        with atomic_directory(target) as staging:
            (staging / "half.csv").write_text("half")
            os.kill(os.getpid(), signal.SIGTERM)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert listing(tmp_path) == ["report"] and listing(target) == [MARKER, "old.csv"]


def test_a_link_to_a_report_stays_a_link_and_the_report_behind_it_is_replaced(tmp_path):
    real = tmp_path / "real"
    old_report(real)
    link = tmp_path / "link"
    link.symlink_to(real)
    with atomic_directory(link) as staging:
        (staging / "new.csv").write_text("new")
    assert link.is_symlink() and listing(real) == [MARKER, "new.csv"]
    assert listing(tmp_path) == ["link", "real"]


@pytest.mark.parametrize("name", [".", "..", "/"])
def test_dot_dot_and_the_root_are_no_report_folders(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="must name a folder to create or replace"):
        with atomic_directory(Path(name)):
            pass
    assert listing(tmp_path) == []


def test_concurrent_writers_of_one_folder_take_turns(tmp_path):
    target = tmp_path / "report"
    inside = []

    def write(tag: str) -> None:
        with atomic_directory(target) as staging:
            inside.append(tag)
            time.sleep(0.05)
            (staging / f"{tag}.csv").write_text(tag)
            inside.append(tag)

    threads = [threading.Thread(target=write, args=(tag,)) for tag in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert inside in (["a", "a", "b", "b"], ["b", "b", "a", "a"])  # never interleaved
    assert listing(target) == [MARKER, f"{inside[-1]}.csv"] and listing(tmp_path) == ["report"]


def test_atomic_file_leaves_the_old_file_on_failure(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as temporary:
            temporary.write_text("half")
            raise RuntimeError
    assert path.read_text() == "old" and listing(tmp_path) == ["h.csv"]
    with atomic_file(path) as temporary:
        temporary.write_text("new")
    assert path.read_text() == "new" and listing(tmp_path) == ["h.csv"]


def scaling_table(rows: list[tuple[str, int, float]], reference: str = "none") -> pd.DataFrame:
    return pd.DataFrame([{"strategy": name, "devices": devices, "speedup": speedup, "reference": reference}
                         for name, devices, speedup in rows])


def test_headline_names_the_winner_at_each_end_and_the_crossover():
    scaling = scaling_table([("none", 1, 1.0), ("packed", 1, 1.90), ("unpad", 1, 2.10),
                             ("none", 64, 1.0), ("packed", 64, 1.90), ("unpad", 64, 1.50)])
    headline = _headline(scaling)
    assert headline.startswith("**Answer:** on 1 device the fastest strategy is **unpad**, 2.100x")
    assert "On 64 devices it is **packed** at 1.900x, 26.7 % ahead of unpad (1.500x)" in headline
    assert "The winner changes with scale: unpad from 1 device; packed from 64 devices." in headline
    assert "Biggest loss with scale: unpad, from 2.100x on 1 device to 1.500x on 64 devices (28.6 % less)." in headline
    table = _winners_table(scaling)
    assert "| 1 | unpad | 2.100 | packed | 1.900 | 10.5 |" in table


def test_headline_ranks_other_baselines_separately():
    scaling = pd.concat([scaling_table([("none", 1, 1.0), ("spfhp:3", 1, 1.7)]),
                         scaling_table([("vts", 1, 5.0), ("vts-bucketed", 1, 6.0)], reference="vts-padded")])
    headline = _headline(scaling)
    assert "**spfhp:3**, 1.700x the throughput of padding" in headline
    assert "Against vts-padded instead: on 1 device the fastest strategy is **vts-bucketed**, 6.000x" in headline


def test_plots_are_byte_identical_between_draws(tmp_path):
    scaling = scaling_table([("none", 1, 1.0), ("unpad", 1, 2.0), ("none", 8, 1.0), ("unpad", 8, 1.7)])
    first = plots.save_figure(plots.scaling_figure(scaling), tmp_path / "a", ("png", "svg"))
    second = plots.save_figure(plots.scaling_figure(scaling), tmp_path / "b", ("png", "svg"))
    for one, other in zip(first, second):
        assert one.read_bytes() == other.read_bytes()
    assert b"<dc:date>" not in first[1].read_bytes()


def test_summary_straight_from_the_simulator_without_lp_bounds_shows_dashes():
    from simbench.experiment import run_experiment
    from simbench.report.summary import summary_markdown
    from simbench.scenario import Scenario

    scenario = Scenario(name="no-bounds", dataset={"histogram": "squad_1_1_384"}, strategies=["spfhp:3"],
                        devices=[1], steps=3, outputs={"lp_bounds": False})
    histogram = scenario.dataset.load()
    text = summary_markdown(scenario, histogram, run_experiment(scenario, histogram))

    spfhp_row = next(line for line in text.splitlines() if line.startswith("| 3 | spfhp"))
    cells = [cell.strip() for cell in spfhp_row.strip("|").split("|")]
    assert cells[5:7] == ["-", "-"]  # LP bound and gap to it: not computed
    assert "LP bounds were not computed" in text


def test_atomic_file_writes_through_a_link_and_keeps_it(tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    with atomic_file(link) as temporary:
        temporary.write_text("new")
    assert link.is_symlink() and target.read_text() == "new" and listing(tmp_path) == ["link.csv", "real.csv"]


@pytest.mark.parametrize("special", ["fifo", "/dev/null"])
def test_atomic_file_never_replaces_a_device_or_fifo(tmp_path, special):
    path = Path(special) if special.startswith("/") else tmp_path / special
    if special == "fifo":
        os.mkfifo(path)
    before = os.stat(path).st_mode
    with pytest.raises(InputError, match="not a regular file"):
        with atomic_file(path) as temporary:
            temporary.write_text("new")
    assert os.stat(path).st_mode == before


@pytest.mark.parametrize("label, family", [("none", "padding"), ("sort", "length grouping"),
                                           ("token-budget", "length grouping"), ("group-by-length", "length grouping"),
                                           ("spfhp:3", "packing"), ("greedy", "packing"),
                                           ("packed-varlen:lpfhp:max", "packed-varlen"),
                                           ("unpad-exchange", "un-padding"), ("vts-bucketed", "VTS"),
                                           ("not-a-plan", "other")])
def test_every_strategy_falls_in_its_family(label, family):
    assert styles.plan_family(label) == family


def test_a_label_of_the_scenarios_own_is_placed_by_its_table_row():
    table = pd.DataFrame({"strategy": ["mine", "my-varlen", "my-unpad", "my-vts"], "packer": ["spfhp", "spfhp", None, None],
                          "mode": ["padded", "packed_varlen", "unpadded", "unpadded"],
                          "reference": ["none", "none", "none", "vts-padded"]})
    assert [style.family for style in styles.strategy_styles(table["strategy"], table).values()] == \
        ["packing", "packed-varlen", "un-padding", "VTS"]


def test_each_strategy_of_a_family_has_a_shade_and_marker_of_its_own():
    labels = ["none", "greedy", "spfhp:2", "spfhp:3", "spfhp:4", "spfhp:8", "spfhp:max", "lpfhp:max", "nnlshp:3",
              "optimal:3", "ffd", "bfd", "lpfhp:2", "lpfhp:4", "unpad", "unpad-exchange"]
    drawn = styles.strategy_styles(labels)
    packers = [style for style in drawn.values() if style.family == "packing"]
    assert len(packers) == 13 and len({style.colour for style in packers}) == 13
    assert len({(style.marker, style.dashed) for style in packers}) == 13  # the 13th is dashed
    assert drawn["unpad"].colour != drawn["unpad-exchange"].colour and drawn["none"].family == "padding"


def test_scaling_plot_names_the_best_of_each_family_and_lists_every_strategy_under_its_family():
    scaling = scaling_table([("none", 1, 1.0), ("spfhp:2", 1, 1.5), ("spfhp:3", 1, 1.8), ("greedy", 1, 1.6),
                             ("unpad", 1, 1.9), ("none", 8, 1.0), ("spfhp:2", 8, 1.5), ("spfhp:3", 8, 1.8),
                             ("greedy", 8, 1.6), ("unpad", 8, 1.4)])
    figure = plots.scaling_figure(scaling, "wikipedia_512, bert-large on a100", dashed=(2.0, "ideal"))
    axis = figure.axes[0]
    legend = [text.get_text() for text in axis.get_legend().get_texts()]
    assert legend == ["padding", "none", "packing", "spfhp:2", "spfhp:3", "greedy", "un-padding", "unpad",
                      "ideal: 2.000x"]
    named = sorted(text.get_text() for text in axis.texts)
    assert named == ["none", "spfhp:3", "unpad"]  # the best of each family, at the right end
    assert "wikipedia_512, bert-large on a100" in figure.get_suptitle()
    assert axis.get_ylim()[1] > 2.0  # the dashed line is inside the frame
    plots.plt.close(figure)


def test_packing_plot_zooms_near_full_and_shows_the_lp_bound_only_where_computed():
    packing = pd.DataFrame({"label": ["none", "spfhp:3"], "strategy": ["none", "spfhp"], "efficiency": [0.5, 0.999],
                            "packs": [100, 51], "tokens": [100 * 512, 51 * 512], "lower_bound_packs": [None, None]})
    timings = pd.DataFrame({"strategy": ["none", "spfhp:3"], "solve_seconds": [0.001, 0.01]})
    figure = plots.packing_figure(packing, timings, real_tokens=25_600, max_length=512)
    assert figure.axes[0].get_xscale() == "logit"
    legend = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert legend == ["efficiency (value beside it)"]  # no bound computed: no bound to explain
    plots.plt.close(figure)
    figure = plots.packing_figure(packing.assign(lower_bound_packs=[50, 50]), timings, 25_600, 512)
    legend = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert legend == ["efficiency (value beside it)", "LP bound at the same depth"]
    plots.plt.close(figure)


def test_packing_plot_prints_each_efficiency_by_its_dot_and_clear_of_the_bound():
    # Dots near the left end, the middle and the right end of the axis, with bounds on, near and far from them.
    efficiency = np.array([0.41, 0.78, 0.9, 0.99808, 0.99884, 0.999999])
    bound = np.array([0.41, 0.9999, 0.95, 0.9982, 0.99884, 0.999999])
    full_packs = 1_000_000  # the real tokens fill this many packs
    packs = np.round(full_packs / efficiency)
    packing = pd.DataFrame({"label": [f"s{row}" for row in range(6)], "strategy": "x", "efficiency": efficiency,
                            "packs": packs, "tokens": packs * 512, "lower_bound_packs": np.round(full_packs / bound)})
    timings = pd.DataFrame({"strategy": packing["label"], "solve_seconds": 0.01})
    figure = plots.packing_figure(packing, timings, real_tokens=full_packs * 512, max_length=512)
    axis = figure.axes[0]
    figure.canvas.draw()
    labels = [text for text in axis.texts if text.get_text().replace(".", "").isdigit()]
    # Each to 3 decimals, and 99.9999 % (padding left) as 99.999, not 100.000.
    assert [label.get_text() for label in labels] == ["41.000", "78.000", "90.000", "99.808", "99.884", "99.999"]
    markers = axis.collections[-1].get_segments()  # the LP bound, one vertical segment per row
    assert len(markers) == len(labels)
    for row, (label, marker) in enumerate(zip(labels, markers)):
        assert label.xy == (pytest.approx(min(efficiency[row], plots.EFFICIENCY_SHOWN_MAX)), row)  # at its dot
        box = label.get_window_extent()
        marker_x = axis.transData.transform(marker[0])[0]
        assert not box.x0 - 1 <= marker_x <= box.x1 + 1, label.get_text()  # never over the bound's marker
        assert axis.get_window_extent().x0 <= box.x0  # inside the axis
    plots.plt.close(figure)


@pytest.mark.parametrize("truncated_share", [0.0, 0.25])
def test_histogram_cuts_a_truncation_spike_and_prints_it_clear_of_the_legend(truncated_share):
    from simbench.histogram import LengthHistogram

    counts = np.bincount(np.random.default_rng(0).integers(1, 512, 100_000), minlength=513)[1:]
    counts[-1] += int(truncated_share * counts.sum())  # sequences truncated to the max length
    figure = plots.histogram_figure(LengthHistogram.from_counts(counts))
    figure.canvas.draw()
    shares = figure.axes[0]
    notes = [text for text in shares.texts if text.get_text().startswith("last bin (511-512 tokens)")]
    tokens = counts * np.arange(1, 513)
    last_bin_tokens = 100 * tokens[-2:].sum() / tokens.sum()  # 256 bins of 2 lengths
    if truncated_share:
        assert shares.get_ylim()[1] < last_bin_tokens / 10  # the rest of the histogram is not flattened
        assert len(notes) == 1 and f"{last_bin_tokens:.1f} % of tokens" in notes[0].get_text()
        assert not notes[0].get_window_extent().overlaps(figure.legends[0].get_window_extent())
    else:
        assert not notes and shares.get_ylim()[1] >= last_bin_tokens
    plots.plt.close(figure)


def test_timeline_labels_a_deep_pipeline_without_stage_numbers_touching():
    stages, samples = 24, 6
    rows = [{"strategy": "vts", "sample": sample, "stage": stage, "enter_seconds": sample + stage,
             "finish_seconds": sample + stage + 0.8, "leave_seconds": sample + stage + 1.0, "length": 100,
             "blocked_seconds": 0.2} for sample in range(samples) for stage in range(stages)]
    figure = plots.timeline_figure(pd.DataFrame(rows))
    figure.canvas.draw()
    axis = figure.axes[0]
    labels = [label for label in axis.get_yticklabels() if label.get_text()]
    assert labels[0].get_text() == "0" and len(labels) <= plots.STAGE_LABELS_MAX
    boxes = sorted((label.get_window_extent() for label in labels), key=lambda box: box.y0)
    assert all(lower.y1 <= upper.y0 for lower, upper in zip(boxes, boxes[1:]))  # no two numbers overlap
    plots.plt.close(figure)


def test_timeline_panels_share_one_time_scale_set_by_the_quickest_pipeline():
    stages, samples = 4, 60

    def pipeline(name, seconds_per_sample):
        return [{"strategy": name, "sample": sample, "stage": stage,
                 "enter_seconds": (sample + stage) * seconds_per_sample,
                 "finish_seconds": (sample + stage + 0.8) * seconds_per_sample,
                 "leave_seconds": (sample + stage + 1.0) * seconds_per_sample, "length": 100,
                 "blocked_seconds": 0.2 * seconds_per_sample} for sample in range(samples) for stage in range(stages)]

    figure = plots.timeline_figure(pd.DataFrame(pipeline("vts", 0.1) + pipeline("vts-bucketed", 0.01)))
    slow, quick = figure.axes
    # The last of the quick pipeline's first samples leaves its last stage at (shown - 1 + stages) x 0.01 s.
    window = (plots.TIMELINE_SAMPLES_SHOWN - 1 + stages) * 0.01
    assert slow.get_xlim() == quick.get_xlim() == pytest.approx((0.0, window))
    assert "48 of 60 samples" not in slow.get_title() and "of 60 samples start in this window" in slow.get_title()
    plots.plt.close(figure)


def test_breakdown_panels_share_one_scale_and_leave_out_parts_that_are_always_zero():
    breakdown = pd.DataFrame({"strategy": ["none", "unpad"] * 2, "devices": [1, 1, 64, 64],
                              "compute_seconds": [0.1, 0.1, 0.1, 0.1], "padding_seconds": [0.1, 0.0, 0.1, 0.0],
                              "waiting_seconds": [0.0, 0.0, 0.0, 0.05], "stall_seconds": [0.0] * 4,
                              "real_tokens_per_device_step": [1000] * 4})
    figure = plots.breakdown_figure(breakdown)
    first, second = figure.axes
    assert first.get_ylim() == second.get_ylim()
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["compute", "padding", "waiting"]
    plots.plt.close(figure)


def test_summary_names_a_custom_model_by_its_dimensions_not_as_a_python_dict():
    from simbench.experiment import run_experiment
    from simbench.report.summary import summary_markdown
    from simbench.scenario import Scenario

    scenario = Scenario(name="custom", dataset={"histogram": "squad_1_1_384"}, strategies=["spfhp"], devices=[1],
                        steps=2, model={"layers": 2, "hidden": 128, "heads": 2, "ffn": 512})
    histogram = scenario.dataset.load()
    text = summary_markdown(scenario, histogram, run_experiment(scenario, histogram))
    assert "Model `custom: layers=2, hidden=128, heads=2, ffn=512`" in text and "{" not in text
