"""A plug-in strategy's batch source made stoppable: its own methods run under `simbench.plugins.in_time`, so one
stuck in a call ends the command with its name instead of hanging it. Built-in sources are never wrapped."""

from __future__ import annotations

import inspect

from simbench.plugins import CALL_TIMEOUT_SECONDS, in_time, timeout_seconds
from simbench.sim.plans import BatchSource


def stoppable_source(source: type[BatchSource], what: str) -> type[BatchSource]:
    """A plug-in's batch source whose own methods (those it overrides) run under `simbench.plugins.in_time`: a
    call that does not return within SIMBENCH_PLUGIN_TIMEOUT is interrupted and named, ending the command. What it
    inherits is simbench's and runs as it is (`distinct_batches` stays BatchSource's where the plug-in has none)."""

    def stoppable(name: str, member):
        function = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member

        def call(*arguments, **keywords):
            return in_time(f"{what} ({name})", lambda: function(*arguments, **keywords),
                           timeout=timeout_seconds(CALL_TIMEOUT_SECONDS))

        return type(member)(call) if isinstance(member, (staticmethod, classmethod)) else call

    own = {name: inspect.getattr_static(source, name) for name, member in vars(BatchSource).items()
           if (name == "__init__" or not name.startswith("_")) and callable(getattr(BatchSource, name))
           and not isinstance(member, property) and inspect.getattr_static(source, name) is not member}
    members = {name: stoppable(name, member) for name, member in own.items()}
    return type(source.__name__, (source,), {**members, "__module__": source.__module__,
                                            "__qualname__": source.__qualname__})
