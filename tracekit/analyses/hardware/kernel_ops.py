"""Which op each kernel came from, decided once for every analysis: the op that launched it in the trace
(:func:`.linking.launching_ops`: kernel → runtime launch → innermost cpu_op), or, for a kernel a CUDA/HIP graph
launch replayed (which has no launching op), the op the attribution found for it in a capture trace of the graph
(:mod:`.replay_attribution`; docs/replay.md).

``roofline``, ``hbm`` (through :mod:`.shapes`), ``kernels --by op|module`` and ``replay`` all read
:func:`kernel_ops`; the replay sources (``capture=``, ``eager_map=``) are set once per trace by
:func:`.replay_attribution.use_replay_sources`, and what was derived with other sources is dropped then.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...trace import Trace
from .linking import launching_ops
from .replay_attribution import ReplayAttribution, attribute


@dataclass
class KernelOps:
    """For every kernel row ``krow`` of the trace (row order): ``launch`` and ``oprow``, its launch and launching op
    in the trace itself (-1: none), and ``replay``, for the kernels a graph launch replayed (``replay.pos`` are their
    positions in ``krow``), the capture, launch and op the attribution found and how."""

    krow: np.ndarray
    launch: np.ndarray
    oprow: np.ndarray
    replay: ReplayAttribution

    @property
    def with_op(self) -> np.ndarray:
        """Per kernel: whether an op is known, from its launch or from the attribution."""
        out = self.oprow >= 0
        out[self.replay.pos] |= self.replay.op_row >= 0
        return out


def kernel_ops(trace: Trace) -> KernelOps:
    """:class:`KernelOps` of ``trace``, computed once (kept in ``trace.derived``) with the trace's replay sources
    (default: the capture traces beside the trace)."""
    got = trace.derived.get("kernel_ops")
    if got is None:
        krow, launch, oprow = launching_ops(trace)
        got = trace.derived["kernel_ops"] = KernelOps(krow, launch, oprow, attribute(trace, krow, launch))
    return got


__all__ = ["KernelOps", "kernel_ops"]
