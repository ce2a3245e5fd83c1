"""`simbench histogram build`: turn a file of lengths, token lists or text into a histogram CSV.

The CSV is written atomically and can be named as `dataset.histogram` in a scenario.
"""

from pathlib import Path

import typer

from simbench.commands.common import FORCE_HELP, command
from simbench.errors import InputError, writing_to

histogram_app = typer.Typer(help="Build length histograms from your own data.", no_args_is_help=True)


def build(
    input_path: Path = typer.Argument(..., metavar="INPUT",
                                      help="lengths (text, one per line, or .npy), .jsonl/.parquet, raw text, or a "
                                           "Hugging Face dataset folder (save_to_disk or Parquet shards)"),
    max_length: int = typer.Option(..., "--max-length", help="longest sequence the histogram holds"),
    output: Path = typer.Option(..., "-o", "--output", help="histogram CSV to write (length,count)"),
    column: str = typer.Option(None, "--column",
                               help="column of a .jsonl/.parquet file or dataset: lengths, token lists, text or "
                                    "chat messages"),
    split: str = typer.Option(None, "--split", help="split of a dataset folder that has several (e.g. train)"),
    tokenize: bool = typer.Option(False, "--tokenize",
                                  help="the input is raw text, one sequence per line: count tokens"),
    tokenizer_file: Path = typer.Option(None, "--tokenizer",
                                        help="Hugging Face `tokenizers` JSON file, or a tokenizer folder whose chat "
                                             "template renders chat rows (implies --tokenize)"),
    truncate: bool = typer.Option(False, "--truncate",
                                  help="cut sequences longer than --max-length instead of leaving them out"),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Count per-sequence lengths into a histogram; sequences over --max-length are reported, never dropped silently."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    from simbench.atomic import atomic_file, check_output_file
    from simbench.histogram_build import build_histogram, load_tokenizer, read_lengths

    if output.suffix.lower() == ".json":
        # Histograms are read back by suffix: a .json name would be parsed as JSON and fail.
        raise InputError(f"the histogram is written as CSV; name it .csv, not {output.name!r}")
    check_output_file(output, inputs=[input_path, tokenizer_file], force=force)
    tokenizer = load_tokenizer(tokenizer_file) if (tokenize or tokenizer_file) else None
    console = Console(stderr=True)
    size_bytes = input_path.stat().st_size if input_path.is_file() else None
    # Off outside a terminal: a pipe or CI log would keep a blank line where the transient bar was.
    with Progress(TextColumn("reading {task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task(input_path.name, total=size_bytes)
        lengths = read_lengths(input_path, column=column, tokenizer=tokenizer, split=split,
                               progress=lambda read_bytes: progress.update(task, completed=read_bytes))
    built = build_histogram(lengths, max_length, truncate=truncate, name=output.stem)
    with writing_to(output), atomic_file(output, replace=force) as temporary:
        built.histogram.to_csv(temporary)
    console.print(built.describe(), highlight=False, soft_wrap=True)
    console.print(f"wrote {output}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    histogram_app.command("build")(command(build))
    app.add_typer(histogram_app, name="histogram")
