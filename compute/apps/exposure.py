"""Controversial topics by K-exposure (Romero, Meeder, Kleinberg, WWW 2011, as Kineograph ran it).

For a hashtag h and a user u, u's *exposures* to h are the distinct users u
mentions (live ``mentions`` edges u -> v) who tagged h (live ``tags`` edge
v -> h). A user who tagged h adopted it with k = the exposures that adopted
*before* u did; a user who never tagged h reached every k up to all its
exposures. The exposure curve is

    p_h(k) = (users who adopted h with exactly k exposures)
             / (users who ever had at least k exposures to h before adopting, or ever if they never did)

for k = 1..8 (``None`` where nobody reached k). Its **persistence** is
Romero et al.'s F: the area under the curve over the area of the rectangle as
high as its peak, ``F = sum_k p(k) / (8 * max_k p(k))`` with undefined points
counted as 0, and 0 for an empty curve. F is near 1 when repeated exposure
keeps paying off (the sticky, controversial topics: politics in the paper), and
small when adoption peaks at one or two exposures and falls off (idioms, memes).

**Before** is the time of the tagging tweet itself: every edge keeps the
earliest event time among its adds (``first_ts``, folded with ``min`` in the
shards, so it is a pure function of the epoch vector like the edge sums), and
adopters are ordered by that time, then by user name. Where a graph carries no
edge times (``+inf``), the order falls back to the epoch the edge went live in,
then the user's last tweet time: an *adoption stamp* (epoch, last tweet time), taken
when the tagging went live, and kept only for taggings without a time (a stream of
tweets has none: its stamps were 24 bytes per tags edge, each a copy of what the edge
knows, and a copy of them all an epoch). Stamps are kept in the compute checkpoint
(see :meth:`Exposure.state_dict`).

Per epoch only the hashtags whose adopters or whose adopters' mentioners changed
are recounted.
"""

from __future__ import annotations

import itertools
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from pulsegraph.base.arrays import unique
from pulsegraph.compute.apps.base import AppDelta, AppGraph, Application, expand
from pulsegraph.compute.apps.topics import MAX_K, ExposureState, Topic, TopicsResult

__all__ = ["MAX_K", "MENTIONS", "TAGS", "Exposure", "ExposureState", "Topic", "TopicsResult"]

TAGS = "tags"
MENTIONS = "mentions"
# A recount holds at most about this many (user, hashtag) exposure pairs at once (~16 bytes each
# in SciPy's product; ~60 in the split of the adopters' exposures): users, and mention edges, are
# counted in chunks under it. On a power-law mention graph the pairs
# grow with users times the hashtags of the hubs they mention (204 M at 800 k edges of the synthetic
# stream, 3 GB in one product), so an unchunked count grows faster than the graph.
COUNT_CHUNK_PAIRS = 4_000_000
# A recount takes the hashtags in groups of about this many adoptions (tags edges). A group's arrays
# cost ~150 bytes an adoption by their dtypes (keys, times, order, ranks, the adoptions matrix, the
# split of the exposures): counted all at once, ~3.5 GB at the ~23 M taggings of 60 M edges of the
# synthetic stream, a step the memory budget cannot see coming, on the recount's own thread.
GROUP_ADOPTIONS = 1_000_000
# The mention edges are read in blocks of rows of about this many edges when the adopters' exposures
# are split (~40 bytes an edge while a block is read, not for every edge of the graph at once).
EDGE_BLOCK = 2_000_000
_SHIFT = np.int64(32)
_LOW = np.int64(0xFFFFFFFF)


def _pack(u: np.ndarray, h: np.ndarray) -> np.ndarray:
    return (u.astype(np.int64) << _SHIFT) | h.astype(np.int64)


@dataclass(frozen=True)
class _CountInputs:
    """Everything a recount reads, as arrays the compute stage no longer changes (so a recount
    can run on another thread while the next epochs are applied)."""

    n: int
    names: list  # append-only: the ids counted are all present already
    tags: tuple[np.ndarray, np.ndarray, np.ndarray]
    tags_first: np.ndarray  # earliest add time of each tags edge above (+inf: the graph has no edge times)
    mentions: tuple[np.ndarray, np.ndarray]  # (indptr, indices): the live mentions edges by source
    keys: np.ndarray
    epochs: np.ndarray
    times: np.ndarray

    @classmethod
    def of(cls, graph: AppGraph, state: ExposureState) -> _CountInputs:
        src, dst, mult, first = graph.typed_first(TAGS)
        return cls(graph.n, graph.g.names, (src, dst, mult), first, graph.typed_csr(MENTIONS), state.keys, state.epochs, state.times)


def _count_from(inp: _CountInputs, hashtags: np.ndarray | None) -> dict[int, Topic]:
    """The K-exposure count itself (see :meth:`Exposure._count`), hashtag group by hashtag group.

    A hashtag's count reads only its own adoptions (and the mentions between its adopters), so the
    hashtags are counted in groups of about :data:`GROUP_ADOPTIONS` adoptions: a group's arrays are
    bounded whatever the graph. Adopters are ordered by name once for all groups (a per-vertex rank),
    since a user who tagged hashtags of many groups would otherwise be looked up in each."""
    t_src, t_dst, _ = inp.tags
    sel = np.ones(len(t_dst), dtype=bool) if hashtags is None else np.isin(t_dst, hashtags)
    if not sel.any():
        return {}
    n = inp.n
    who = unique(t_src[sel])  # the distinct adopting users: far fewer strings to sort than adoptions
    names = inp.names
    name_rank = np.zeros(n, dtype=np.int64)
    name_rank[who] = np.unique(np.array([names[v] for v in who.tolist()]), return_inverse=True)[1]
    del who
    out_ptr, out_idx = inp.mentions  # distinct pairs already: an edge is one per (src, dst) of a type
    mentions = sp.csr_matrix((np.ones(len(out_idx), np.int32), out_idx, out_ptr), shape=(n, n))
    # Group g takes the hashtags (by id) whose adoptions start within [g, g + 1) * GROUP_ADOPTIONS of
    # the running count; a hashtag with more adoptions than that is a group alone.
    per_tag = np.bincount(t_dst[sel], minlength=n)  # over every vertex id: unselected tags edges index it too
    size = max(GROUP_ADOPTIONS, 1)
    group_of = ((np.cumsum(per_tag) - per_tag) // size).astype(np.int32)
    groups = (int(per_tag.sum()) - 1) // size + 1  # a group may be empty (a large hashtag spans it): skipped
    del per_tag
    out: dict[int, Topic] = {}
    for g in range(groups):
        in_group = sel if groups == 1 else sel & (group_of[t_dst] == g)
        out.update(_count_group(inp, in_group, name_rank, mentions))
    return out


def _count_group(inp: _CountInputs, sel: np.ndarray, name_rank: np.ndarray, mentions: sp.csr_matrix) -> dict[int, Topic]:
    """The topics of the hashtags of the adoptions ``sel`` (a mask over the tags edges), every adoption of
    each. A user's exposures to every hashtag at once are one sparse product, mentions @ adoptions
    (distinct pairs, so each entry counts distinct adopters mentioned); only the adopters then need
    their exposures split into before and after them, which takes the mentions between two adopters
    of one hashtag, found from whichever end tagged fewer hashtags."""
    t_src, t_dst, t_mult = inp.tags
    av, ah, am = t_src[sel], t_dst[sel], t_mult[sel]
    out: dict[int, Topic] = {}
    if not len(av):
        return out
    n, levels = inp.n, MAX_K + 1
    akey = _pack(av, ah)
    # The tagging tweet's time as the edge knows it now (an earlier tweet may have arrived in a later
    # epoch); the stamp where the edge has none.
    ts = inp.tags_first[sel]
    ep = np.zeros(len(av), dtype=np.int64)
    unknown = np.flatnonzero(~np.isfinite(ts))
    if len(unknown):
        pos = np.minimum(np.searchsorted(inp.keys, akey[unknown]), max(len(inp.keys) - 1, 0))
        if not len(inp.keys) or (inp.keys[pos] != akey[unknown]).any():
            raise RuntimeError("a tagging without a time has no adoption stamp")  # _stamp takes every one
        ep[unknown], ts[unknown] = inp.epochs[pos], inp.times[pos]
    order = np.lexsort((name_rank[av], ts, ep, ah))
    del ts, ep
    rank = np.empty(len(av), dtype=np.int64)
    rank[order] = np.arange(len(av))
    del order
    tags, col = np.unique(ah, return_inverse=True)
    adoptions = sp.csr_matrix((np.ones(len(av), np.int32), (av, col)), shape=(n, len(tags)))
    hist = _exposure_histogram(mentions, adoptions, levels)
    del adoptions
    seen, before = _adopter_exposures(akey, av, rank, n, mentions.indptr, mentions.indices)
    # An adopter reached only the levels of the exposures before it: move its entry's count there
    # (one without exposures has no entry, and moves nothing from level 0 to level 0).
    base = col * levels
    hist -= np.bincount(base + np.minimum(seen, MAX_K), minlength=len(tags) * levels)
    hist += np.bincount(base + np.minimum(before, MAX_K), minlength=len(tags) * levels)
    reached = np.cumsum(hist.reshape(-1, levels)[:, ::-1], axis=1)[:, ::-1][:, 1:]  # at least k, k = 1..MAX_K
    counted = before <= MAX_K
    adopted = np.bincount(base[counted] + before[counted], minlength=len(tags) * levels).reshape(-1, levels)
    usage = np.bincount(col, weights=am, minlength=len(tags)).astype(np.int64)
    users = np.bincount(col, minlength=len(tags))
    for i, h in enumerate(tags.tolist()):
        out[h] = Topic(int(usage[i]), int(users[i]), reached[i].copy(), adopted[i, 1:].copy())
    return out


def _chunk_starts(cum: np.ndarray, budget: int) -> np.ndarray:
    """Where the chunks of a run of items start, given the running sum ``cum`` of their sizes: chunk c takes
    the items whose running sum falls in ``[c * budget, (c + 1) * budget)`` (an item larger than the budget
    is a chunk alone)."""
    return unique(np.searchsorted(cum, np.arange(budget, int(cum[-1]), budget), side="right"))


def _adopter_exposures(
    akey: np.ndarray, av: np.ndarray, rank: np.ndarray, n: int, out_ptr: np.ndarray, out_idx: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per adoption (user, hashtag): the adopters of the hashtag the user mentions (``seen``), and those of
    them that adopted before it (``before``, by ``rank``).

    The mentions u -> v between two adopters of one hashtag: the hashtags of the end that tagged fewer
    are expanded and each looked up at the other end (self-mentions meet themselves, as in the product).
    The mention edges are read in blocks of :data:`EDGE_BLOCK` edges, those with no pair left out, and
    taken in chunks whose expansions hold a quarter of :data:`COUNT_CHUNK_PAIRS` pairs (as many bytes
    as a chunk of the product): all at once they held every (mention, hashtag) pair of the graph, which
    grows faster than the graph (a 7 GB transient at 20 M edges of the synthetic stream drove the
    compute actor over the memory budget)."""
    asort = np.argsort(akey)
    sorted_akey = akey[asort]  # by user, then hashtag: a_ptr delimits each user's adoptions in it
    a_ptr = np.concatenate([[0], np.cumsum(np.bincount(av, minlength=n))])
    tagged = np.diff(a_ptr)
    positions = np.arange(len(av))
    seen = np.zeros(len(av), dtype=np.int64)
    before = np.zeros(len(av), dtype=np.int64)
    # The chunks' hits are counted in batches of at least len(av): a bincount per chunk would cost
    # O(adoptions) each time, hundreds of times over on a large graph.
    hits: list[np.ndarray] = []
    earlier: list[np.ndarray] = []

    def count() -> None:
        nonlocal seen, before
        if hits:
            seen += np.bincount(np.concatenate(hits), minlength=len(av))
            before += np.bincount(np.concatenate(earlier), minlength=len(av))
            hits.clear()
            earlier.clear()

    held = 0
    # Blocks of rows of about EDGE_BLOCK edges: the rows are the items, their running ends the sums.
    blocks = _chunk_starts(out_ptr[1:], max(EDGE_BLOCK, 1)).tolist() if out_ptr[-1] else []
    for r0, r1 in itertools.pairwise([0, *blocks, len(out_ptr) - 1]):
        if r0 == r1:
            continue
        e_src = np.repeat(np.arange(r0, r1, dtype=out_idx.dtype), np.diff(out_ptr[r0:r1 + 1]))
        e_dst = out_idx[out_ptr[r0]:out_ptr[r1]]
        pairs = np.minimum(tagged[e_src], tagged[e_dst])  # the pairs each edge expands to
        some = np.flatnonzero(pairs)
        if not len(some):
            continue
        e_src, e_dst, cum = e_src[some], e_dst[some], np.cumsum(pairs[some])
        del pairs, some
        starts = _chunk_starts(cum, max(COUNT_CHUNK_PAIRS // 4, 1))  # ~80 bytes a pair here, against ~16 in the product
        for lo, hi in itertools.pairwise([0, *starts.tolist(), len(cum)]):
            if lo == hi:
                continue
            src, dst = e_src[lo:hi], e_dst[lo:hi]
            src_near = tagged[src] <= tagged[dst]
            near = np.where(src_near, src, dst)
            far = np.where(src_near, dst, src)
            at, edge = expand(a_ptr, positions, near)
            look = _pack(far[edge], sorted_akey[at] & _LOW)
            found = np.minimum(np.searchsorted(sorted_akey, look), len(akey) - 1)
            hit = sorted_akey[found] == look
            a_near, a_far, u_near = asort[at[hit]], asort[found[hit]], src_near[edge[hit]]
            mentioner = np.where(u_near, a_near, a_far)
            mentioned = np.where(u_near, a_far, a_near)
            hits.append(mentioner)
            earlier.append(mentioner[rank[mentioned] < rank[mentioner]])
            held += len(mentioner)
            if held >= max(len(av), COUNT_CHUNK_PAIRS):
                count()
                held = 0
    count()
    return seen, before


def _exposure_histogram(mentions: sp.csr_matrix, adoptions: sp.csr_matrix, levels: int) -> np.ndarray:
    """``bincount(h * levels + min(exposures[u, h], MAX_K))`` over the entries of ``mentions @ adoptions``
    ([u, h]: adopters of h that u mentions), computed over chunks of users so that no chunk holds
    more than :data:`COUNT_CHUNK_PAIRS` pairs (bounded by the adoptions of everyone a user mentions)."""
    n_tags = adoptions.shape[1]
    hist = np.zeros(n_tags * levels, dtype=np.int64)
    bound = mentions @ np.diff(adoptions.indptr).astype(np.int64)  # per user: an upper bound of its pairs
    users = np.flatnonzero(bound)
    if not len(users):
        return hist
    for chunk in np.split(users, _chunk_starts(np.cumsum(bound[users]), COUNT_CHUNK_PAIRS)):
        if not len(chunk):
            continue
        x = mentions[chunk] @ adoptions
        hist += np.bincount(x.indices.astype(np.int64) * levels + np.minimum(x.data, MAX_K), minlength=len(hist))
    return hist


def _unstamped(state: ExposureState, users: np.ndarray, tags: np.ndarray) -> ExposureState:
    """``state`` without the stamps of the (user, tag) pairs given (those not stamped are ignored)."""
    if not len(users) or not len(state.keys):
        return state
    keys = unique(_pack(users, tags))
    pos = np.minimum(np.searchsorted(state.keys, keys), len(state.keys) - 1)
    drop = pos[state.keys[pos] == keys]
    if not len(drop):
        return state
    keep = np.ones(len(state.keys), dtype=bool)
    keep[drop] = False
    return ExposureState(state.keys[keep], state.epochs[keep], state.times[keep], state.topics, state.as_of)


def _merged(state: ExposureState, counted: dict[int, Topic], epoch: int, hashtags: np.ndarray | None) -> ExposureState:
    """``state`` with the recounted ``hashtags`` (None: all) replaced, counted as of ``epoch``;
    a recounted hashtag nobody tags any more drops out."""
    topics = {} if hashtags is None else dict(state.topics)
    for x in [] if hashtags is None else hashtags.tolist():
        topics.pop(x, None)
    topics.update(counted)
    return ExposureState(state.keys, state.epochs, state.times, topics, epoch)


class _Counted:
    """A recount that finished, as :meth:`Exposure._background` takes it in (a future's two calls)."""

    def __init__(self, topics: dict[int, Topic]) -> None:
        self.topics = topics

    def done(self) -> bool:
        return True

    def result(self) -> dict[int, Topic]:
        return self.topics


class Exposure(Application):
    name = "topics"
    reads_pairs = False
    reads_names = True
    result = TopicsResult

    def __init__(self, budget: float | None = None) -> None:
        """``budget``: the largest share of wall time the recounts may take (None or 1: every epoch).

        Counting is the expensive part (a sparse product over every exposure pair of every
        affected hashtag; on a power-law mention graph nearly every hashtag is affected by any
        epoch). Adoption stamps are taken every epoch, so a recount that skipped epochs still
        orders adopters exactly; the published curves say which epoch they were counted at (``as_of``)."""
        self._restored: ExposureState | None = None
        self._budget = budget if budget is not None and budget < 1 else None
        self._pending: set[int] = set()
        self._next_count_at = 0.0
        # With a budget, recounts run on their own thread (SciPy's sparse product and NumPy's
        # searches release the GIL), one at a time, so a long recount never holds up an epoch.
        self._pool = self._new_pool()
        self._running: tuple[Future, int, float, np.ndarray | None] | None = None  # (future, epoch, started, hashtags)
        self._count_all = False  # a whole recount was given up (a stage written whole meanwhile): the next is whole

    def _new_pool(self) -> ThreadPoolExecutor | None:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="k-exposure") if self._budget else None

    def __getstate__(self) -> dict:
        """For a stage written whole (a clean stop): a recount done is kept as done; one still running (tens of
        seconds on a large graph, which a stop must not wait out) is given up, its hashtags due again. Not
        the thread pool, nor the monotonic times, which mean nothing to another process."""
        state = dict(self.__dict__)
        if self._running is not None:
            future, counted_at, _, counted = self._running
            if future.done():
                state["_running"] = (_Counted(future.result()), counted_at, None, counted)
            else:
                state["_running"] = None
                if counted is None:
                    state["_count_all"] = True
                else:
                    state["_pending"] = self._pending | set(counted.tolist())
        state["_pool"], state["_next_count_at"] = None, 0.0
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._pool = self._new_pool()
        if self._running is not None:
            done, counted_at, _, counted = self._running
            self._running = (done, counted_at, time.monotonic(), counted)

    # -- stamps ------------------------------------------------------------------------------
    def _stamp(self, graph: AppGraph, state: ExposureState, users: np.ndarray, tags: np.ndarray) -> ExposureState:
        """Stamp the (user, tag) pairs whose edge has no time and that are not stamped yet with this epoch
        and the user's last tweet time."""
        if not len(users):
            return state
        keys = unique(_pack(users, tags))
        # The time of the tagging itself is the tags edge's earliest add (the tweet's ts), a pure function
        # of the epoch vector, and an edge that has one keeps one (the earliest of its adds). Only where
        # a graph carries no edge times is the stamp the order: the epoch the edge went live in, then the
        # user's last tweet time.
        keys = keys[~np.isfinite(graph.first_seen(TAGS, keys >> _SHIFT, keys & _LOW))]
        at = np.searchsorted(state.keys, keys)  # where each key is, or would go, among the stamps
        if len(state.keys) and len(keys):
            new = state.keys[np.minimum(at, len(state.keys) - 1)] != keys
            keys, at = keys[new], at[new]
        if not len(keys):
            return state
        ts = graph.g.last_seen((keys >> _SHIFT).astype(np.int64))
        epochs = np.full(len(keys), graph.epoch, dtype=np.int64)
        # The new keys are sorted and none is stamped yet: inserted where they go, one copy of the stamps
        # (a sort of all of them, as before, was 0.32 s an epoch at 10 M stamps, this 0.12).
        return ExposureState(
            np.insert(state.keys, at, keys),
            np.insert(state.epochs, at, epochs),
            np.insert(state.times, at, ts),
            state.topics,
        )

    # -- counting ----------------------------------------------------------------------------
    def _count(self, graph: AppGraph, state: ExposureState, hashtags: np.ndarray | None) -> dict[int, Topic]:
        """Topics of ``hashtags`` (None: every tagged hashtag), recounted from the live graph."""
        return _count_from(_CountInputs.of(graph, state), hashtags)


    # -- the application contract ------------------------------------------------------------
    def initialize(self, graph: AppGraph) -> ExposureState:
        state = self._restored or ExposureState()
        self._restored = None
        t_src, t_dst, _ = graph.typed(TAGS)
        if graph.g.windowed and len(state.keys):
            # Restored stamps of taggings that have left the window since are no adoptions any more.
            keep = np.isin(state.keys, _pack(t_src, t_dst))
            state = ExposureState(state.keys[keep], state.epochs[keep], state.times[keep], state.topics, state.as_of)
        state = self._stamp(graph, state, t_src, t_dst)
        self._pending.clear()
        if self._pool is not None:
            return self._background(graph, state, everything=True)
        state.topics = self._count(graph, state, None)
        state.as_of = graph.epoch
        return state


    def update(self, graph: AppGraph, delta: AppDelta, previous: ExposureState) -> ExposureState:
        state = previous
        if graph.g.windowed:
            # A tagging that left the window is no adoption any more: its stamp goes with it, so the
            # stamps follow the window (a later tagging is a new adoption, stamped anew).
            state = _unstamped(state, *delta.deleted(TAGS))
        s, h = delta.inserted(TAGS)
        state = self._stamp(graph, state, s, h)
        _, tag_dst, _, _ = delta.touched(TAGS)
        _, m_dst, _, _ = delta.touched(MENTIONS)
        affected = [tag_dst]
        if len(m_dst):
            # The hashtags of the users whose mentioners changed, read from their rows of the tags edges.
            affected.append(graph.typed_neighbors(TAGS, unique(m_dst)))
        self._pending.update(unique(np.concatenate(affected)).tolist())
        if self._pool is None:
            if not self._pending:
                return state
            hashtags = np.array(sorted(self._pending), dtype=np.int64)
            self._pending.clear()
            return _merged(state, self._count(graph, state, hashtags), graph.epoch, hashtags)
        everything, self._count_all = self._count_all, False
        return self._background(graph, state, everything)

    def _background(self, graph: AppGraph, state: ExposureState, everything: bool = False) -> ExposureState:
        """Take a finished recount in; start the next one when one is due and the budget allows."""
        assert self._pool is not None and self._budget is not None  # only called with a budget
        if self._running is not None and self._running[0].done():
            future, counted_at, started, counted = self._running
            self._running = None
            state = _merged(state, future.result(), counted_at, counted)
            spent = time.monotonic() - started
            self._next_count_at = time.monotonic() + spent * (1.0 / self._budget - 1.0)
        if everything and self._running is not None:
            self._running[0].result()  # a full recount supersedes the one in flight
            self._running = None
        if self._running is None and (everything or (self._pending and time.monotonic() >= self._next_count_at)):
            # Counted on the side, as of this epoch; the stamps keep the adoption order exact meanwhile.
            hashtags = None if everything else np.array(sorted(self._pending), dtype=np.int64)
            self._pending.clear()
            inputs = _CountInputs.of(graph, state)
            self._running = (self._pool.submit(_count_from, inputs, hashtags), graph.epoch, time.monotonic(), hashtags)
        return state

    def publish(self, state: ExposureState) -> TopicsResult:
        ids = np.array(sorted(state.topics), dtype=np.int64)
        topics = [state.topics[i] for i in ids.tolist()]
        users = np.array([t.users for t in topics], dtype=np.int64)
        usage = np.array([t.usage for t in topics], dtype=np.int64)
        reached = np.array([t.reached for t in topics], dtype=np.int64).reshape(-1, MAX_K)
        adopted = np.array([t.adopted for t in topics], dtype=np.int64).reshape(-1, MAX_K)
        # Topic.curve and Topic.persistence for every topic at once (one Python step per topic was
        # a tenth of an epoch's compute at 100k hashtags).
        with np.errstate(invalid="ignore", divide="ignore"):
            curves = np.where(reached > 0, adopted / np.maximum(reached, 1), np.nan)
        p = np.nan_to_num(curves, nan=0.0)
        peak = p.max(axis=1) if len(p) else np.zeros(0)
        persistence = np.where(peak > 0, p.sum(axis=1) / (MAX_K * np.where(peak > 0, peak, 1.0)), 0.0)
        order = np.lexsort((ids, -users, -persistence)) if len(ids) else ids
        return TopicsResult(
            tags=ids[order].astype(np.int32), usage=usage[order], users=users[order], persistence=persistence[order],
            curve=curves[order], reached=reached[order], as_of=state.as_of,
        )

    # -- checkpoints -------------------------------------------------------------------------
    @staticmethod
    def state_dict(state: ExposureState) -> dict:
        return {"keys": state.keys, "epochs": state.epochs, "times": state.times}

    def restore(self, saved: dict) -> None:
        """Adoption stamps from a checkpoint; the next :meth:`initialize` keeps them."""
        self._restored = ExposureState(np.asarray(saved["keys"]), np.asarray(saved["epochs"]), np.asarray(saved["times"]))
