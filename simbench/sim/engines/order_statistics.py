"""The order-statistics engine: the slowest of n devices drawn from one device's step-cost distribution.

When devices draw their batches independently, a step of n devices waits for the largest of n i.i.d.
step times, whose CDF is F^n: it is drawn by inversion of F at U^(1/n), so a step costs the same at
one device as at a million. F is the weighted empirical CDF of a pool of one device's step costs:
plain draws for the body, exponentially tilted draws for the far tail that large n reach (importance
weights by the balance heuristic keep the estimate of F unbiased). The other n - 1 devices, which set
the step's tokens and means, are drawn from F below the slowest: exactly up to `OTHERS_DRAWN`, beyond
with their sum's exact mean and covariance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from simbench.costmodels.noise import step_noise_factors
from simbench.sim.batching import draw_in_proportion
from simbench.sim.engines.vectorized import StepAggregates
from simbench.sim.pricing import DeviceCosts

# One device's step costs drawn untilted: the body of F, and the latency samples of the report.
PLAIN_DRAWS = 1 << 14
# Draws per tilt; each tilt centres its pool on one tail level of F.
TILTED_DRAWS = 1 << 12
# The plain pool alone resolves F down to about this many of its draws above a level.
PLAIN_TAIL_DRAWS = 16
# A step that takes the slowest of n (devices here, megabatches in megabatches.py) needs F down to a tail
# level of about 1/(100 n) (its U^(1/n) reaches 1 - 0.01/n in 1 % of steps); each tilt or stratum reaches
# this much deeper than the last, well inside the last one's draws.
DEEPEST_TAIL_PER_SLOWEST_OF = 0.01
LEVEL_RATIO = 1 / 16
# Distinct scores a tilt is solved on (bins of them beyond that many items).
SCORE_LEVELS = 4096
# Item scores (in item spreads) this close to the highest are one level with it: telling them apart would take
# tilts whose products with the scores lose the digits the importance weights need, for no difference in cost.
SCORE_TOLERANCE = 1e-6
# A tilt that leaves at most this share of an item's tilted mass below the top score level is as deep as a
# tilt goes: any larger one draws the same batches (when step costs take a few values, a tail quantile may
# sit a hair below the top score, and the tilt that centres on it is 1e20 and beyond).
BELOW_TOP_MASS = 1e-9
# Other devices drawn one by one per step; a larger cluster scales their sum to n - 1 devices.
OTHERS_DRAWN = 32
FIELDS = ("compute_seconds", "padding_seconds", "overhead_seconds", "stall_seconds", "real_tokens", "sequences",
          "masked_attention_seconds")


@dataclass(frozen=True, eq=False)
class ItemSource:
    """A device's batch is `batch_size` items drawn i.i.d. in proportion to `weights`.

    `features` (items, k) are per-item quantities whose per-batch sums predict the batch's cost (for
    sequences their length and its square); `price` maps item indices (devices, batch_size) to the
    devices' DeviceCosts of shape (1, devices). With `noise_cv`, each device's step also takes an
    independent mean-one lognormal factor (`costmodels.noise`), left out of `price`: the pool draws it,
    tilted with the batch, so that the far tail holds slow batches and slow devices alike.
    """

    weights: np.ndarray
    features: np.ndarray
    batch_size: int
    price: Callable[[np.ndarray], DeviceCosts]
    noise_cv: float = 0.0


@dataclass(frozen=True, eq=False)
class DevicePool:
    """One device's step costs as a weighted empirical distribution, sorted by total seconds.

    `cumulative_weight[r]` sums the weights of ranks 0..r, `tail[r]` the share of weight above rank r
    (summed from the top, so that levels of 1e-9 keep their digits); `prefix[f][r]` sums weight x field.
    `plain_totals` are the untilted draws' step seconds in draw order: single-device samples.
    """

    total_seconds: np.ndarray
    fields: dict[str, np.ndarray]
    cumulative_weight: np.ndarray
    tail: np.ndarray
    prefix: dict[str, np.ndarray]
    plain_totals: np.ndarray

    @classmethod
    def from_draws(cls, costs: DeviceCosts, log_weights: np.ndarray, plain_draws: int) -> DevicePool:
        totals = costs.total_seconds.ravel()
        order = np.argsort(totals, kind="stable")
        weights = np.exp(log_weights - log_weights.max())[order]
        cumulative = np.cumsum(weights)
        tail = np.concatenate([np.cumsum(weights[::-1])[::-1][1:], [0.0]]) / cumulative[-1]
        fields = {name: getattr(costs, name).ravel()[order] for name in FIELDS}
        fields["total_seconds"] = totals[order]
        prefix = {name: np.cumsum(weights * values) for name, values in fields.items()}
        return cls(totals[order], fields, cumulative, tail, prefix, totals[:plain_draws].copy())

    def slowest_rank(self, uniform: np.ndarray, devices: int) -> np.ndarray:
        """Rank of the largest of `devices` draws: the first rank whose tail share is at most 1 - U^(1/n)."""
        level = -np.expm1(np.log(uniform) / devices)
        return np.minimum(np.searchsorted(-self.tail, -level, side="left"), self.tail.size - 1)

    def ranks_up_to(self, uniform: np.ndarray, highest: np.ndarray) -> np.ndarray:
        """Ranks drawn in proportion to weight among ranks 0..highest (one `highest` per row of `uniform`)."""
        ranks = np.searchsorted(self.cumulative_weight, uniform * self.cumulative_weight[highest][:, None],
                                side="right")
        return np.minimum(ranks, highest[:, None])

    def mean_up_to(self, name: str, highest: np.ndarray) -> np.ndarray:
        return self.prefix[name][highest] / self.cumulative_weight[highest]


def build_pool(source: ItemSource, rng: np.random.Generator, largest_devices: int) -> DevicePool:
    """Plain draws of one device's batch, then tilted draws ever deeper into the tail, as `largest_devices` need.

    Each tilt centres the device's score (its batch's item scores, plus its noise draw weighted alike)
    on a tail level `LEVEL_RATIO` deeper than the last, read off the draws so far (adaptive importance
    sampling): no assumption on the shape of F.
    """
    plain_items = draw_in_proportion(source.weights, rng, (PLAIN_DRAWS, source.batch_size))
    if source.batch_size == 1 and source.weights.size <= PLAIN_DRAWS and not source.noise_cv:
        return _every_item(source, plain_items)
    plain_noise = rng.standard_normal(PLAIN_DRAWS) if source.noise_cv else np.zeros(PLAIN_DRAWS)
    plain_costs = _with_noise(source.price(plain_items), plain_noise, source.noise_cv)
    scores = _Scores.fit(source, plain_items, plain_noise, plain_costs.total_seconds.ravel())
    if scores is None:
        return DevicePool.from_draws(plain_costs, np.zeros(PLAIN_DRAWS), PLAIN_DRAWS)
    costs, device_scores, tilts, sizes = [plain_costs], [scores.of(plain_items, plain_noise)], [], [PLAIN_DRAWS]
    level, deepest = PLAIN_TAIL_DRAWS / PLAIN_DRAWS, DEEPEST_TAIL_PER_SLOWEST_OF / largest_devices
    while level > deepest:
        level = max(level * LEVEL_RATIO, deepest)
        drawn = np.concatenate(device_scores)
        target = _tail_quantile(drawn, _balance_log_weights(drawn - scores.highest, tilts, sizes), level)
        if target >= scores.highest - scores.batch_size * SCORE_TOLERANCE and not source.noise_cv:
            break  # the deepest batch there is: nothing further out to reach
        theta = scores.tilt_for_mean(target)
        tilts.append((theta, scores.log_normalizer(theta)))
        items = draw_in_proportion(_tilted_weights(source.weights, scores.item, theta, scores.top), rng,
                                   (TILTED_DRAWS, source.batch_size))
        # Tilting a standard normal by exp(t z) shifts it by t.
        noise = rng.standard_normal(TILTED_DRAWS) + theta * scores.noise if source.noise_cv else np.zeros(TILTED_DRAWS)
        costs.append(_with_noise(source.price(items), noise, source.noise_cv))
        device_scores.append(scores.of(items, noise))
        sizes.append(TILTED_DRAWS)
    drawn = np.concatenate(device_scores)
    return DevicePool.from_draws(DeviceCosts.concatenate_devices(costs),
                                 _balance_log_weights(drawn - scores.highest, tilts, sizes), PLAIN_DRAWS)


def slowest_of(pool: DevicePool, cluster_sizes: list[int], steps: int,
               rng: np.random.Generator) -> dict[int, StepAggregates]:
    """Per-step aggregates of each cluster size; one uniform per step serves every size, so a larger
    cluster's slowest device is never faster (common random numbers, as in the per-device engines)."""
    slowest_uniform = 1.0 - rng.random(steps)  # in (0, 1]: log stays finite
    others_uniform = rng.random((steps, OTHERS_DRAWN))
    aggregates = {}
    for devices in cluster_sizes:
        slowest = pool.slowest_rank(slowest_uniform, devices)
        others = devices - 1
        drawn = min(others, OTHERS_DRAWN)
        ranks = pool.ranks_up_to(others_uniform[:, :drawn], slowest)
        sums = {}
        for name, values in pool.fields.items():
            drawn_sum = values[ranks].sum(axis=1)
            if others > drawn:
                # The sum of n - 1 conditional draws: exact mean, and the drawn ones' spread scaled to n - 1.
                mean = pool.mean_up_to(name, slowest)
                drawn_sum = others * mean + np.sqrt(others / drawn) * (drawn_sum - drawn * mean)
            sums[name] = values[slowest] + drawn_sum
        aggregates[devices] = StepAggregates(
            pool.total_seconds[slowest], sums["total_seconds"] / devices,
            *(sums[name] / devices for name in FIELDS[:4]), sums["real_tokens"], sums["sequences"],
            sums["masked_attention_seconds"] / devices)
    return aggregates


def _every_item(source: ItemSource, plain_items: np.ndarray) -> DevicePool:
    """Batches of one item from a short list: F is the list itself, exact at any depth of its tail."""
    items = np.flatnonzero(source.weights > 0)
    costs = source.price(items[:, None])
    pool = DevicePool.from_draws(costs, np.log(source.weights[items]), 0)
    totals = np.zeros(source.weights.size)
    totals[items] = costs.total_seconds.ravel()
    return replace(pool, plain_totals=totals[plain_items.ravel()])


def _with_noise(costs: DeviceCosts, standard_normal: np.ndarray, cv: float) -> DeviceCosts:
    """The devices' costs times their mean-one lognormal noise factors (none when cv is 0)."""
    if not cv:
        return costs
    factors = step_noise_factors(standard_normal, cv)[None, :]
    return DeviceCosts(costs.compute_seconds * factors, costs.padding_seconds * factors,
                       costs.overhead_seconds * factors, costs.stall_seconds, costs.real_tokens, costs.sequences,
                       costs.masked_attention_seconds * factors)


@dataclass(frozen=True, eq=False)
class _Scores:
    """A device's score: the sum of its items' scores plus `noise` times its noise draw, in units where an
    item's score has mean 0 and spread 1; fitted by least squares to predict the device's step seconds.

    `top` is the highest score of an item that can be drawn; `deepest_tilt` the tilt beyond which the
    items' tilted draws no longer change (all but BELOW_TOP_MASS of each item's mass at the top level).
    """

    item: np.ndarray
    noise: float
    batch_size: int
    log_probability: np.ndarray  # of each item
    levels: tuple[np.ndarray, np.ndarray]  # the items' log-probabilities and scores, binned if many
    top: float
    deepest_tilt: float

    @classmethod
    def fit(cls, source: ItemSource, items: np.ndarray, noise: np.ndarray, totals: np.ndarray) -> _Scores | None:
        """None when step seconds do not vary (fixed shapes and no noise: the tail is the body)."""
        if np.ptp(totals) <= 1e-9 * np.abs(totals).max():
            return None
        design = np.column_stack([np.ones(totals.size), source.features[items].sum(axis=1), noise])
        coefficients = np.linalg.lstsq(design, totals, rcond=None)[0]
        score = source.features @ coefficients[1:-1]
        probability = source.weights / source.weights.sum()
        mean = probability @ score
        spread = np.sqrt(probability @ (score - mean) ** 2)
        unit = spread if spread > 0 else abs(coefficients[-1])
        if not unit > 0:
            return None
        item = (score - mean) / unit if spread > 0 else np.zeros_like(score)
        log_probability = _log_probability(source.weights)
        top = float(item[source.weights > 0].max())
        return cls(item, float(coefficients[-1] / unit), items.shape[1], log_probability,
                   _score_levels(item, source.weights, top), top, _deepest_tilt(item, log_probability, top))

    @property
    def highest(self) -> float:
        """The highest score of a device's batch, noise aside: every item at the top."""
        return self.batch_size * self.top

    def of(self, items: np.ndarray, noise: np.ndarray) -> np.ndarray:
        return self.item[items].sum(axis=1) + self.noise * noise

    def tilt_for_mean(self, target: float) -> float:
        """The tilt under which a device's mean score is `target`, or the deepest tilt where none reaches it:
        Newton steps (the tilted mean grows with theta, at the rate of the tilted variance), kept inside a
        bracket that only shrinks."""
        low, high = 0.0, self._tilt_bound(target)
        if self._device_moments(high)[0] <= target:
            return high
        theta = 0.0
        for _ in range(100):
            mean, variance = self._device_moments(theta)
            if abs(mean - target) <= 1e-9 * (1 + abs(target)) or not variance > 0:
                break
            low, high = (theta, high) if mean < target else (low, theta)
            step = theta + (target - mean) / variance
            theta = step if low < step < high else 0.5 * (low + high)
        return theta

    def log_normalizer(self, theta: float) -> float:
        """log E[exp(theta x (score - highest))] of a device: its items' and its noise's (a normal's:
        theta^2 w^2 / 2). Measured from the highest score, it stays of the order of the log-probabilities at
        the deepest tilts, where theta x score would be large enough to swallow them."""
        return (self.batch_size * _log_sum_exp(self.log_probability + theta * (self.item - self.top))
                + 0.5 * (theta * self.noise) ** 2)

    def _tilt_bound(self, target: float) -> float:
        """A tilt at least as large as the one that centres a device's score on `target` (or that goes as
        deep as any does): the tilted mean is at least the lowest level's plus theta w^2."""
        if not self.noise:
            return self.deepest_tilt
        lowest = self.batch_size * float(self.levels[1].min())
        return max(self.deepest_tilt, (target - lowest) / self.noise**2)

    def _device_moments(self, theta: float) -> tuple[float, float]:
        """Mean and variance of a device's score under the tilt (its items' levels and its noise)."""
        mean, variance = _tilted_moments(*self.levels, theta)
        return self.batch_size * mean + theta * self.noise**2, self.batch_size * variance + self.noise**2


def _deepest_tilt(score: np.ndarray, log_probability: np.ndarray, top: float) -> float:
    """The tilt that leaves at most BELOW_TOP_MASS of an item's tilted mass below the top score level (scores
    within SCORE_TOLERANCE of `top`): the next score lies a gap below, so the mass there shrinks as
    exp(-theta x gap) from its untilted odds against the top level."""
    at_top = score >= top - SCORE_TOLERANCE
    below = ~at_top & np.isfinite(log_probability)
    if not below.any():
        return 0.0
    gap = top - float(score[below].max())
    log_odds_below = _log_sum_exp(log_probability[below]) - _log_sum_exp(log_probability[at_top])
    return max(0.0, (log_odds_below - np.log(BELOW_TOP_MASS)) / gap)


def _tail_quantile(values: np.ndarray, log_weights: np.ndarray, level: float) -> float:
    """The value that a share `level` of the weight lies above."""
    order = np.argsort(values)
    weights = np.exp(log_weights[order] - log_weights.max())
    above = np.cumsum(weights[::-1])[::-1] / weights.sum()
    return float(values[order][min(np.searchsorted(-above, -level, side="left"), values.size - 1)])


def _score_levels(score: np.ndarray, weights: np.ndarray, top: float) -> tuple[np.ndarray, np.ndarray]:
    """Log-probabilities and scores of the items, merged into SCORE_LEVELS bins when there are more: the
    tilt only has to centre its draws roughly, and millions of distinct packs would make each try slow.

    The items at the top (within SCORE_TOLERANCE) keep a level of their own at `top`: a bin's mean lies
    below its highest item, and a tail quantile between the two would be out of every tilt's reach.
    """
    at_top = (score >= top - SCORE_TOLERANCE) & (weights > 0)
    below = (score < top - SCORE_TOLERANCE) & (weights > 0)
    level_weights, level_scores = _binned(score[below], weights[below], SCORE_LEVELS - 1)
    return (_log_probability(np.append(level_weights, weights[at_top].sum())),
            np.append(level_scores, top))


def _binned(score: np.ndarray, weights: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Weights and weighted mean scores of `bins` equal bins of the scores (the items themselves if fewer)."""
    if score.size <= bins:
        return weights, score
    edges = np.linspace(score.min(), score.max(), bins + 1)
    level = np.clip(np.searchsorted(edges, score, side="right") - 1, 0, bins - 1)
    level_weights = np.bincount(level, weights=weights, minlength=bins)
    used = level_weights > 0
    level_scores = np.bincount(level, weights=weights * score, minlength=bins)[used] / level_weights[used]
    return level_weights[used], level_scores


def _tilted_moments(log_probability: np.ndarray, score: np.ndarray, theta: float) -> tuple[float, float]:
    log_weights = log_probability + theta * score
    weights = np.exp(log_weights - log_weights.max())
    weights /= weights.sum()
    mean = float(weights @ score)
    return mean, float(weights @ (score - mean) ** 2)


def _tilted_weights(weights: np.ndarray, score: np.ndarray, theta: float, top: float) -> np.ndarray:
    """Weights times exp(theta x (score - top)): no item that can be drawn lies above `top`, so none overflows."""
    tilted = np.zeros(weights.shape)
    drawn = weights > 0
    tilted[drawn] = weights[drawn] * np.exp(theta * (score[drawn] - top))
    return tilted


def _log_probability(weights: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):  # items of weight 0 get log 0 = -inf: never drawn, under any tilt
        return np.log(weights / weights.sum())


def _balance_log_weights(device_scores: np.ndarray, tilts: list[tuple[float, float]], sizes: list[int]) -> np.ndarray:
    """log(p / g) of each draw, g the mixture of the plain and tilted densities in proportion to their draws.

    `device_scores` are measured from the highest batch's score, as the tilts' log-normalizers are: at deep
    tilts theta x score and the normalizer are both huge, and their difference would lose every digit.
    """
    shares = np.log(np.asarray(sizes, dtype=np.float64) / sum(sizes))
    # Density ratio q_k / p of a device: exp(theta_k score - log normalizer_k); the plain pool's is 1.
    thetas = np.array([0.0, *(theta for theta, _ in tilts)])
    log_normalizers = np.array([0.0, *(log_z for _, log_z in tilts)])
    terms = shares[None, :] + device_scores[:, None] * thetas[None, :] - log_normalizers[None, :]
    return -_log_sum_exp(terms, axis=1)


def _log_sum_exp(values: np.ndarray, axis=None):
    peak = np.max(values, axis=axis, keepdims=True)
    total = np.log(np.sum(np.exp(values - peak), axis=axis, keepdims=True)) + peak
    return total.item() if axis is None else np.squeeze(total, axis=axis)
