"""The memory plan of a compiled function: where every buffer lives and when.

`fn.memory_plan()` (and `step.memory_plan()`, `tilefuse.load(...).memory_plan()`)
returns a MemoryPlan: the planned peak (the arena one call allocates), the
lower bound (the most bytes live at any one step), their ratio, the size
without planning, and one row per arena buffer. `print(plan)` shows the
table; `plan.save_png(path)` draws it."""

from dataclasses import dataclass

PHASE_COLOURS = {
    "forward": "#4c72b0",
    "backward": "#dd8452",
    "optimizer": "#55a868",
    "constant": "#8c8c8c",
}


@dataclass(frozen=True)
class PlannedBuffer:
    """One buffer of the arena. `first`..`last` are the steps it is live
    over (`last` == the number of steps: a result, read after the call;
    `pinned`: it keeps its bytes across calls, as constants and a training
    step's carried parameters do). `op` and `line` name the step that writes
    it first and the user's source line behind it, where known; `writers`
    counts the steps that write it (more than one: later kernels wrote their
    results over it in place, once its earlier value was read for the last
    time)."""

    name: str
    dtype: str
    shape: tuple
    bytes: int
    arena_bytes: int
    offset: int
    first: int
    last: int
    pinned: bool
    phase: str
    op: str
    line: str
    writers: int = 1


class MemoryPlan:
    """A program's memory plan (see the module docstring)."""

    def __init__(self, raw):
        self.peak = int(raw["peak"])
        self.lower_bound = int(raw["lower_bound"])
        self.unplanned = int(raw["unplanned"])
        self.argument_bytes = int(raw["argument_bytes"])
        self.alignment = int(raw["alignment"])
        self.steps = int(raw["steps"])
        self.step_phases = list(raw["step_phases"])
        self.buffers = [PlannedBuffer(**row) for row in raw["buffers"]]
        self._text = raw["text"]

    @property
    def ratio(self):
        """Planned peak over the lower bound (1.0 is optimal for this step
        order)."""
        return self.peak / self.lower_bound if self.lower_bound else 1.0

    def __str__(self):
        return self._text

    def __repr__(self):
        return (f"MemoryPlan(peak={self.peak}, lower_bound={self.lower_bound}, "
                f"ratio={self.ratio:.3f}, unplanned={self.unplanned}, "
                f"buffers={len(self.buffers)})")

    def live_bytes(self):
        """Bytes live in the arena at each moment -1 .. steps (-1: before
        the first step; `steps`: after the last, where results wait)."""
        live = [0] * (self.steps + 2)
        for b in self.buffers:
            for t in range(b.first, b.last + 1):
                live[t + 1] += b.arena_bytes
        return live

    def save_png(self, path, title=None):
        """Draws the plan: steps on x, arena offset on y, one rectangle per
        buffer over its live range, coloured by the phase of the step that
        writes it; a line marks the lower bound. `title` goes above the
        peak, bound and ratio. Needs matplotlib."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            from matplotlib.patches import Patch, Rectangle
        except ImportError as e:
            raise ImportError("MemoryPlan.save_png draws with matplotlib: "
                              "pip install matplotlib") from e
        mib = float(1 << 20)
        fig, ax = plt.subplots(figsize=(12, 6), dpi=110)
        for b in self.buffers:
            start = -1 if b.pinned else b.first
            ax.add_patch(Rectangle((start, b.offset / mib), b.last - start + 1,
                                   b.arena_bytes / mib,
                                   facecolor=PHASE_COLOURS.get(b.phase, "#c44e52"),
                                   edgecolor="black", linewidth=0.2, alpha=0.85))
        ax.axhline(self.lower_bound / mib, color="red", linestyle="--", linewidth=1)
        ax.set_xlim(-1, self.steps + 1)
        ax.set_ylim(0, max(self.peak, 1) / mib * 1.05)
        ax.set_xlabel("step")
        ax.set_ylabel("arena offset (MiB)")
        summary = (f"peak {self.peak / mib:.1f} MiB, lower bound {self.lower_bound / mib:.1f} "
                   f"MiB (ratio {self.ratio:.3f}), unplanned {self.unplanned / mib:.1f} MiB")
        ax.set_title(f"{title}\n{summary}" if title else summary)
        phases = [p for p in PHASE_COLOURS if any(b.phase == p for b in self.buffers)]
        handles = [Patch(color=PHASE_COLOURS[p], label=p) for p in phases]
        handles.append(plt.Line2D([], [], color="red", linestyle="--", label="lower bound"))
        ax.legend(handles=handles, loc="upper right")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
