"""What every timing run (`simbench calibrate`, `calibrate --grid`, `measure`) settles before it times anything:
torch present, the device, the un-padded attention that runs there, and a profile path that can be written.

torch is imported inside the functions: without it each says how to install it, as an InputError.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from simbench.errors import InputError
from simbench.validation import check_choice

TORCH_MISSING = "torch is not installed: pip install 'simbench-seq[torch]'"
DEFAULT_MAX_LENGTH = 128  # long enough for packing to matter, short enough for a CPU run in minutes
# Called once per timed step with the run's total number of steps, e.g. to advance a progress bar.
Progress = Callable[[int], None]


def import_torch():
    try:
        import torch
    except ImportError:
        raise InputError(TORCH_MISSING) from None
    return torch


def resolve_device(requested: str | None) -> str:
    """`cpu` or `cuda[:N]`; None means cuda when torch sees a GPU, else cpu."""
    torch = import_torch()
    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested != "cpu" and not requested.startswith("cuda"):
        raise InputError(f"device must be cpu or cuda[:N], found {requested!r}", parameter="device")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device {requested}: this torch build sees no CUDA device", parameter="device")
    return requested


# Un-padded attention kernels that exist on CUDA only.
CUDA_ONLY_ATTENTION = ("flash_varlen", "torch_varlen")


def check_unpadded_attention(name: str | None, device: str | None = None) -> str | None:
    """The un-padded attention named, checked against the choices (and, given a device, against what runs there)."""
    from simbench.calibrate.batches import UNPADDED_ATTENTION

    if name is None:
        return None
    check_choice(name, "unpadded_attention", UNPADDED_ATTENTION)
    if device is not None and not device.startswith("cuda") and name in CUDA_ONLY_ATTENTION:
        raise InputError(f"unpadded_attention {name} runs on CUDA only, not on {device}; use grouped or jagged",
                         parameter="unpadded_attention")
    return name


def check_profile_output(path: Path, *, inputs=(), force: bool = False) -> None:
    """Refuse, before minutes of timing, a profile path that cannot be written, that is one of `inputs`, or
    (unless `force`) that exists."""
    from simbench.atomic import check_output_file

    if path.is_dir():
        raise InputError("is a folder; -o names the profile file to write", source=str(path), parameter="-o")
    check_output_file(path, inputs=inputs, force=force, option="-o")
    blocking = next((parent for parent in path.absolute().parents if parent.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise InputError(f"cannot write the profile: {blocking} is a file, not a folder", source=str(path))
