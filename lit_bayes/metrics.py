"""torchmetrics Metrics for posterior predictives (their states sync across processes)."""
from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

__all__ = [
    "NLPD",
    "BrierScore",
    "OODDetection",
    "PerSampleAccuracy",
    "PerSampleECE",
    "PerSampleRMSE",
    "auroc",
    "average_precision",
]


class NLPD(Metric):
    """Negative log predictive density, ``-(1/N) sum_i log p_bar(y_i | x_i)``.

    ``update`` takes log p_bar(y_i | x_i) per point, already marginalised over samples in
    log space (log-mean-exp, :func:`lit_bayes.predictive.marginal_predictive`).
    """

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, log_prob_target: Tensor) -> None:
        self.total -= log_prob_target.double().sum()
        self.count += log_prob_target.numel()

    def compute(self) -> Tensor:
        return self.total / self.count


class BrierScore(Metric):
    """Multiclass Brier score ``(1/N) sum_i ||p_bar(. | x_i) - onehot(y_i)||^2``."""

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, probs: Tensor, target: Tensor) -> None:
        onehot = torch.nn.functional.one_hot(target.long(), probs.shape[-1]).to(probs.dtype)
        self.total += ((probs - onehot) ** 2).sum().double()
        self.count += target.numel()

    def compute(self) -> Tensor:
        return self.total / self.count


class PerSampleECE(Metric):
    """Mean over S samples of each sample's own top-label ECE (``n_bins`` equal-width bins).

    The pbnn convention (feynman-kac spec tables): every sample is scored alone, then the
    S ECEs are averaged. It ignores the calibration gained by averaging predictives.
    """

    full_state_update = False

    def __init__(self, num_samples: int, n_bins: int = 15, **kwargs) -> None:
        super().__init__(**kwargs)
        self.n_bins = n_bins
        for name in ("count", "confidence", "accuracy"):
            self.add_state(name, default=torch.zeros(num_samples, n_bins, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, sample_probs: Tensor, target: Tensor) -> None:
        """``sample_probs`` (S, B, C) class probabilities of each sample."""
        conf, pred = sample_probs.max(-1)
        correct = (pred == target.unsqueeze(0)).double()
        bins = (conf * self.n_bins).long().clamp_(max=self.n_bins - 1)
        self.count.scatter_add_(1, bins, torch.ones_like(correct))
        self.confidence.scatter_add_(1, bins, conf.double())
        self.accuracy.scatter_add_(1, bins, correct)

    def compute(self) -> Tensor:
        total = self.count.sum(1, keepdim=True)
        gap = (self.confidence - self.accuracy).abs() / total
        return gap.sum(1).mean()


class PerSampleAccuracy(Metric):
    """Mean over S samples of each sample's own argmax accuracy (pbnn's convention)."""

    full_state_update = False

    def __init__(self, num_samples: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("correct", default=torch.zeros(num_samples, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, sample_probs: Tensor, target: Tensor) -> None:
        """``sample_probs`` (S, B, C) class probabilities of each sample."""
        self.correct += (sample_probs.argmax(-1) == target.unsqueeze(0)).double().sum(1)
        self.count += target.numel()

    def compute(self) -> Tensor:
        return (self.correct / self.count).mean()


class PerSampleRMSE(Metric):
    """Mean over S samples of each sample's own RMSE, ``(1/S) sum_s sqrt(mean_i (f_s(x_i) - y_i)^2)``
    (feynman-kac spec §6.0: pbnn's RMSE, against the noise-free function for its synthetic data)."""

    full_state_update = False

    def __init__(self, num_samples: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("squared", default=torch.zeros(num_samples, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, sample_means: Tensor, target: Tensor) -> None:
        """``sample_means`` (S, B) each sample's predicted mean."""
        self.squared += ((sample_means.double() - target.double().unsqueeze(0)) ** 2).sum(1)
        self.count += target.numel()

    def compute(self) -> Tensor:
        return (self.squared / self.count).sqrt().mean()


def _check_scores(scores: Tensor, positive: Tensor) -> tuple[Tensor, Tensor]:
    if scores.dim() != 1 or positive.shape != scores.shape:
        raise ValueError(f"scores and positive must be 1-d of one length, got shapes {tuple(scores.shape)} "
                         f"and {tuple(positive.shape)}")
    if not torch.isfinite(scores).all():
        raise ValueError("scores contain NaN or infinite values")
    positive = positive.bool()
    if positive.all() or not positive.any():
        raise ValueError(f"positive must mark at least one positive and one negative point, got "
                         f"{int(positive.sum())} positives among {positive.numel()}")
    return scores.double(), positive


def auroc(scores: Tensor, positive: Tensor) -> Tensor:
    """Area under the ROC curve of ``scores`` (higher: more likely positive) for the labels
    ``positive`` (bool), computed exactly from ranks (the Mann-Whitney U statistic):

        AUROC = (sum of the positives' ranks - P (P + 1) / 2) / (P N)

    for P positives and N negatives, tied scores sharing their mean rank (a tie counts 1/2).
    1: every positive scores above every negative; 0: below; 0.5: no separation.
    """
    scores, positive = _check_scores(scores, positive)
    _, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()  # the 1-based rank of each distinct score's last copy
    mean_rank = ends - (counts.double() - 1) / 2
    num_pos = int(positive.sum())
    num_neg = positive.numel() - num_pos
    rank_sum = mean_rank[inverse][positive].sum()
    return (rank_sum - num_pos * (num_pos + 1) / 2) / (num_pos * num_neg)


def average_precision(scores: Tensor, positive: Tensor) -> Tensor:
    """Area under the precision-recall curve of ``scores`` for the labels ``positive`` (bool), as
    the average precision over the distinct thresholds t (scikit-learn's and torchmetrics' definition):

        AP = sum_t (R_t - R_t') P_t

    where P_t and R_t are the precision and recall of "score >= t" and t' is the next higher
    threshold (R = 0 above the highest). Tied scores pass a threshold together. 1 for a perfect
    ranking; the positives' share of the points when all scores tie.
    """
    scores, positive = _check_scores(scores, positive)
    distinct, inverse = torch.unique(scores, return_inverse=True)  # ascending
    num = distinct.numel()
    pos_at = torch.zeros(num, dtype=torch.float64).index_add_(0, inverse, positive.double())
    all_at = torch.zeros(num, dtype=torch.float64).index_add_(0, inverse, torch.ones_like(scores))
    true_pos = pos_at.flip(0).cumsum(0)  # points scoring >= each threshold, thresholds descending
    predicted = all_at.flip(0).cumsum(0)
    recall = true_pos / true_pos[-1]
    gain = torch.diff(recall, prepend=recall.new_zeros(1))
    return (gain * true_pos / predicted).sum()


class OODDetection(Metric):
    """AUROC and AUPR of a score (predictive entropy, mutual information) that should be higher on
    out-of-distribution points (the positives) than on in-distribution ones (:func:`auroc`,
    :func:`average_precision`). ``update(scores, out_of_distribution)`` adds a batch of one kind;
    ``compute()`` returns ``{"auroc": ..., "aupr": ...}``. Scores are kept (a list state), so
    processes sync them all.
    """

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("positive", default=[], dist_reduce_fx="cat")

    def update(self, scores: Tensor, out_of_distribution: bool) -> None:
        self.scores.append(scores.detach().flatten().double())
        self.positive.append(torch.full((scores.numel(),), bool(out_of_distribution), device=scores.device))

    def compute(self) -> dict[str, Tensor]:
        scores, positive = dim_zero_cat(self.scores).cpu(), dim_zero_cat(self.positive).cpu()
        return {"auroc": auroc(scores, positive), "aupr": average_precision(scores, positive)}
