"""The synthetic tweet stream: seeded, power-law users and hashtags, bursty.

Every record is a pure function of ``(seed, partition, offset)``: records are
made in blocks of :data:`BLOCK` offsets, each block from its own seeded
generator. So a partition reopened at any offset replays exactly what it
handed out before, which recovery and the contract tests rely on.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np

from pulsegraph.ingest.sources.base import RateLimiter, Record, SourcePartition

BLOCK = 1024
# Zipf exponents: who tweets and who is mentioned are heavy-tailed, as in
# Twitter samples (a few accounts draw most mentions); tags even more so.
AUTHOR_EXPONENT = 0.9
MENTION_EXPONENT = 1.1
TAG_EXPONENT = 1.2
# The synthetic clock: events are stamped as if emitted at 1,000/s per partition from this instant.
BASE_TS = 1_764_460_800.0
NOMINAL_RATE = 1000.0


def _zipf_cdf(n: int, exponent: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


def _draw(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF samples for the uniforms ``u``, in their order: the same as ``searchsorted(cdf, u)``,
    but searched in sorted order, so consecutive searches walk nearby parts of a 3 M-entry CDF."""
    order = np.argsort(u)
    out = np.empty(len(u), dtype=np.int64)
    out[order] = np.searchsorted(cdf, u[order])
    return out


def burst_profile(t: float) -> float:
    """Rate multiplier with mean 1: a 3x burst for 1 s of every 10 s, and a gentle wave."""
    base = 3.0 if (t % 10.0) < 1.0 else 7.0 / 9.0
    return base * (1.0 + 0.2 * math.sin(2 * math.pi * t / 30.0))


class SyntheticPartition(SourcePartition):
    """One partition of the synthetic stream; resumes at the first offset not yet handed out."""

    def __init__(self, spec, index: int, start: int) -> None:
        self.name = f"synthetic:{index}"
        self._seed = spec.seed
        self._index = index
        self._next = start
        n_parts = max(spec.partitions, 1)
        self._end = None
        if spec.limit is not None:
            self._end = spec.limit // n_parts + (1 if index < spec.limit % n_parts else 0)
        rate = spec.rate / n_parts if spec.rate else None
        self._limiter = RateLimiter(rate, burst_profile)
        self._users = spec.users
        self._hashtags = spec.hashtags
        self._author_cdf = _zipf_cdf(spec.users, AUTHOR_EXPONENT)
        self._mention_cdf = _zipf_cdf(spec.users, MENTION_EXPONENT)
        self._tag_cdf = _zipf_cdf(spec.hashtags, TAG_EXPONENT)
        self._encoder = msgspec.json.Encoder()
        self._block_no = -1
        self._block: list[bytes] = []

    def position(self) -> int:
        return self._next

    def exhausted(self) -> bool:
        return self._end is not None and self._next >= self._end

    def next_batch(self, max_records: int) -> list[Record]:
        if self._end is not None:
            max_records = min(max_records, self._end - self._next)
        n = self._limiter.take(max(max_records, 0))
        out: list[Record] = []
        while len(out) < n:
            block_no, i = divmod(self._next, BLOCK)
            block = self._make_block(block_no)
            take = min(n - len(out), BLOCK - i)
            start = block_no * BLOCK + i
            out.extend(map(Record, range(start, start + take), block[i : i + take]))
            self._next += take
        return out

    def _make_block(self, block_no: int) -> list[bytes]:
        if block_no == self._block_no:
            return self._block
        rng = np.random.default_rng([self._seed, self._index, block_no])
        authors = _draw(self._author_cdf, rng.random(BLOCK))
        n_mentions = rng.choice(4, size=BLOCK, p=[0.35, 0.4, 0.18, 0.07])
        n_tags = rng.choice(3, size=BLOCK, p=[0.5, 0.35, 0.15])
        mentions = _draw(self._mention_cdf, rng.random(int(n_mentions.sum())))
        tags = _draw(self._tag_cdf, rng.random(int(n_tags.sum())))
        # A trending tag per block of the stream: bursts of topics, not only of volume.
        trending = int(rng.integers(0, self._hashtags))
        tags[rng.random(tags.size) < 0.1] = trending
        # Python ints from here on: indexing NumPy arrays one scalar at a time was most of a block's cost.
        authors_, n_mentions_, n_tags_ = authors.tolist(), n_mentions.tolist(), n_tags.tolist()
        mentions_, tags_ = mentions.tolist(), tags.tolist()
        encode = self._encoder.encode
        first = block_no * BLOCK
        mi = ti = 0
        block = []
        for k in range(BLOCK):
            user = authors_[k]
            m = mentions_[mi : mi + n_mentions_[k]]
            t = tags_[ti : ti + n_tags_[k]]
            mi += n_mentions_[k]
            ti += n_tags_[k]
            block.append(encode({
                "user": f"user{user}",
                "mentions": [f"user{x}" for x in m if x != user],
                "hashtags": [f"tag{x}" for x in t],
                "text": "synthetic tweet",
                "ts": BASE_TS + (first + k) / NOMINAL_RATE,
            }))
        self._block_no, self._block = block_no, block
        return block
