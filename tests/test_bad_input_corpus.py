"""The bad-input corpus: every case runs a real command on a bad or hostile input and must end in one
clean input error (exit status 2 from the command line, the file or option named), never a
traceback, never a hang, and never with a file the user had lost or changed.

Each case is (id, files to create, command line, what the one-line error must say). `{d}` in a command
line is the case's folder; a file's content may be text or bytes.
"""

import gzip
import hashlib
import io
import json
import os
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from simbench.cli import app
from simbench.errors import InputError
from simbench.histogram import load_histogram
from simbench.checked import load_checked_scenarios as load_scenarios

HANG_SECONDS = 60  # a generous limit that only catches runaway work, never slow machines
SCENARIO = "name: s\ndataset: {histogram: squad_1_1_384}\nstrategies: [unpad]\ndevices: [1]\nsteps: 2\n"
CSV = "length,count\n3,5\n7,2\n"


def bomb(levels: int = 8) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def scenario_with(extra: str) -> str:
    return SCENARIO + extra


class Link(str):
    """A symbolic link to this target (relative to the case's folder), made in place of a file."""


def marker(files: dict[str, str]) -> str:
    """A report folder's marker listing `files` with the hashes of these contents (as simbench wrote them)."""
    return json.dumps({"written_by": "simbench", "files": sorted(files),
                       "sha256": {name: hashlib.sha256(text.encode()).hexdigest() for name, text in files.items()}})


def npy(values) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(values))
    return buffer.getvalue()


def mlperf_log(throughputs: list[str]) -> str:
    """An MLPerf BERT log of 8 GPUs, un-padded, whose steps (from line 3) have these seq/s."""
    return ("0: python run_pretraining.py --train_batch_size=4 --unpad\n"
            '0: :::MLLOG {"key": "global_batch_size", "value": 32}\n'
            + "".join(f"0: {{'training_steps': {step}, 'seq/s': {value}}}\n"
                      for step, value in enumerate(throughputs, start=1)))


def corrupt_parquet() -> bytes:
    """A Parquet file of token lists whose snappy-compressed pages have 200 flipped bytes."""
    import pyarrow
    import pyarrow.parquet

    buffer = io.BytesIO()
    pyarrow.parquet.write_table(pyarrow.table({"ids": [[index] * (index % 50) for index in range(20_000)]}), buffer,
                                compression="snappy")
    data = bytearray(buffer.getvalue())
    for index in range(len(data) // 3, len(data) // 3 + 200):
        data[index] ^= 0x5A
    return bytes(data)


# Gzip members repeated: a few MB of file, gigabytes once decompressed.
GZIP_3_GIB_OF_LINES = gzip.compress(b"0: hello\n" * (2**20 // 9), 9) * 3072
GZIP_2M_STEP_LINES = gzip.compress(b"0: {'training_steps': 1, 'seq/s': 2}\n" * (2**20 // 37), 9) * 64
GZIP_8_GIB_ONE_LINE = gzip.compress(b"a" * 2**20, 9) * 8192
CORRUPT_PARQUET = corrupt_parquet()
NPY_LENGTHS = npy(np.array([5, 7, 3], dtype=np.int64))
SWEEP_RUN = ["sweep", "{d}/w.yaml", "--out", "{d}/out", "--workers", "0"]
SWEEP_ONE_CELL = "base:\n" + "".join(f"  {line}\n" for line in SCENARIO.splitlines()[1:]) + "axes: {seed: [1]}\n"


PACK = ["pack", "{d}/h.csv", "--strategy", "spfhp"]
VALIDATE = ["validate", "{d}/s.yaml"]
CASES = [
    # Histograms, CSV
    ("csv-empty", {"h.csv": ""}, PACK, "h.csv"),
    ("csv-header-only", {"h.csv": "length,count\n"}, PACK, "h.csv"),
    ("csv-wrong-header", {"h.csv": "len,cnt\n3,5\n"}, PACK, "h.csv:1"),
    ("csv-letters", {"h.csv": "length,count\na,5\n"}, PACK, "h.csv:2"),
    ("csv-negative-count", {"h.csv": "length,count\n5,-1\n"}, PACK, "h.csv:2"),
    ("csv-fractional-length", {"h.csv": "length,count\n3.5,2\n"}, PACK, "h.csv:2"),
    ("csv-duplicate-length", {"h.csv": "length,count\n5,1\n5,2\n"}, PACK, "h.csv:3"),
    ("csv-blank-lines", {"h.csv": "\n" * 1000}, PACK, "h.csv"),
    ("csv-huge-field", {"h.csv": "length,count\n" + "9" * 200_000 + ",1\n"}, PACK, "h.csv:2"),
    ("csv-length-zero", {"h.csv": "length,count\n0,4\n"}, PACK, "h.csv:2"),
    ("csv-length-too-long", {"h.csv": f"length,count\n{2**20 + 1},1\n"}, PACK, "h.csv:2"),
    ("csv-count-too-big", {"h.csv": f"length,count\n5,{2**41}\n"}, PACK, "h.csv:2"),
    ("csv-binary", {"h.csv": bytes(range(256)) * 4}, PACK, "h.csv"),
    ("csv-utf16", {"h.csv": CSV.encode("utf-16")}, PACK, "h.csv"),
    ("csv-three-columns", {"h.csv": "length,count\n5,1,2\n"}, PACK, "h.csv:2"),
    ("csv-is-a-folder", {"h.csv/x": "x"}, PACK, "h.csv"),
    ("csv-missing", {}, PACK, "h.csv"),
    ("dev-zero", {}, ["pack", "/dev/zero", "--strategy", "spfhp"], "/dev/zero"),
    ("dev-urandom", {}, ["pack", "/dev/urandom", "--strategy", "spfhp"], "/dev/urandom"),
    # Histograms, JSON
    ("json-deep", {"h.json": "[" * 50_000 + "]" * 50_000}, ["pack", "{d}/h.json", "--strategy", "spfhp"], "h.json"),
    ("json-not-counts", {"h.json": '{"counts": 5}'}, ["pack", "{d}/h.json", "--strategy", "spfhp"], "h.json"),
    ("json-same-length-twice", {"h.json": '{"counts": {"10": 9, "010": 12}}'},
     ["pack", "{d}/h.json", "--strategy", "spfhp"], "length 10 appears twice"),
    ("json-negative", {"h.json": '{"counts": [3, -1]}'}, ["pack", "{d}/h.json", "--strategy", "spfhp"], "h.json"),
    ("json-nan", {"h.json": '{"counts": [3, NaN]}'}, ["pack", "{d}/h.json", "--strategy", "spfhp"], "h.json"),
    ("json-strings", {"h.json": '{"counts": ["a", "b"]}'}, ["pack", "{d}/h.json", "--strategy", "spfhp"], "h.json"),
    ("json-broken", {"h.json": '{"counts": [1, 2'}, ["pack", "{d}/h.json", "--strategy", "spfhp"], "h.json:1"),
    # Pack options
    ("pack-max-length-zero", {"h.csv": CSV}, PACK + ["--max-length", "0"], "--max-length"),
    ("pack-max-length-short", {"h.csv": CSV}, PACK + ["--max-length", "4"], "longer than --max-length 4"),
    ("pack-depth-zero", {"h.csv": CSV}, PACK + ["--max-depth", "0"], "--max-depth"),
    ("pack-unknown-strategy", {"h.csv": CSV}, ["pack", "{d}/h.csv", "--strategy", "quantum"], "quantum"),
    # Scenarios
    ("yaml-unclosed", {"s.yaml": "name: [x\n"}, VALIDATE, "s.yaml:2"),
    ("yaml-list", {"s.yaml": "- 1\n- 2\n"}, VALIDATE, "s.yaml"),
    ("yaml-empty", {"s.yaml": ""}, VALIDATE, "s.yaml"),
    ("yaml-comments-only", {"s.yaml": "# nothing here\n"}, VALIDATE, "s.yaml"),
    ("yaml-unknown-key", {"s.yaml": scenario_with("colour: red\n")}, VALIDATE, "s.yaml:6"),
    ("yaml-unknown-strategy", {"s.yaml": SCENARIO.replace("[unpad]", "[quantum]")}, VALIDATE, "quantum"),
    ("yaml-devices-zero", {"s.yaml": SCENARIO.replace("devices: [1]", "devices: [0]")}, VALIDATE, "s.yaml:4"),
    ("yaml-devices-text", {"s.yaml": SCENARIO.replace("devices: [1]", "devices: [a]")}, VALIDATE, "s.yaml:4"),
    ("yaml-devices-deep", {"s.yaml": SCENARIO.replace("devices: [1]", "devices: " + "[" * 20_000 + "]" * 20_000)},
     VALIDATE, "nested more than"),
    ("yaml-alias-bomb", {"s.yaml": scenario_with("hardware:\n  overrides:\n" + "".join(
        f"    {line}\n" for line in bomb().splitlines()))}, VALIDATE, "holds more than 100,000 values"),
    ("yaml-alias-loop", {"s.yaml": scenario_with("notes: &loop [*loop]\n")}, VALIDATE, "contains it"),
    ("yaml-python-tag", {"s.yaml": scenario_with("seed: !!python/object:os.system {}\n")}, VALIDATE, "s.yaml"),
    ("yaml-duplicate-key", {"s.yaml": scenario_with("steps: 9\n")}, VALIDATE, "appears twice"),
    ("yaml-steps-negative", {"s.yaml": SCENARIO.replace("steps: 2", "steps: -1")}, VALIDATE, "s.yaml:5"),
    ("yaml-batch-zero", {"s.yaml": scenario_with("batch_size: 0\n")}, VALIDATE, "s.yaml:6"),
    ("yaml-seed-negative", {"s.yaml": scenario_with("seed: -1\n")}, VALIDATE, "s.yaml:6"),
    ("yaml-seed-bool", {"s.yaml": scenario_with("seed: true\n")}, VALIDATE, "s.yaml:6"),
    ("yaml-unknown-model", {"s.yaml": scenario_with("model: gpt-9\n")}, VALIDATE, "gpt-9"),
    ("yaml-unknown-hardware", {"s.yaml": scenario_with("hardware: {profile: tpu-v9}\n")}, VALIDATE, "tpu-v9"),
    ("yaml-override-unknown", {"s.yaml": scenario_with("hardware: {overrides: {warp_speed: 9}}\n")},
     VALIDATE, "warp_speed"),
    ("yaml-override-tiny-flops", {"s.yaml": scenario_with("hardware: {overrides: {linear_flops_per_s: 1.0e-300}}\n")},
     VALIDATE, "linear_flops_per_s"),
    ("yaml-override-groups", {"s.yaml": scenario_with("hardware: {overrides: {unpad_group_boundaries: [512, 128]}}\n")},
     VALIDATE, "increasing order"),
    ("yaml-missing-histogram", {"s.yaml": SCENARIO.replace("squad_1_1_384", "{d}/nothing.csv")}, VALIDATE,
     "nothing.csv"),
    ("yaml-binary", {"s.yaml": b"\xff\xfe\x00garbage"}, VALIDATE, "s.yaml"),
    ("yaml-is-folder", {"s.yaml/x": "x"}, VALIDATE, "s.yaml"),
    ("yaml-dev-zero", {}, ["validate", "/dev/zero"], "/dev/zero"),
    # Where reports go
    ("run-out-is-file", {"s.yaml": SCENARIO, "out": "keep me"}, ["run", "{d}/s.yaml", "--out", "{d}/out"], "out"),
    ("run-out-user-folder", {"s.yaml": SCENARIO, "out/thesis.tex": "keep me", "out/resolved.yaml": "mine"},
     ["run", "{d}/s.yaml", "--out", "{d}/out"], "holds no .simbench-folder.json"),
    ("run-out-dot-dot", {"s.yaml": SCENARIO}, ["run", "{d}/s.yaml", "--out", "{d}/.."], "--out must name a folder"),
    ("run-out-name-too-long", {"s.yaml": SCENARIO}, ["run", "{d}/s.yaml", "--out", "{d}/" + "a" * 300],
     "File name too long"),
    ("run-scenario-named-dot-dot", {"s.yaml": SCENARIO.replace("name: s", 'name: ".."')}, ["run", "{d}/s.yaml"],
     "must name a folder"),
    # Simulate options
    ("simulate-devices-superscript", {}, ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1,²"],
     "--devices"),
    ("simulate-training-steps-over-a-trillion", {}, ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1",
                                                    "--training-steps", "1000000000001"], "--training-steps"),
    ("simulate-devices-zero", {}, ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "0"], "--devices"),
    ("simulate-devices-empty", {}, ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", ""], "--devices"),
    ("simulate-steps-billion", {}, ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "8", "--steps",
                                    "1000000000"], "lower --steps"),
    ("run-steps-billion", {"s.yaml": SCENARIO.replace("steps: 2", "steps: 1000000000")}, ["run", "{d}/s.yaml"],
     "lower steps"),
    ("build-output-dev-null", {"l.txt": "5\n"}, ["histogram", "build", "{d}/l.txt", "--max-length", "8", "-o",
                                                  "/dev/null"], "not a regular file"),
    ("simulate-unknown-plan", {}, ["simulate", "squad_1_1_384", "--strategy", "warp", "--devices", "1"], "warp"),
    ("simulate-hardware-bomb", {"p.yaml": bomb()},
     ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1", "--hardware", "{d}/p.yaml"], "p.yaml"),
    # Gumbel samples
    ("gumbel-ragged", {"x.csv": "unpadding,other\n1.9,2\n1.8\n2.0,1,5\n"},
     ["gumbel", "--samples", "{d}/x.csv", "--column", "unpadding"], "x.csv"),
    ("gumbel-letters", {"x.csv": "a\nb\nc\n"}, ["gumbel", "--samples", "{d}/x.csv"], "x.csv"),
    ("gumbel-empty", {"x.csv": ""}, ["gumbel", "--samples", "{d}/x.csv"], "x.csv"),
    ("gumbel-fifo-free-missing", {}, ["gumbel", "--samples", "{d}/none.csv"], "none.csv"),
    # MLPerf logs
    ("mlperf-truncated-gzip", {"log.txt.gz": gzip.compress(b":::MLLOG {}\n" * 100)[:60]},
     ["gumbel", "--log", "{d}/log.txt.gz"], "log.txt.gz"),
    ("mlperf-no-events", {"log.txt": "hello\nworld\n"}, ["gumbel", "--log", "{d}/log.txt"], "log.txt"),
    ("mlperf-garbled-event", {"log.txt": ':::MLLOG {"key": "global_batch_size", "value": \n'},
     ["gumbel", "--log", "{d}/log.txt"], "log.txt"),
    # Plot
    ("plot-not-a-report", {"r/notes.txt": "x"}, ["plot", "{d}/r"], "r"),
    ("plot-binary-scaling", {"r/resolved.yaml": SCENARIO, "r/scaling.csv": bytes(range(256))}, ["plot", "{d}/r"], "r"),
    # Histogram build
    ("build-huge-number", {"l.txt": "5\n" + "9" * 30 + "\n"},
     ["histogram", "build", "{d}/l.txt", "--max-length", "512", "-o", "{d}/h.csv"], "l.txt"),
    ("build-negative", {"l.txt": "5\n-3\n"}, ["histogram", "build", "{d}/l.txt", "--max-length", "512", "-o", "{d}/h.csv"],
     "l.txt"),
    ("build-jsonl-garbage", {"l.jsonl": '{"length": 5}\n{oops\n'},
     ["histogram", "build", "{d}/l.jsonl", "--column", "length", "--max-length", "512", "-o", "{d}/h.csv"], "l.jsonl"),
    ("build-max-length-zero", {"l.txt": "5\n"}, ["histogram", "build", "{d}/l.txt", "--max-length", "0", "-o", "{d}/h.csv"],
     "--max-length"),
    # Sweeps
    ("sweep-unknown-key", {"w.yaml": "base: {}\naxes: {seed: [1]}\ncolour: red\n"}, ["sweep", "{d}/w.yaml",
                                                                                   "--dry-run"], "w.yaml:3"),
    ("sweep-no-base", {"w.yaml": "axes: {seed: [1]}\n"}, ["sweep", "{d}/w.yaml", "--dry-run"], "`base`"),
    ("sweep-bad-cell", {"w.yaml": "base:\n" + "".join(f"  {line}\n" for line in SCENARIO.splitlines()[1:])
                        + "axes: {batch_size: [8, 0]}\n"}, ["sweep", "{d}/w.yaml", "--dry-run"], "cell 1 (batch_size=0)"),
    ("sweep-axis-not-list", {"w.yaml": "base: {}\naxes: {seed: 3}\n"}, ["sweep", "{d}/w.yaml", "--dry-run"],
     "non-empty lists"),
    ("sweep-list", {"w.yaml": "- 1\n"}, ["sweep", "{d}/w.yaml", "--dry-run"], "w.yaml"),
    ("sweep-out-user-folder", {"w.yaml": "base:\n" + "".join(f"  {line}\n" for line in SCENARIO.splitlines()[1:])
                               + "axes: {seed: [1]}\n", "out/notes.txt": "mine"},
     ["sweep", "{d}/w.yaml", "--out", "{d}/out", "--workers", "0"], "holds no sweep.json"),
    # More options and files
    ("yaml-million-devices", {"s.yaml": SCENARIO.replace("devices: [1]", "devices: [" + ", ".join(["1"] * 1_000_000)
                                                         + "]")}, VALIDATE, "holds more than 100,000 values"),
    ("yaml-simulation-too-large", {"s.yaml": SCENARIO.replace("steps: 2", "steps: 10000000")}, VALIDATE,
     "s.yaml:5: this simulation would draw and price about"),
    ("yaml-no-strategies", {"s.yaml": SCENARIO.replace("[unpad]", "[]")}, VALIDATE, "s.yaml:3"),
    ("simulate-steps-zero", {}, ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1", "--steps", "0"],
     "--steps"),
    ("simulate-batch-zero", {}, ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1",
                                 "--batch-size", "0"], "--batch-size"),
    ("simulate-too-many-devices", {}, ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices",
                                       str(2**20 + 1)], "--devices"),
    ("bound-bad-histogram", {"h.csv": "length,count\n5,-1\n"}, ["bound", "{d}/h.csv"], "h.csv:2"),
    ("bound-depth-zero", {}, ["bound", "squad_1_1_384", "--max-depth", "0"], "--max-depth"),
    ("assign-negative-lengths", {"l.txt": "5\n-3\n"},
     ["assign", "squad_1_1_384", "--lengths", "{d}/l.txt", "--strategy", "spfhp", "-o", "{d}/p.npy"], "l.txt"),
    ("assign-too-long", {"l.txt": "5\n999\n"},
     ["assign", "squad_1_1_384", "--lengths", "{d}/l.txt", "--strategy", "spfhp", "-o", "{d}/p.npy"], "l.txt"),
    ("fit-logs-garbage", {"log.txt": "not a log\n"}, ["fit-logs", "{d}/log.txt"], "log.txt"),
    ("fit-logs-output-under-a-file", {"log.txt": "not a log\n"}, ["fit-logs", "{d}/log.txt", "-o", "{d}/log.txt/p.yaml"],
     "is a file, not a folder"),
    ("yaml-integer-of-5000-digits", {"s.yaml": SCENARIO.replace("steps: 2", "steps: " + "9" * 5000)}, VALIDATE,
     "an integer of 5,000 characters"),
    ("json-integer-of-5000-digits", {"h.json": '{"counts": [1,\n 2, ' + "9" * 5000 + "]}"},
     ["pack", "{d}/h.json", "--strategy", "spfhp"], "h.json:2: an integer of 5,000 characters"),
    ("build-jsonl-integer-of-5000-digits", {"l.jsonl": '{"length": 5}\n{"length": ' + "9" * 5000 + "}\n"},
     ["histogram", "build", "{d}/l.jsonl", "--column", "length", "--max-length", "8", "-o", "{d}/h.csv"],
     "l.jsonl:2: an integer of 5,000 characters"),
    ("mlperf-event-integer-of-5000-digits", {"log.txt": ':::MLLOG {"key": "global_batch_size", "value": '
                                             + "9" * 5000 + "}\n"}, ["gumbel", "--log", "{d}/log.txt"], "log.txt"),
    ("simulate-depth-superscript", {}, ["simulate", "squad_1_1_384", "--strategy", "spfhp:\u00b2", "--devices", "1"],
     "neither a depth"),
    ("simulate-depth-of-5000-digits", {}, ["simulate", "squad_1_1_384", "--strategy", "spfhp:" + "9" * 5000,
                                           "--devices", "1"], "neither a depth"),
    ("fit-logs-empty-csv", {"log.csv": ""}, ["fit-logs", "{d}/log.csv"], "log.csv"),
    ("fit-logs-endless-steps", {"log.csv": "gpus,per_gpu_batch,unpadded,seq/s\n2048,32,true,3e5\n"},
     ["fit-logs", "{d}/log.csv", "--steps", "1000000000"], "--steps"),
    ("fit-logs-set-not-a-number", {"log.csv": "gpus,per_gpu_batch,unpadded,seq/s\n8,4,true,100\n"},
     ["fit-logs", "{d}/log.csv", "--set", "unpadded_flops_fraction=fast"], "--set"),
    ("calibrate-decoder-lengths", {}, ["calibrate-decoder", "-o", "{d}/p.yaml", "--lengths", "1,x"], "--lengths"),
    ("gumbel-bad-scale", {}, ["gumbel", "--location", "1.9", "--scale", "0"], "scale"),
    ("plot-garbled-resolved", {"r/resolved.yaml": "name: [x\n", "r/scaling.csv": "a\n"}, ["plot", "{d}/r"],
     "resolved.yaml"),
    # Hardware profiles given as files
    ("profile-nan", {"p.yaml": "name: x\nsource: y\nlinear_flops_per_s: .nan\nattention_flops_per_s: 1e12\n"},
     ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1", "--hardware", "{d}/p.yaml"], "p.yaml"),
    ("profile-calibration-timings-not-records",
     {"p.yaml": "name: x\nsource: y\nlinear_flops_per_s: 1e12\nattention_flops_per_s: 1e12\n"
                "calibration: {timings: [1, 2, 3]}\n"},
     ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1", "--hardware", "{d}/p.yaml"],
     "`calibration`: `timings[0]` must be a timing record"),
    ("profile-list", {"p.yaml": "- 1\n"},
     ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1", "--hardware", "{d}/p.yaml"], "p.yaml"),
    ("profile-duplicate-key", {"p.yaml": "name: x\nname: y\n"},
     ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1", "--hardware", "{d}/p.yaml"], "appears twice"),
    # Outputs never clobber inputs, nor any existing file without --force
    ("build-output-is-input", {"l.txt": "5\n"}, ["histogram", "build", "{d}/l.txt", "--max-length", "8", "-o",
                                                  "{d}/l.txt", "--force"], "also an input of this command (l.txt)"),
    ("build-output-links-to-input", {"l.txt": "5\n", "out.csv": Link("l.txt")},
     ["histogram", "build", "{d}/l.txt", "--max-length", "8", "-o", "{d}/out.csv", "--force"], "also an input"),
    ("build-output-exists", {"l.txt": "5\n", "h.csv": "my notes"},
     ["histogram", "build", "{d}/l.txt", "--max-length", "8", "-o", "{d}/h.csv"], "h.csv: -o is a file that exists; "
                                                                                  "pass --force"),
    ("build-output-links-to-notes", {"l.txt": "5\n", "notes.txt": "mine", "h.csv": Link("notes.txt")},
     ["histogram", "build", "{d}/l.txt", "--max-length", "8", "-o", "{d}/h.csv"], "is a symbolic link to"),
    ("build-output-dangling-link", {"l.txt": "5\n", "h.csv": Link("nowhere.csv")},
     ["histogram", "build", "{d}/l.txt", "--max-length", "8", "-o", "{d}/h.csv"], "pass --force"),
    ("fit-logs-output-is-log", {"log.csv": "gpus,per_gpu_batch,unpadded,seq/s\n8,4,true,100\n"},
     ["fit-logs", "{d}/log.csv", "-o", "{d}/log.csv", "--force"], "also an input of this command (log.csv)"),
    ("fit-logs-output-exists", {"log.csv": "gpus,per_gpu_batch,unpadded,seq/s\n8,4,true,100\n", "p.yaml": "mine"},
     ["fit-logs", "{d}/log.csv", "-o", "{d}/p.yaml"], "pass --force"),
    ("assign-output-is-lengths", {"l.npy": NPY_LENGTHS},
     ["assign", "squad_1_1_384", "--lengths", "{d}/l.npy", "--strategy", "spfhp", "-o", "{d}/l.npy", "--force"],
     "also an input of this command (l.npy)"),
    ("assign-output-is-histogram", {"h.npy": CSV, "l.npy": NPY_LENGTHS},
     ["assign", "{d}/h.npy", "--lengths", "{d}/l.npy", "--strategy", "spfhp", "-o", "{d}/h.npy", "--force"],
     "also an input of this command (h.npy)"),
    ("assign-output-exists", {"l.npy": NPY_LENGTHS, "p.npy": "mine"},
     ["assign", "squad_1_1_384", "--lengths", "{d}/l.npy", "--strategy", "spfhp", "-o", "{d}/p.npy"], "pass --force"),
    ("calibrate-timings-output-is-grid", {"g.jsonl": "{}\n"},
     ["calibrate", "--timings", "{d}/g.jsonl", "-o", "{d}/g.jsonl", "--force"], "also an input"),
    ("calibrate-decoder-output-exists", {"p.yaml": "mine"}, ["calibrate-decoder", "-o", "{d}/p.yaml"], "pass --force"),
    ("run-out-holds-the-scenario", {"out/s.yaml": SCENARIO, "out/.simbench-folder.json": marker({"s.yaml": "x"})},
     ["run", "{d}/out/s.yaml", "--out", "{d}/out"], "--out holds this command's input"),
    ("run-out-holds-the-histogram", {"s.yaml": SCENARIO.replace("squad_1_1_384", "out/h.csv"), "out/h.csv": CSV,
                                     "out/.simbench-folder.json": marker({"h.csv": CSV})},
     ["run", "{d}/s.yaml", "--out", "{d}/out"], "--out holds this command's input"),
    ("run-summary-edited-by-user", {"s.yaml": SCENARIO, "out/summary.md": "# s\nmy own conclusions\n",
                                    "out/.simbench-folder.json": marker({"summary.md": "# s\n"})},
     ["run", "{d}/s.yaml", "--out", "{d}/out"], "changed since simbench wrote them (summary.md)"),
    # Values no device or log can have
    ("fit-logs-seq-negative", {"log.txt": mlperf_log(["-5.0"] * 60)}, ["fit-logs", "{d}/log.txt"],
     "log.txt:3: a step's seq/s must be positive"),
    ("fit-logs-seq-zero", {"log.txt": mlperf_log(["0"] * 60)}, ["fit-logs", "{d}/log.txt"], "log.txt:3"),
    ("fit-logs-seq-mixed-sign", {"log.txt": mlperf_log(["5.0", "-5.0"] * 30)}, ["fit-logs", "{d}/log.txt"],
     "log.txt:4"),
    ("fit-logs-seq-overflow", {"log.txt": mlperf_log(["1e999"] * 60)}, ["fit-logs", "{d}/log.txt"], "log.txt:3"),
    ("fit-logs-seq-huge-int", {"log.txt": mlperf_log(["9" * 400] * 60)}, ["fit-logs", "{d}/log.txt"], "log.txt:3"),
    ("fit-logs-seq-near-max-float", {"log.txt": mlperf_log([f"{k}e307" for k in range(1, 8)] * 9)},
     ["fit-logs", "{d}/log.txt"], "log.txt:3: a step's seq/s must be positive and at most 1e+12"),
    ("fit-logs-csv-seq-1e307", {"log.csv": "gpus,per_gpu_batch,unpadded,seq/s\n" + "8,4,true,3e307\n" * 60},
     ["fit-logs", "{d}/log.csv"], "log.csv:2: a throughput of 3e+307"),
    ("fit-logs-step-seconds-subnormal", {"log.csv": "gpus,per_gpu_batch,unpadded,step_seconds\n"
                                         + "8,4,true,1e-320\n" * 60}, ["fit-logs", "{d}/log.csv"], "log.csv:2"),
    ("fit-logs-set-noise-inf", {"log.csv": "gpus,per_gpu_batch,unpadded,seq/s\n" + "8,4,true,300\n" * 60},
     ["fit-logs", "{d}/log.csv", "--set", "unpadded_noise_cv=inf"], "`unpadded_noise_cv`: must be finite"),
    ("fit-logs-set-noise-huge", {"log.csv": "gpus,per_gpu_batch,unpadded,seq/s\n" + "8,4,true,300\n" * 60},
     ["fit-logs", "{d}/log.csv", "--set", "unpadded_noise_cv=1e308", "--fit", ""], "`unpadded_noise_cv`: must be at "
                                                                                 "most 10"),
    ("fit-logs-set-rate-nan", {"log.csv": "gpus,per_gpu_batch,unpadded,seq/s\n" + "8,4,true,300\n" * 60},
     ["fit-logs", "{d}/log.csv", "--set", "linear_flops_per_s=nan"], "`linear_flops_per_s`"),
    ("simulate-set-launch-inf", {}, ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1", "--set",
                                     "kernel_launch_seconds=inf"], "`kernel_launch_seconds`: must be finite"),
    ("yaml-override-inf", {"s.yaml": scenario_with("hardware: {overrides: {step_overhead_seconds: .inf}}\n")},
     VALIDATE, "s.yaml:6"),
    ("yaml-override-1e308", {"s.yaml": scenario_with("hardware: {overrides: {kernel_launch_seconds: 1.0e+308}}\n")},
     VALIDATE, "`kernel_launch_seconds`: must be at most"),
    ("run-override-1e308", {"s.yaml": scenario_with("hardware: {overrides: {allreduce_latency_seconds: 1.0e+308}}\n")},
     ["run", "{d}/s.yaml", "--out", "{d}/out"], "allreduce_latency_seconds"),
    ("profile-inf-rate", {"p.yaml": "name: x\nsource: y\nlinear_flops_per_s: .inf\nattention_flops_per_s: 1e12\n"},
     ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1", "--hardware", "{d}/p.yaml"], "p.yaml"),
    ("sweep-axis-override-inf", {"w.yaml": SWEEP_ONE_CELL.replace("axes: {seed: [1]}",
                                                                  "axes: {hardware.overrides.kernel_launch_seconds: "
                                                                  "[0.0, .inf]}")},
     ["sweep", "{d}/w.yaml", "--dry-run"], "cell 1"),
    # Bounded after decompression; empty, truncated and corrupt binary inputs named
    ("mlperf-gzip-3gib-of-lines", {"log.txt.gz": GZIP_3_GIB_OF_LINES}, ["gumbel", "--log", "{d}/log.txt.gz"],
     "log.txt.gz: the MLPerf log holds more than 64 MiB (after decompression)"),
    ("fit-logs-gzip-3gib-of-lines", {"log.txt.gz": GZIP_3_GIB_OF_LINES}, ["fit-logs", "{d}/log.txt.gz"],
     "log.txt.gz: the MLPerf log holds more than 64 MiB (after decompression)"),
    ("mlperf-gzip-2m-step-lines", {"log.txt.gz": GZIP_2M_STEP_LINES}, ["fit-logs", "{d}/log.txt.gz"],
     "log.txt.gz:300001: more than 300,000 step and event lines"),
    ("mlperf-gzip-8gib-one-line", {"log.txt.gz": GZIP_8_GIB_ONE_LINE}, ["fit-logs", "{d}/log.txt.gz"],
     "log.txt.gz: the MLPerf log holds more than 64 MiB (after decompression)"),
    ("mlperf-one-line-over-1mib", {"log.txt": b"a" * (2**20 + 2)}, ["fit-logs", "{d}/log.txt"],
     "log.txt:1: a line longer than 1 MiB"),
    ("mlperf-event-nested-deep", {"log.txt": mlperf_log(["5.0"] * 60) + '0: :::MLLOG {"key": ' + "[" * 200_000
                                  + "]" * 200_000 + "}\n"}, ["fit-logs", "{d}/log.txt", "--after-step", "100"],
     "log.txt: only 0 steps after step 100"),
    ("build-jsonl-nested-deep", {"l.jsonl": '{"length": 5}\n{"length": ' + "[" * 200_000 + "]" * 200_000 + "}\n"},
     ["histogram", "build", "{d}/l.jsonl", "--column", "length", "--max-length", "8", "-o", "{d}/h.csv"],
     "l.jsonl:2: JSON nested too deep"),
    ("build-one-huge-line", {"l.txt": b"5" * (17 * 2**20)},
     ["histogram", "build", "{d}/l.txt", "--max-length", "8", "-o", "{d}/h.csv"], "l.txt:1: a line longer than 16 MiB"),
    ("build-npy-empty", {"l.npy": b""}, ["histogram", "build", "{d}/l.npy", "--max-length", "8", "-o", "{d}/h.csv"],
     "l.npy: the file is empty (0 bytes)"),
    ("assign-npy-empty", {"l.npy": b""},
     ["assign", "squad_1_1_384", "--lengths", "{d}/l.npy", "--strategy", "spfhp", "-o", "{d}/p.npy"],
     "l.npy: the file is empty (0 bytes)"),
    ("build-npy-truncated", {"l.npy": npy(np.arange(1000, dtype=np.int64))[:500]},
     ["histogram", "build", "{d}/l.npy", "--max-length", "8", "-o", "{d}/h.csv"],
     "l.npy: truncated: its header promises 1,000 values of int64 (8,000 bytes) but 372 bytes follow it"),
    ("build-npy-header-cut", {"l.npy": npy(np.arange(10))[:30]},
     ["histogram", "build", "{d}/l.npy", "--max-length", "8", "-o", "{d}/h.csv"], "l.npy: not a readable .npy"),
    ("build-parquet-corrupt-snappy", {"l.parquet": CORRUPT_PARQUET},
     ["histogram", "build", "{d}/l.parquet", "--column", "ids", "--max-length", "64", "-o", "{d}/h.csv"],
     "l.parquet: not a readable Parquet file: Corrupt snappy compressed data"),
    ("build-dataset-corrupt-snappy", {"data/train-0.parquet": CORRUPT_PARQUET},
     ["histogram", "build", "{d}/data", "--column", "ids", "--max-length", "64", "-o", "{d}/h.csv"],
     "train-0.parquet: not a readable Parquet file"),
    ("assign-parquet-truncated", {"l.parquet": CORRUPT_PARQUET[:-100]},
     ["assign", "squad_1_1_384", "--lengths", "{d}/l.parquet", "--column", "ids", "--strategy", "spfhp", "-o",
      "{d}/p.npy"], "l.parquet"),
    # Sweep folders: checked before any work
    ("sweep-out-is-file", {"w.yaml": SWEEP_ONE_CELL, "out": "mine"}, SWEEP_RUN, "--out is a file"),
    ("sweep-out-dev-null", {"w.yaml": SWEEP_ONE_CELL}, ["sweep", "{d}/w.yaml", "--out", "/dev/null", "--workers", "0"],
     "--out is a file (or a device)"),
    ("sweep-out-is-the-sweep", {"w.yaml": SWEEP_ONE_CELL}, ["sweep", "{d}/w.yaml", "--out", "{d}/w.yaml", "--workers",
                                                           "0"], "--out is this command's input"),
    ("sweep-out-holds-the-sweep", {"out/w.yaml": SWEEP_ONE_CELL},
     ["sweep", "{d}/out/w.yaml", "--out", "{d}/out", "--workers", "0"], "--out holds this command's input"),
    ("sweep-out-dangling-link", {"w.yaml": SWEEP_ONE_CELL, "out": Link("nowhere")}, SWEEP_RUN,
     "--out is a symbolic link to nothing"),
    ("sweep-out-dot-dot", {"w.yaml": SWEEP_ONE_CELL}, ["sweep", "{d}/w.yaml", "--out", "{d}/..", "--workers", "0"],
     "--out must name a folder"),
    ("sweep-named-dot-dot", {"w.yaml": 'name: ".."\n' + SWEEP_ONE_CELL}, ["sweep", "{d}/w.yaml", "--workers", "0"],
     "w.yaml:1: `name` names the results folder"),
    ("sweep-named-a-path", {"w.yaml": "name: ../../etc\n" + SWEEP_ONE_CELL}, ["sweep", "{d}/w.yaml", "--dry-run"],
     "w.yaml:1"),
    ("sweep-name-a-list", {"w.yaml": "name: [a, b]\n" + SWEEP_ONE_CELL}, ["sweep", "{d}/w.yaml", "--dry-run"],
     "w.yaml:1"),
    ("sweep-garbage-ledger", {"w.yaml": SWEEP_ONE_CELL, "out/sweep.json": "{garbage", "out/results/x": "mine"},
     SWEEP_RUN + ["--resume"], "sweep.json: not the JSON simbench writes"),
    ("sweep-ledger-a-list", {"w.yaml": SWEEP_ONE_CELL, "out/sweep.json": "[1, 2]"}, SWEEP_RUN + ["--resume"],
     "not the ledger simbench writes"),
    ("sweep-ledger-deep", {"w.yaml": SWEEP_ONE_CELL, "out/sweep.json": "[" * 200_000 + "]" * 200_000},
     SWEEP_RUN + ["--resume"], "sweep.json"),
    ("sweep-ledger-binary", {"w.yaml": SWEEP_ONE_CELL, "out/sweep.json": bytes(range(256))}, SWEEP_RUN + ["--resume"],
     "sweep.json"),
    ("sweep-other-sweeps-ledger", {"w.yaml": SWEEP_ONE_CELL, "out/sweep.json": '{"ledger": 1, "fingerprint": "x"}',
                                   "out/summary.md": "mine"}, SWEEP_RUN + ["--resume"], "a different sweep"),
    ("sweep-axis-key-number", {"w.yaml": SWEEP_ONE_CELL.replace("axes: {seed: [1]}", "axes: {1: [2]}")},
     ["sweep", "{d}/w.yaml", "--dry-run"], "w.yaml:6: axis key 1 is no scenario key"),
    ("sweep-axis-key-null", {"w.yaml": SWEEP_ONE_CELL.replace("axes: {seed: [1]}", "axes:\n  seed: [1]\n  ~: [2]")},
     ["sweep", "{d}/w.yaml", "--dry-run"], "w.yaml:8: axis key ~ (null)"),
    ("sweep-axis-key-empty-part", {"w.yaml": SWEEP_ONE_CELL.replace("axes: {seed: [1]}", "axes: {hardware..x: [2]}")},
     ["sweep", "{d}/w.yaml", "--dry-run"], "w.yaml:6"),
    ("sweep-cell-key-number", {"w.yaml": SWEEP_ONE_CELL + "cells:\n  - {seed: 2}\n  - {7: 1}\n"},
     ["sweep", "{d}/w.yaml", "--dry-run"], "w.yaml:9: cells[1] key 7"),
    ("sweep-report-list", {"w.yaml": SWEEP_ONE_CELL.replace("axes: {seed: [1]}", "axes: {seed: [1], devices: [1, 2]}")
                           + "report: {x: [devices], y: seed}\n"}, ["sweep", "{d}/w.yaml", "--dry-run"],
     "w.yaml:7: `report` names two swept keys"),
    ("sweep-report-not-mapping", {"w.yaml": SWEEP_ONE_CELL + "report: [seed]\n"}, ["sweep", "{d}/w.yaml", "--dry-run"],
     "w.yaml:7"),
    ("sweep-axis-through-a-name", {"w.yaml": SWEEP_ONE_CELL.replace("axes: {seed: [1]}",
                                                                    "axes: {model.layers: [2]}")},
     ["sweep", "{d}/w.yaml", "--dry-run"], "cell 0 (model.layers=2): model:"),
    ("sweep-axis-value-mapping", {"w.yaml": SWEEP_ONE_CELL.replace("axes: {seed: [1]}", "axes: {seed: [{a: 1}]}")},
     ["sweep", "{d}/w.yaml", "--dry-run"], "cell 0"),
    ("sweep-axis-value-bool", {"w.yaml": SWEEP_ONE_CELL.replace("axes: {seed: [1]}", "axes: {steps: [2, true]}")},
     ["sweep", "{d}/w.yaml", "--dry-run"], "cell 1 (steps=True)"),
    ("sweep-axis-devices-text", {"w.yaml": SWEEP_ONE_CELL.replace("axes: {seed: [1]}", "axes: {devices: [1, x]}")},
     ["sweep", "{d}/w.yaml", "--dry-run"], "cell 1 (devices=x)"),
    ("sweep-axis-date", {"w.yaml": SWEEP_ONE_CELL.replace("axes: {seed: [1]}", "axes: {seed: [2024-01-01]}")},
     ["sweep", "{d}/w.yaml", "--dry-run"], "cell 0"),
    ("sweep-scheduler-not-a-url", {"w.yaml": SWEEP_ONE_CELL}, SWEEP_RUN + ["--scheduler", "not a url"],
     "--scheduler must be a Dask scheduler's address"),
    ("sweep-scheduler-bad-port", {"w.yaml": SWEEP_ONE_CELL}, SWEEP_RUN + ["--scheduler", "tcp://localhost:99999"],
     "--scheduler must be"),
    ("sweep-scheduler-http", {"w.yaml": SWEEP_ONE_CELL}, SWEEP_RUN + ["--scheduler", "http://localhost:8786"],
     "--scheduler must be"),
    ("sweep-scheduler-unreachable", {"w.yaml": SWEEP_ONE_CELL}, SWEEP_RUN + ["--scheduler", "tcp://127.0.0.1:9"],
     "cannot reach the Dask scheduler at tcp://127.0.0.1:9 (from --scheduler) within 5 s"),
    ("sweep-scheduler-environment", {"w.yaml": SWEEP_ONE_CELL}, ["sweep", "{d}/w.yaml", "--out", "{d}/out"],
     "DASK_SCHEDULER_ADDRESS must be a Dask scheduler's address", {"DASK_SCHEDULER_ADDRESS": "garbage"}),
    # Layouts as written: no booleans or floats read as counts, and the devices dp makes held to the bound
    ("yaml-zero-stage-bool", {"s.yaml": scenario_with("parallel: {zero_stage: true}\n")}, VALIDATE,
     "s.yaml:6: parallel.zero_stage"),
    ("yaml-zero-stage-float", {"s.yaml": scenario_with("parallel: {zero_stage: 3.0}\n")}, VALIDATE,
     "s.yaml:6: parallel.zero_stage"),
    ("yaml-tp-bool", {"s.yaml": scenario_with("parallel: {tp: true}\n")}, VALIDATE, "s.yaml:6: parallel.tp"),
    ("yaml-dp-beyond-the-devices-bound", {"s.yaml": SCENARIO.replace("devices: [1]\n", "")
                                          + "parallel: {dp: 1099511627776}\n"}, VALIDATE, "s.yaml:5: parallel.dp"),
    ("sweep-axis-zero-stage-bool", {"w.yaml": SWEEP_ONE_CELL.replace("axes: {seed: [1]}",
                                                                     "axes: {parallel.zero_stage: [1, true]}")},
     ["sweep", "{d}/w.yaml", "--dry-run"], "cell 1 (parallel.zero_stage=True)"),
    ("measure-one-repeat", {}, ["measure", "squad_1_1_384", "--repeats", "1"], "--repeats must be at least 2"),
]


def materialise(folder: Path, files: dict) -> dict[Path, bytes]:
    written = {}
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Link):
            path.symlink_to(content)
            written[path] = content
            continue
        data = content if isinstance(content, bytes) else content.encode()
        path.write_bytes(data)
        written[path] = data
    return written


@pytest.mark.parametrize("case_id, files, argv, expected, environment",
                         [(*case, {}) if len(case) == 4 else case for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_gives_one_clean_error_and_loses_nothing(tmp_path, case_id, files, argv, expected, environment):
    run_case(tmp_path, case_id, files, argv, expected, environment)


def run_case(tmp_path, case_id, files, argv, expected, environment):
    """Run the command of a case in its own folder; require one clean InputError and every file kept."""
    folder = tmp_path / "case"
    folder.mkdir()
    before = materialise(folder, files)
    arguments = [argument.replace("{d}", str(folder)) for argument in argv]
    for path in before:  # a scenario may name a file of the case
        if path.suffix == ".yaml" and not isinstance(before[path], Link) and b"{d}" in before[path]:
            path.write_bytes(before[path].replace(b"{d}", str(folder).encode()))
            before[path] = path.read_bytes()
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(CliRunner().invoke(app, arguments, env=environment)),
                              daemon=True)
    worker.start()
    worker.join(HANG_SECONDS)
    assert outcome, f"{case_id}: no answer within {HANG_SECONDS} s"
    result = outcome[0]
    assert isinstance(result.exception, InputError), (case_id, repr(result.exception), result.output[-2000:])
    message = str(result.exception)
    assert "\n" not in message.strip() and expected.replace("{d}", str(folder)) in message, message
    for path, data in before.items():
        if isinstance(data, Link):
            assert path.is_symlink() and os.readlink(path) == data, f"{case_id}: the link {path} changed or lost"
        else:
            assert not path.is_symlink() and path.read_bytes() == data, f"{case_id}: {path} changed or lost"


# Plug-ins: third-party code is checked, not trusted. Each case installs one strategy plug-in, `plug`, from
# a module of its own (`{module}` in its source is the module's name); the watchdog is 2 s.
LOSSY_PACKER = """
import numpy as np
from simbench.strategies import Strategy
from simbench.strategies.packing import Packing

def pack(histogram, max_length, max_depth, options):
    counts = histogram.counts // 2  # drops half the sequences
    return Packing.from_rows("plug", max_length, max_depth, histogram.lengths[counts > 0], counts[counts > 0])

STRATEGY = Strategy("plug", "drops half", pack)
"""
NOT_A_PACKING = LOSSY_PACKER.replace("    counts = histogram.counts // 2  # drops half the sequences\n",
                                     "    return {'packs': []}\n")
SLEEPING_PACKER = LOSSY_PACKER.replace("    counts = histogram.counts // 2", "    import time; time.sleep(3600)\n"
                                       "    counts = histogram.counts")
PLUGIN_SCENARIO = SCENARIO.replace("[unpad]", "[plug]")
PLUGIN_CASES = [
    ("plugin-drops-half", LOSSY_PACKER, {"s.yaml": PLUGIN_SCENARIO}, ["run", "{d}/s.yaml", "--out", "{d}/out"],
     "the plug-in strategy 'plug' returned a packing that breaks the rule: every sequence placed exactly once"),
    ("plugin-drops-half-pack", LOSSY_PACKER, {}, ["pack", "squad_1_1_384", "--strategy", "plug"],
     "breaks the rule: every sequence placed exactly once"),
    ("plugin-returns-a-dict", NOT_A_PACKING, {}, ["pack", "squad_1_1_384", "--strategy", "plug"],
     "breaks the rule: a strategy returns a simbench.strategies.Packing; found a dict"),
    ("plugin-exits-at-import", "import sys\nsys.exit(0)\n", {"s.yaml": PLUGIN_SCENARIO}, ["validate", "{d}/s.yaml"],
     "cannot load the strategy plug-in 'plug' ({module}:STRATEGY): SystemExit: 0"),
    ("plugin-interrupts-at-import", "raise KeyboardInterrupt\n", {}, ["pack", "squad_1_1_384", "--strategy", "plug"],
     "cannot load the strategy plug-in 'plug' ({module}:STRATEGY): KeyboardInterrupt"),
    ("plugin-sleeps-at-import", "import time\ntime.sleep(3600)\n", {"s.yaml": PLUGIN_SCENARIO},
     ["validate", "{d}/s.yaml"], "loading the strategy plug-in 'plug' ({module}:STRATEGY) did not return within 2 s"),
    ("plugin-sleeps-packing", SLEEPING_PACKER, {"s.yaml": PLUGIN_SCENARIO}, ["run", "{d}/s.yaml", "--out", "{d}/out"],
     "the plug-in strategy 'plug' did not return within 2 s and was stopped"),
    ("plugin-loops-packing", LOSSY_PACKER.replace("counts = histogram.counts // 2", "while True: pass"),
     {"s.yaml": PLUGIN_SCENARIO}, ["run", "{d}/s.yaml", "--out", "{d}/out"],
     "the plug-in strategy 'plug' did not return within 2 s and was stopped"),
    ("plugin-raises-packing", LOSSY_PACKER.replace("counts = histogram.counts // 2", "raise MemoryError('x')"), {},
     ["pack", "squad_1_1_384", "--strategy", "plug"], "the plug-in strategy 'plug' failed: MemoryError: x"),
]


@pytest.mark.parametrize("case_id, source, files, argv, expected", PLUGIN_CASES, ids=[case[0] for case in PLUGIN_CASES])
def test_a_plugin_is_checked_not_trusted(tmp_path, monkeypatch, case_id, source, files, argv, expected):
    import sys
    from importlib.metadata import EntryPoint

    import simbench.registry
    from simbench.strategies import STRATEGIES, available_strategies

    module = "plugin_" + case_id.replace("-", "_")
    (tmp_path / f"{module}.py").write_text(source.replace("{module}", module))
    monkeypatch.syspath_prepend(str(tmp_path))
    available_strategies()
    monkeypatch.setattr(STRATEGIES, "entries", dict(STRATEGIES.entries))
    plugin = EntryPoint(name="plug", value=f"{module}:STRATEGY", group="simbench.strategies")
    monkeypatch.setattr(simbench.registry, "entry_points",
                        lambda group: [plugin] if group == "simbench.strategies" else [])
    monkeypatch.setenv("SIMBENCH_WORKERS", "0")
    run_case(tmp_path, case_id, files, argv, expected.replace("{module}", module), {"SIMBENCH_PLUGIN_TIMEOUT": "2"})
    sys.modules.pop(module, None)


def test_the_corpus_covers_every_command_that_reads_user_files():
    commands = {case[2][0] for case in CASES}
    assert {"pack", "bound", "validate", "run", "simulate", "sweep", "assign", "gumbel", "fit-logs", "plot",
            "histogram", "calibrate-decoder"} <= commands
    assert len(CASES) >= 100
    assert len({case[0] for case in CASES}) == len(CASES)


def test_the_guarantees_page_states_the_corpus_size():
    """docs/guarantees.md's count of cases is this file's, so that growing the corpus cannot leave it stale."""
    import re

    page = (Path(__file__).parents[1] / "docs" / "guarantees.md").read_text()
    stated = re.findall(r"the ([\d,]+) cases of `tests/test_bad_input_corpus.py`", page)
    assert stated == [f"{len(CASES) + len(PLUGIN_CASES):,}"], (stated, len(CASES) + len(PLUGIN_CASES))


# Fuzzing: whatever the bytes, a reader gives a result or an InputError, never another exception.
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda children: st.lists(children, max_size=6)
                           | st.dictionaries(st.text(max_size=6), children, max_size=6), max_leaves=30)


def read_or_refuse(reader, suffix: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"input{suffix}"
        path.write_bytes(data)
        try:
            reader(path)
        except InputError:
            pass


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.binary(max_size=400), st.text(max_size=400).map(str.encode),
                 st.lists(st.tuples(st.integers(-5, 2**21), st.integers(-5, 2**42)), max_size=8).map(
                     lambda rows: ("length,count\n" + "".join(f"{a},{b}\n" for a, b in rows)).encode())))
def test_fuzzed_csv_histograms_never_raise_anything_but_input_errors(data):
    read_or_refuse(lambda path: load_histogram(str(path)), ".csv", data)


@settings(max_examples=150, deadline=None)
@given(st.one_of(json_values.map(lambda value: json.dumps(value).encode()),
                 st.dictionaries(st.just("counts"), json_values).map(lambda value: json.dumps(value).encode())))
def test_fuzzed_json_histograms_never_raise_anything_but_input_errors(data):
    read_or_refuse(lambda path: load_histogram(str(path)), ".json", data)


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(max_size=300), json_values.map(lambda value: yaml.safe_dump(value)),
                 st.dictionaries(st.sampled_from(["name", "dataset", "strategies", "devices", "steps", "seed",
                                                  "batch_size", "model", "hardware"]), json_values, max_size=6).map(
                     lambda value: yaml.safe_dump(value))))
def test_fuzzed_scenarios_never_raise_anything_but_input_errors(text):
    read_or_refuse(load_scenarios, ".yaml", text.encode())
