"""What a set of episode rewards says, with its uncertainty: pure, no Django, no I/O.

The hub computes every aggregate it shows from the episodes themselves and never trusts a submitted mean.
The 95% confidence interval of the mean reward is:

- a Student t interval (mean ± t(0.975, n−1) · s/√n) from BOOTSTRAP_BELOW episodes on;
- below that (2 to 9 episodes), a percentile bootstrap of the mean (BOOTSTRAP_RESAMPLES resamples with a seed
  fixed by the rewards themselves, so the same rewards always give the same interval). With so few episodes
  neither interval is reliable; the row says which one it is and how many episodes it rests on;
- none for a single episode.

The t quantile is computed here (the regularized incomplete beta function by Lentz's continued fraction,
inverted by bisection) rather than pulled in with SciPy for one number.
"""

from __future__ import annotations

import math
import random
import struct
from dataclasses import dataclass
from hashlib import sha256

CONFIDENCE = 0.95
BOOTSTRAP_BELOW = 10
BOOTSTRAP_RESAMPLES = 10_000


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    std: float | None  # sample standard deviation (n − 1); None for one episode
    sem: float | None  # standard error of the mean
    ci_low: float | None
    ci_high: float | None
    ci_method: str  # "t", "bootstrap" or "none"

    def as_dict(self) -> dict:
        return {"n": self.n, "mean": self.mean, "std": self.std, "sem": self.sem, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "ci_method": self.ci_method, "confidence": CONFIDENCE}


def summarize(rewards: list[float] | tuple[float, ...]) -> Summary:
    """Mean, sample standard deviation, standard error and the 95% interval of the mean of `rewards` (finite
    numbers; at least one)."""
    values = [float(r) for r in rewards]
    n = len(values)
    if n == 0:
        raise ValueError("no episodes to summarize")
    if not all(math.isfinite(v) for v in values):
        raise ValueError("rewards must be finite numbers")
    mean = math.fsum(values) / n
    if n == 1:
        return Summary(1, mean, None, None, None, None, "none")
    # Identical rewards have no spread at all (not the rounding noise of their mean).
    std = 0.0 if min(values) == max(values) else math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    sem = std / math.sqrt(n)
    if n < BOOTSTRAP_BELOW:
        low, high = bootstrap_interval(values)
        return Summary(n, mean, std, sem, low, high, "bootstrap")
    half = t_quantile(1 - (1 - CONFIDENCE) / 2, n - 1) * sem
    return Summary(n, mean, std, sem, mean - half, mean + half, "t")


def bootstrap_interval(values: list[float], *, resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean, reproducible: the generator is seeded by the values."""
    seed = int.from_bytes(sha256(b"".join(struct.pack("<d", v) for v in values)).digest()[:8], "little")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(math.fsum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1 - CONFIDENCE) / 2
    return means[int(math.floor(tail * (resamples - 1)))], means[int(math.ceil((1 - tail) * (resamples - 1)))]


def overlaps(a: Summary, b: Summary) -> bool:
    """Whether two results' intervals overlap (a result without an interval overlaps nothing but itself)."""
    if None in (a.ci_low, a.ci_high, b.ci_low, b.ci_high):
        return a is b
    return a.ci_low <= b.ci_high and b.ci_low <= a.ci_high


# --- Student's t ------------------------------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 3e-16:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with `df` degrees of freedom (0.5 < p < 1), to about 1e-12."""
    if not 0.5 < p < 1 or df <= 0:
        raise ValueError("t_quantile takes 0.5 < p < 1 and df > 0")
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-13 * max(1.0, high):
            break
    return (low + high) / 2.0
