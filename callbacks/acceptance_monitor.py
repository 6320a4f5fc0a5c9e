"""``AcceptanceMonitor``: Metropolis acceptance rates per block, node and layer."""
from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback
from torch import Tensor

__all__ = ["AcceptanceMonitor"]


def _group_means(rates: Tensor, labels: list[str]) -> dict[str, float]:
    """Mean of the per-block rates within each label (the FNBG code's per-layer convention)."""
    out: dict[str, list[float]] = {}
    for rate, label in zip(rates.tolist(), labels):
        out.setdefault(label, []).append(rate)
    return {label: sum(v) / len(v) for label, v in out.items()}


class AcceptanceMonitor(Callback):
    """Reads ``pl_module.acceptance_counts()`` of MH-type samplers after every step:
    ``{"accepted": (C, blocks) counts, "proposed": proposals per block so far,
    "layers": a layer label per block, "nodes": a node label per block}``.

    Reports the running rate (all steps) and the post-burn-in window rate (steps after
    the sampler's ``burn_in``), per block, node and layer, averaged over chains. The
    running overall rate is in the progress bar; ``summary_metrics()`` gives
    ``accept/overall`` and ``accept/layer_<label>`` (window rates once there is a window)
    for summary.json. The window's starting counts and the latest counts are checkpointed,
    so a run restored at its end (no further step) still reports its rates.
    """

    def __init__(self) -> None:
        self.window_start: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        counts = pl_module.acceptance_counts()
        counts = {**counts, "accepted": counts["accepted"].detach().double().cpu()}
        if self.window_start is None and trainer.global_step >= pl_module.burn_in:
            self.window_start = {"accepted": counts["accepted"].clone(), "proposed": counts["proposed"]}
        self.last = counts
        rate = counts["accepted"].sum() / max(counts["proposed"], 1) / counts["accepted"].numel()
        pl_module.log_train({"accept": rate}, prog_bar=("accept",))

    def block_rates(self, window: bool = True) -> Tensor | None:
        """Acceptance rate of every block, averaged over chains (window or running)."""
        if self.last is None:
            return None
        accepted, proposed = self.last["accepted"], self.last["proposed"]
        if window and self.window_start is not None and proposed > self.window_start["proposed"]:
            accepted = accepted - self.window_start["accepted"]
            proposed = proposed - self.window_start["proposed"]
        return accepted.mean(0) / max(proposed, 1)

    def rates(self, window: bool = True) -> dict[str, dict[str, float]]:
        """``{"block": {...}, "node": {...}, "layer": {...}}`` acceptance rates."""
        blocks = self.block_rates(window)
        if blocks is None:
            return {"block": {}, "node": {}, "layer": {}}
        return {
            "block": {str(i): float(r) for i, r in enumerate(blocks)},
            "node": _group_means(blocks, self.last["nodes"]),
            "layer": _group_means(blocks, self.last["layers"]),
        }

    def summary_metrics(self) -> dict[str, float]:
        blocks = self.block_rates()
        if blocks is None:
            return {}
        metrics = {"accept/overall": float(blocks.mean())}
        metrics.update({f"accept/layer_{k}": v for k, v in self.rates()["layer"].items()})
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"window_start": self.window_start, "last": self.last}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.window_start = state_dict["window_start"]
        self.last = state_dict.get("last")  # absent from checkpoints written before it was kept
