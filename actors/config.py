"""``ShellConfig``: the settings of a query's actors, with their defaults, written once.

The driver (:mod:`topology.running.deploy`) builds one from the keyword options of ``collect()`` /
``deploy()`` (:meth:`ShellConfig.of`), so a bad option fails at that call, naming it; the
same frozen object then goes to every :class:`~actors.shell.OperatorShell` (in the
:class:`~actors.stage_config.StageConfig` of its ``configure``), to the
:class:`~actors.supervisor.Supervisor` of a checkpointed query and to the jobs a
:class:`~actors.host.QueryHost` runs. Nobody else writes a default of these.

Pure Python (no Ray): it travels to the actors pickled.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .recorder import TraceSettings


@dataclass(frozen=True)
class ShellConfig:
    """The settings of a query's actors (see the module docstring)."""

    #: Messages (or source rows) per batch an actor sends, and per batch the driver feeds.
    batch_size: int = 4096
    #: Unanswered batches per edge before a sender waits (docs/runtime.md: 4–8 give ~97 %
    #: of peak throughput).
    max_in_flight: int = 8
    #: A partly filled batch waits at most this many milliseconds before it is sent.
    flush_ms: float = 20
    #: Batches per source between two checkpoints (with ``checkpoint_dir``).
    checkpoint_every: int = 4
    #: Every actor records the messages of its step here (None: no trace).
    trace: TraceSettings | None = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_in_flight", "checkpoint_every"):
            object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        ms = self.flush_ms
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms > 0:
            raise ValueError(f"flush_ms={ms!r}: the longest wait of a partly filled batch "
                             f"must be a number of milliseconds > 0 (default "
                             f"{type(self).flush_ms})")

    @property
    def flush_s(self) -> float:
        """:attr:`flush_ms` in seconds (what the actors' timers compare with)."""
        return self.flush_ms / 1000

    @classmethod
    def of(cls, **options: Any) -> ShellConfig:
        """The settings from the user's keyword options: those given (not None) replace the
        defaults; an unknown name is refused, listing the known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unknown actor setting(s) {', '.join(unknown)}: use "
                            f"{', '.join(sorted(known))}")
        return cls(**{k: v for k, v in options.items() if v is not None})

    def with_trace(self, trace: TraceSettings | None) -> ShellConfig:
        """These settings with ``trace``."""
        return dataclasses.replace(self, trace=trace)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        default = getattr(ShellConfig, name)
        raise ValueError(f"{name}={value!r}: must be a whole number >= 1 (default {default})")
    return int(value)
