"""``FullBatchOnly``: the warning of the samplers that are exact only on the full training set."""
from __future__ import annotations

from lightning.pytorch.utilities import rank_zero_warn

__all__ = ["FullBatchOnly"]


class FullBatchOnly:
    """Mixin of a :class:`~lit_bayes.samplers.base.SamplerModule` whose Metropolis test is exact
    only when every step sees the same energy, the one of all training points (HMC, MALA).

    A minibatch (or a process's shard of the data) makes each step target a different, rescaled
    energy, and the accept/reject step then keeps none of them. :meth:`warn_if_minibatch`, called
    with each training batch's size, warns once per sampler, naming it, the batch size, the number
    of training points and the fix.
    """

    _minibatch_warned = False

    def warn_if_minibatch(self, batch_size: int) -> None:
        """Warn (once) if a training batch of ``batch_size`` points misses some training points."""
        if self._minibatch_warned:
            return
        num_train = self.posterior.num_data or getattr(getattr(self._trainer, "datamodule", None), "num_train", None)
        if num_train is None or batch_size >= num_train:
            return
        self._minibatch_warned = True
        fix = "use a full-batch DataModule (batch_size: null)"
        if self._trainer is not None and self.trainer.world_size > 1:
            fix += " and give every process all the data (Trainer use_distributed_sampler=False)"
        rank_zero_warn(
            f"{type(self).__name__} is exact only on the full training set, but a training batch holds {batch_size} "
            f"of the {num_train} training points: each step targets a different energy and the chains do not "
            f"sample the posterior. To sample it, {fix}."
        )
