"""``RunSummary``: writes ``summary.json`` into the run's log directory (DESIGN.md, results)."""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback

from lit_bayes.validation import check_writable_directory

__all__ = ["RunSummary"]


def _number(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


class RunSummary(Callback):
    """At the end of fit and of test, writes ``{"sampler", "dataset", "seed", "steps", "wall_time_s",
    "wall_time_segment_s", "metrics": {...}}`` to ``<log_dir>/summary.json`` (merged with what an
    earlier stage of the same run wrote). Metrics are every value in
    ``trainer.callback_metrics`` plus what callbacks add through ``summary_metrics()``, and
    ``best/<monitor>``, the best value a monitoring checkpoint callback has seen. Callbacks with a
    ``summary_section(trainer, pl_module)`` add top-level blocks (:class:`RunHealth`: ``health``).

    Wall time: ``wall_time_segment_s`` is the seconds of this process's segment, from the start of fit
    (or of test, without a fit) to the write; ``wall_time_s`` adds the wall time of the segments a
    resumed fit continues, which checkpoints carry (this callback's state: the run's wall time when the
    checkpoint was written, so an earlier segment counts up to its last checkpoint, without the test that
    followed it). Without a resume the two are equal, also when the test restores the best checkpoint
    (a test's restore does not resume the fit's clock).
    """

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory
        self._start = None
        self._earlier = 0.0  # wall time of the segments before this one (from the checkpoint resumed)
        self._stage: str | None = None
        self.path: Path | None = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        # on every process: trainer.log_dir is a collective call under DDP
        self.path = Path(self.directory or trainer.log_dir or trainer.default_root_dir) / "summary.json"
        if trainer.is_global_zero:  # summary.json is written after the whole run: refuse a read-only place now
            check_writable_directory("RunSummary directory (summary.directory)", self.path.parent)
        self._stage = stage  # Lightning restores a checkpoint's callback states after setup
        if stage == "fit":
            self._earlier = 0.0  # a checkpoint restored after setup sets it (load_state_dict)

    def _segment(self) -> float:
        return time.perf_counter() - self._start if self._start is not None else 0.0

    def state_dict(self) -> dict[str, float]:
        return {"wall_time_s": self._earlier + self._segment()}

    def load_state_dict(self, state_dict: dict[str, float]) -> None:
        if self._stage == "fit":  # a resumed fit; a test of the best checkpoint keeps this run's clock
            self._earlier = float(state_dict["wall_time_s"])

    def on_fit_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()

    def on_test_start(self, trainer, pl_module) -> None:
        if self._start is None:
            self._start = time.perf_counter()

    def _write(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        summary = json.loads(self.path.read_text()) if self.path.exists() else {"metrics": {}}
        metrics = {k: _number(v) for k, v in trainer.callback_metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
        for callback in trainer.callbacks:
            if hasattr(callback, "summary_section"):  # whole blocks, e.g. RunHealth's "health"
                summary.update(callback.summary_section(trainer, pl_module))
            if hasattr(callback, "summary_metrics"):
                metrics.update({k: _number(v) for k, v in callback.summary_metrics().items()})
            if getattr(callback, "monitor", None) and getattr(callback, "best_model_score", None) is not None:
                metrics[f"best/{callback.monitor}"] = _number(callback.best_model_score)  # a ModelCheckpoint's
        datamodule = getattr(trainer, "datamodule", None)
        # read once: both figures end at the same instant; None when neither fit nor test started
        segment = None if self._start is None else round(self._segment(), 3)
        summary.update(
            sampler=type(pl_module).__name__,
            dataset=type(datamodule).__name__ if datamodule is not None else None,
            seed=getattr(pl_module, "seed", None),
            steps=int(trainer.global_step),
            wall_time_s=None if segment is None else round(self._earlier + segment, 3),
            wall_time_segment_s=segment,
        )
        summary["metrics"].update(metrics)
        tmp = self.path.with_name("summary.json.tmp")
        tmp.write_text(json.dumps(summary, indent=2, sort_keys=True))
        os.replace(tmp, self.path)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._write(trainer, pl_module)

    def on_test_end(self, trainer, pl_module) -> None:
        self._write(trainer, pl_module)
