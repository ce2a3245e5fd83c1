"""What a report calls the simulator's unit: a device, or with a 4D layout a data-parallel replica of
tp x pp x cp GPUs, counted with the GPUs it stands for. Every report word for it comes from here.

    >>> from simbench.costmodels.layout import ParallelLayout
    >>> device_unit(None).count(8), device_unit(ParallelLayout(tp=8, pp=16, cp=16)).count(8)
    ('8 devices', '8 replicas (16,384 GPUs)')
"""

from __future__ import annotations

from dataclasses import dataclass

from simbench.costmodels.layout import ParallelLayout


@dataclass(frozen=True)
class DeviceUnit:
    """The unit's name and, with a layout, the GPUs one stands for (None: counts stand alone, as they always did)."""

    name: str = "device"
    gpus_each: int | None = None

    @property
    def plural(self) -> str:
        return self.name + "s"

    def words(self, count: int) -> str:
        """'device' or 'devices' for `count` of them."""
        return self.name if count == 1 else self.plural

    def count(self, count: int) -> str:
        """'8 devices'; with a layout '8 replicas (16,384 GPUs)'."""
        if self.gpus_each is None:
            return f"{count} {self.words(count)}"
        gpus = count * self.gpus_each
        return f"{count:,} {self.words(count)} ({gpus:,} GPU{'' if gpus == 1 else 's'})"

    def axis_label(self, note: str = "") -> str:
        """An axis of counts: 'devices (data parallel)'; with a layout 'replicas (data parallel, x 2,048 GPUs)'."""
        gpus = None if self.gpus_each is None else f"x {self.gpus_each:,} GPU{'' if self.gpus_each == 1 else 's'}"
        notes = [part for part in (note, gpus) if part]
        return self.plural + (f" ({', '.join(notes)})" if notes else "")

    def gpus(self, count: int) -> int | None:
        """The GPUs `count` units hold, None without a layout."""
        return None if self.gpus_each is None else count * self.gpus_each


DEVICE = DeviceUnit()


def device_unit(layout: ParallelLayout | None) -> DeviceUnit:
    """A device without a layout; with one, a replica of its tp x pp x cp GPUs."""
    return DEVICE if layout is None else DeviceUnit("replica", layout.gpus_per_replica)
