"""The README's table of the main job (`simbench run wiki512`), written from a run's `summary.json`, so
that the figures the README shows are the ones the code computes; CI compares the two after each run.

    python -m simbench.report.main_job_table reports/wiki512/summary.json            # print the table
    python -m simbench.report.main_job_table reports/wiki512/summary.json --check README.md
    python -m simbench.report.main_job_table reports/wiki512/summary.json --write README.md
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

SECTION = "main-job-table"  # the README's generated section (simbench.report.docs_pages markers)
STRATEGIES = ("none", "sort", "greedy:max", "spfhp:3", "nnlshp:3", "optimal:3", "packed-varlen:lpfhp:max", "unpad",
              "unpad-exchange", "unpad-exchange-overlap")
DEVICES = (1, 2, 32, 2048)


def _name(record: dict) -> str:
    """A strategy's label, with what it is where the label does not say: padding, or the packer it runs."""
    label, packer = record["strategy"], record.get("packer")
    if label == "none":
        return "none (padding)"
    if isinstance(packer, str) and packer not in label.split(":"):
        return f"{label} ({packer})"
    return label


def _gap(packing: dict) -> str:
    """The packing's distance to the LP bound at its depth: in packs where it rounds to 0.00 %."""
    gap, bound = packing.get("gap_to_bound"), packing.get("lower_bound_packs")
    if gap is None or bound is None or math.isnan(gap) or packing.get("packing_factor", 0) <= 1:
        return ""
    if round(100 * gap, 2) == 0:
        extra = round(packing["packs"] - bound)
        if extra <= 0:
            return "0: proven optimal"
        return f"{extra:,} pack" + ("" if extra == 1 else "s")
    return f"{100 * gap:.1f} %" if gap >= 0.01 else f"{100 * gap:.2f} %"


def main_job_table(summary: dict, strategies: tuple[str, ...] = STRATEGIES, devices: tuple[int, ...] = DEVICES) -> str:
    """Speed-up over padding at `devices`, packs and gap to the LP bound for `strategies`, as Markdown.

    A KeyError names a strategy or device count the summary does not hold.
    """
    speedups = {(row["strategy"], row["devices"]): row for row in summary["scaling"]}
    packings = {row["label"]: row for row in summary["packing"]}
    header = ["strategy", f"{devices[0]} device" + ("" if devices[0] == 1 else "s"), *map(str, devices[1:]),
              "packs", "gap to LP bound"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for strategy in strategies:
        missing = [count for count in devices if (strategy, count) not in speedups]
        if missing:
            raise KeyError(f"the summary has no speed-up of {strategy!r} at {missing} devices")
        cells = [_name(speedups[(strategy, devices[0])]),
                 *(f"{speedups[(strategy, count)]['speedup']:.3f}" for count in devices)]
        packing = packings.get(strategy)
        cells += [f"{packing['packs']:,}", _gap(packing)] if packing else ["", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(arguments: list[str] | None = None) -> int:
    from simbench.report.docs_pages import replace_section, section

    arguments = sys.argv[1:] if arguments is None else arguments
    if len(arguments) not in (1, 3) or len(arguments) == 3 and arguments[1] not in ("--check", "--write"):
        print(__doc__, file=sys.stderr)
        return 2
    summary_path = Path(arguments[0])
    table = main_job_table(json.loads(summary_path.read_text()))
    if len(arguments) == 1:
        print(table, end="")
        return 0
    readme = Path(arguments[2])
    text = readme.read_text()
    if arguments[1] == "--write":
        readme.write_text(replace_section(text, SECTION, table))
        return 0
    if section(text, SECTION) != table:
        print(f"{readme}'s main-job table differs from the one {summary_path} gives; the run's table:\n\n{table}\n"
              f"Update it with `python -m simbench.report.main_job_table {summary_path} --write {readme}` "
              "(and the prose beside it if the story changed).", file=sys.stderr)
        return 1
    print(f"{readme}'s main-job table matches {summary_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
