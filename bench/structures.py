"""The kept structures of a growing graph, each timed (and sized) on its own, against another revision's code.

Each case builds one structure at the size a long soak reaches (millions of entries) and times what
an epoch does to it. With ``--ref REV`` the same case runs first on the module as it was at git
revision ``REV`` (loaded from ``git show``, beside the current one, in this one process), so the two
figures are side by side on the same machine at the same time, as BENCHMARKS.md asks of speed.

    .venv/bin/python -m bench.structures rowtable --ref 2039689
    .venv/bin/python -m bench.structures api-names --ref 2039689
    .venv/bin/python -m bench.structures name-fold --ref e7646ff
    .venv/bin/python -m bench.structures graph-view --ref 8858c2b
    .venv/bin/python -m bench.structures compute-names --ref a8691a0
    .venv/bin/python -m bench.structures compaction --ref 2039689
    .venv/bin/python -m bench.structures shard-names --ref 2727fe7
    .venv/bin/python -m bench.structures name-reads --ref a8691a0
    .venv/bin/python -m bench.structures shard-store --ref b986fd8
    .venv/bin/python -m bench.structures landmark-bfs --ref 662617a
    .venv/bin/python -m bench.structures landmark-epochs --ref 662617a

* ``rowtable``: :class:`pulsegraph.compute.apps.adjacency.RowTable` of ~20 M entries (rows skewed as a mention graph's in-pairs), 20
  epochs of 50 k changes (half removals, half inserts) and 20 k-row frontiers, then a full read and a
  compaction; bytes per live entry.
* ``api-names``: the API's names of 3 M vertices: bytes per name, five epochs of 20 k new names each\n  (:func:`pulsegraph.api.names.names_update`, written as the store writes it), a lookup of 50 k names.
* ``name-fold``: the API's :class:`pulsegraph.api.namebook.NameBook` of 3 M names folding 400 k new names and 20 k
  renames into a new base, twice.
* ``graph-view``: :meth:`pulsegraph.api.graph.GraphHistory.apply` of a whole epoch of 20 M edges (the first epoch
  after a restart), into an empty view and over a full one.
* ``compute-names``: :class:`pulsegraph.compute.ids.VertexIds` naming 3 M vertices in 60 epochs of 50 k: bytes per
  name (traced, the strings too where they are kept), a lookup of 51 k names, a first pull of every name, ``state``.
* ``compaction``: :meth:`pulsegraph.compute.resident.ResidentGraph.compact` of 20 M pairs with a 1 M-pair overlay.
* ``overlays``: the ranking's :class:`pulsegraph.compute.resident.ResidentGraph` and the applications'
  :class:`pulsegraph.compute.apps.rowtable.RowTable` over the same 10 M pairs, each doing both one's and the other's
  work per epoch (merge, a solve's sweeps, a frontier's live neighbours): why there are two.
* ``shard-store``: a shard's :class:`pulsegraph.snapshots.store.ShardStore` taking the growing stream's rounds and
  cutting an epoch every 48 k events (40 epochs, one shard): receive and apply time per epoch.
* ``landmark-bfs``: :func:`pulsegraph.compute.apps.landmarks.bfs_many` of 16 sources (a re-choice of the landmarks)
  over 13 M edges of skewed in-degrees: time and traced peak (the frontier's rows are read in slices).
* ``landmark-epochs``: the landmarks' incremental update (repair, relaxing) over 10 epochs of 2 M tweets, landmarks
  kept: what reading frontiers in slices costs the many small frontiers of an ordinary epoch.
* ``name-reads``: a :class:`pulsegraph.snapshots.nametable.NameTable` of 3 M names read whole: every name, the newest
  50 k, and the table made again from its arrays (a restore).
* ``shard-names``: a shard's :class:`pulsegraph.snapshots.interner.Interner`, rounds of 20 k names (12 k new) up to
  1.5 M names: bytes per name (traced), time per round, a checkpoint's encoding and load.
"""

from __future__ import annotations

import argparse
import importlib.util
import pickle
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from bench.machine import describe as machine

ROOT = Path(__file__).resolve().parent.parent


def module_at(rev: str | None, path: str):
    """The module at ``path`` (repo-relative) as it is now (``rev`` None) or as it was at ``rev``."""
    name = path.removesuffix(".py").replace("/", ".")
    if name.split(".")[0] in ("ingest", "snapshots", "compute", "api"):  # a stage's folder is pulsegraph.<stage>
        name = "pulsegraph." + name
    if rev is None:
        return importlib.import_module(name)
    src = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    tmp = Path(tempfile.mkdtemp(prefix="pg-ref-")) / Path(path).name
    tmp.write_text(src)
    spec = importlib.util.spec_from_file_location(f"{name}_at_{rev}", tmp)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


def rowtable(mod) -> str:
    rng = np.random.default_rng(1)
    n, m = 3_000_000, 20_000_000
    # Skewed rows, the in-pairs of a mention graph (a mentioned user's mentioners): hubs of 10**5 entries.
    keys = np.unique((((rng.pareto(1.2, m) * 1000).astype(np.int64) % n) << 32) | rng.integers(0, n, m))
    rows, cols = keys >> 32, keys & 0xFFFFFFFF
    t = mod.RowTable.from_entries(n, rows, cols, {"count": np.ones(len(rows), np.int16)}, compact_fraction=0.25)
    r2 = np.random.default_rng(2)
    ms = {"assign": 0.0, "neighbors": 0.0}
    for _ in range(20):
        pick = r2.integers(0, len(rows), 25_000)
        fresh = (((r2.pareto(1.2, 25_000) * 1000).astype(np.int64) % n) << 32) | r2.integers(0, n, 25_000)
        batch, first = np.unique(np.concatenate([(rows[pick] << 32) | cols[pick], fresh]), return_index=True)
        t0 = time.perf_counter()
        t.assign(batch, first >= 25_000, {"count": np.ones(len(batch), np.int16)})
        ms["assign"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        t.neighbors(r2.integers(0, n, 20_000))
        ms["neighbors"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    t.entries("count")
    ms["entries"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    t.compact()
    ms["compact"] = time.perf_counter() - t0
    return (f"{len(keys):,} entries; " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in ms.items())
            + f"; {t.nbytes() / t.nnz:.2f} B per live entry")


def api_names(mod) -> str:
    """The API's names of 3 M vertices (names like the growing stream's): bytes per name (traced, the strings
    included), five epochs of 20 k new names each worked out and written as the store does, and a lookup of 50 k
    names. A revision before the packed book held a list, a dict and sorted lists."""
    from pulsegraph.compute.ids import NameChanges

    n, k = 3_000_000, 20_000
    order = np.random.default_rng(0).permutation(n).tolist()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    names = [f"user{i}" for i in order]
    if hasattr(mod, "SortedNames"):
        index = {name: i for i, name in enumerate(names)}
        held = mod.SortedNames(sorted(index))
        lookup = index.get
    else:
        book = mod.NameBook(names)
        del names
        lookup = book.get
    size = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    times = []
    for e in range(5):
        new = NameChanges(n + e * k, [f"new{e}.{j}" for j in range(k)])
        t0 = time.perf_counter()
        if hasattr(mod, "SortedNames"):
            u = mod.names_update(names, index, held, new)
            names.extend(u.tail)
            index.update((name, at) for name, at in u.index.items() if at is not None)
            held = u.sorted_names
        else:
            u = mod.names_update(book, new)
            book.apply(u.writes, u.tail, u.index, u.recent)
            book.settle()
        times.append(time.perf_counter() - t0)
    asked = [f"user{i}" for i in range(0, n, n // 50_000)]
    t0 = time.perf_counter()
    found = sum(lookup(name) is not None for name in asked)
    looked = time.perf_counter() - t0
    return (f"{n:,} names: {size / n:.0f} B per name; {k:,} new an epoch: " + " / ".join(f"{t * 1000:.0f}" for t in times)
            + f" ms; {found:,} looked up one by one in {looked * 1000:.0f} ms")


def name_fold(mod) -> str:
    """The API's name book of 3 M vertices folding its changes into a new base, as the feed thread does once they
    pass an eighth of it: twice, each time 400 k new names and 20 k renamed (the growing stream's names)."""
    from pulsegraph.api.names import names_update
    from pulsegraph.compute.ids import NameChanges

    n, k, r = 3_000_000, 400_000, 20_000
    rng = np.random.default_rng(0)
    book = mod.NameBook([f"user{i}" for i in rng.permutation(n).tolist()])
    times = []
    for e in range(2):
        size = len(book)
        renamed = rng.integers(0, size, r)
        changes = NameChanges(size, [f"user{n + e * k + j}" for j in range(k)], renamed.astype(np.int64),
                              [f"renamed{e}.{j}" for j in range(r)])
        u = names_update(book, changes)
        book.apply(u.writes, u.tail, u.index, u.recent)
        t0 = time.perf_counter()
        book.settle()
        times.append(time.perf_counter() - t0)
    return f"{n:,} names, {k:,} new and {r:,} renamed a fold: " + " / ".join(f"{t * 1000:.0f}" for t in times) + " ms"


def graph_view(mod) -> str:
    """A whole epoch (every edge once, as the compute stage sends the first epoch after a restart) into the
    API's empty graph view, then again over the full view (a relaunch's whole epoch)."""
    from pulsegraph.compute.changes import EdgeChanges

    n, v = 20_000_000, 2_600_000
    rng = np.random.default_rng(1)
    src, dst, et = rng.integers(0, v, n), rng.integers(0, v, n), rng.integers(0, 2, n)
    _, once = np.unique((src * v + dst) * 2 + et, return_index=True)
    once = rng.permutation(once)
    ones = np.ones(len(once), np.int64)
    ch = EdgeChanges(src[once].astype(np.int32), dst[once].astype(np.int32), et[once].astype(np.int16), ones, ones)
    g = mod.GraphHistory(retain=80)
    times, sizes = [], []
    for epoch in (1, 2):
        t0 = time.perf_counter()
        g.apply(epoch, ch, full=True)
        times.append(time.perf_counter() - t0)
        sizes.append(g.nbytes / len(ch))
    return (f"{len(ch):,} edges, a whole epoch into an empty view / over a full one: {times[0]:.1f} / {times[1]:.1f} s, "
            f"the view after it {sizes[0]:.0f} / {sizes[1]:.0f} bytes per edge")


def compute_names(mod) -> str:
    """The compute stage's :class:`VertexIds` naming 3 M vertices in 60 epochs of 50 k, the strings made as a delta
    brings them (traced bytes a name, with the strings where the ids keep them), then what reads every name: a
    lookup of 51 k, a consumer's first pull (:meth:`name_changes` from nothing) and a checkpoint's ``state``."""
    n, batch = 3_000_000, 50_000
    order = np.random.default_rng(0).permutation(n)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    ids = mod.VertexIds()
    t0 = time.perf_counter()
    for lo in range(0, n, batch):
        ids.name([f"user{i}" for i in order[lo : lo + batch].tolist()], lo // batch + 1)
    name_s = time.perf_counter() - t0
    kept = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    asked = [f"user{i}" for i in np.random.default_rng(1).integers(0, n, 50_000).tolist()] + [f"x{i}" for i in range(1000)]
    t0 = time.perf_counter()
    got = ids.index.lookup(asked)
    lookup_ms = (time.perf_counter() - t0) * 1000
    assert (got[:50_000] >= 0).all() and (got[50_000:] < 0).all()
    t0 = time.perf_counter()
    pulled = ids.name_changes(0, 0)
    pull_s = time.perf_counter() - t0
    assert len(pulled.names) == n
    t0 = time.perf_counter()
    ids.state()
    state_s = time.perf_counter() - t0
    return (f"{n:,} names: {kept / n:.1f} B a name; 60 epochs named in {name_s:.1f} s; a lookup of {len(asked):,} "
            f"{lookup_ms:.0f} ms; a first pull {pull_s:.2f} s; state {state_s:.2f} s")


def name_reads(mod) -> str:
    """A :class:`NameTable` of 3 M names read whole: every name by id (a consumer's first pull), the newest 50 k (an
    epoch's new names), and the table made again from its arrays (a restore: every name decoded for its hash)."""
    n = 3_000_000
    names = [f"user{i}" for i in np.random.default_rng(0).permutation(n).tolist()]
    table = mod.NameTable()
    table.add(names, np.arange(n, dtype=np.int64))
    t0 = time.perf_counter()
    every = table.take(np.arange(n, dtype=np.int64))
    all_s = time.perf_counter() - t0
    assert every == names
    t0 = time.perf_counter()
    table.take(np.arange(n - 50_000, n, dtype=np.int64))
    new_ms = (time.perf_counter() - t0) * 1000
    state = {k: v.copy() for k, v in table.state().items()}
    t0 = time.perf_counter()
    mod.NameTable.from_state(state)
    restore_s = time.perf_counter() - t0
    return f"{n:,} names: every name {all_s:.2f} s, the newest 50 k {new_ms:.1f} ms, a restore {restore_s:.2f} s"


def shard_names(mod) -> str:
    """A shard's :class:`pulsegraph.snapshots.interner.Interner` as receive uses it: rounds of 20 k names, most of them
    seen before (a user tweets again, hubs are mentioned over and over), growing to ~1.5 M names. Timed in
    one pass, sized (traced) in a second: tracing slows every allocation."""
    users = [f"u{i}" for i in np.random.default_rng(0).permutation(3_000_000).tolist()]

    def fill():
        rng = np.random.default_rng(1)
        interner = mod.Interner(1 << 31, "vertices")
        ms, rounds, seen = 0.0, 0, 0
        while len(interner) < 1_500_000:
            hi = min(len(users), seen + 12_000)
            # New string objects, as each batch is unpickled from the ingest actor's message.
            batch = pickle.loads(pickle.dumps([users[i] for i in rng.integers(0, max(seen, 1), 8_000).tolist()] + users[seen:hi]))
            seen = hi
            t0 = time.perf_counter()
            interner.ids(batch)
            ms += (time.perf_counter() - t0) * 1000
            rounds += 1
        return interner, ms / rounds, seen

    interner, round_ms, seen = fill()
    t0 = time.perf_counter()
    saved = interner.encoded()
    again = mod.Interner(1 << 31, "vertices")
    again.load(saved)
    ckpt_ms = (time.perf_counter() - t0) * 1000
    asked = [users[i] for i in np.random.default_rng(2).integers(0, seen, 20_000).tolist()]
    assert again.ids(asked).tolist() == interner.ids(asked).tolist()
    del interner, again, saved
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    interner, _, _ = fill()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return (f"{len(interner):,} names: {held / len(interner):.1f} B a name (traced); a round of 20 k names (12 k new) "
            f"{round_ms:.1f} ms ({round_ms * 1000 / 20_000:.2f} us a name); checkpoint out and back {ckpt_ms:.0f} ms")


def shard_store(mod) -> str:
    """A shard's receive and apply as the service drives them: the growing stream's rounds (2,000 records
    a partition, as ``--batch-size``) routed to one shard, cut every 48 k events, up to ~2.5 M edges."""
    global _SHARD_ROUNDS
    if "_SHARD_ROUNDS" not in globals():
        from pulsegraph.ingest.batch import Router
        from pulsegraph.ingest.sources import SourceSpec, open_partitions
        from pulsegraph.ingest.transforms import Event, get_transform

        spec = SourceSpec(kind="synthetic", partitions=4, rate=None, seed=7, users=3_000_000, hashtags=100_000)
        names = spec.partition_names()
        parts, transform, router = open_partitions(spec, names, {n: 0 for n in names}), get_transform("tweets"), Router(1)
        _SHARD_ROUNDS = []
        for _ in range(40):  # epochs of 48 k events: 6 rounds of 2,000 records from each of 4 partitions
            rounds = []
            for _ in range(6):
                for p in parts:
                    transform.feed(router, p.name, [Event(r.offset, 0, r.value) for r in p.next_batch(2000)])
                rounds.append(pickle.dumps(router.take()[0], protocol=5))
            _SHARD_ROUNDS.append((rounds, {p.name: p.position() for p in parts}))
    store = mod.ShardStore(0)
    recv = cut = 0.0
    last = []
    for e, (rounds, vector) in enumerate(_SHARD_ROUNDS, 1):
        batches = [pickle.loads(r) for r in rounds]  # unpickled as Ray hands them over, outside the timing
        t0 = time.perf_counter()
        for b in batches:
            store.receive(b)
        t1 = time.perf_counter()
        store.apply(e, vector)
        t2 = time.perf_counter()
        recv, cut = recv + t1 - t0, cut + t2 - t1
        if e > len(_SHARD_ROUNDS) - 10:
            last.append((t1 - t0, t2 - t1))
    r10, a10 = (sum(x) / len(last) * 1000 for x in zip(*last))
    return (f"{len(_SHARD_ROUNDS)} epochs, {store.edges.live():,} live edges; receive {recv:.2f} s, apply {cut:.2f} s in all; "
            f"the last 10 epochs: receive {r10:.0f} ms, apply {a10:.0f} ms an epoch")


def compaction(mod) -> str:
    rng = np.random.default_rng(0)
    n, m, k = 3_000_000, 20_000_000, 1_000_000
    src, dst = rng.integers(0, n, m), (rng.pareto(1.2, m) * 1000).astype(np.int64) % n
    g = mod.ResidentGraph.from_edges(n, src, dst, rng.integers(1, 5, m).astype(np.float64), compact_fraction=1e9)
    g.apply(rng.integers(0, n, k), (rng.pareto(1.2, k) * 1000).astype(np.int64) % n, rng.integers(1, 5, k).astype(np.float64))
    t0 = time.perf_counter()
    g.compact()
    return f"{g.nnz:,} pairs after, overlay {k:,}: compaction {time.perf_counter() - t0:.2f} s"


def overlays(mod) -> str:
    """The one question behind two overlay types: what each would cost doing the other's work. The same
    10 M weighted pairs (skewed rows) held as the ranking's :class:`ResidentGraph` and as a
    :class:`RowTable` with a weight column; 10 epochs of 50 k changes (half removals, half new pairs).
    Timed per epoch: the merge; what a solve's sweeps read (``A^T v``; a table must first mask its dead
    entries and make its overlay a matrix, once an epoch); a 20 k-row frontier's live neighbours (the
    resident graph keeps weight differences, so it must sum a row's base and overlay and drop zeros)."""
    import scipy.sparse as sp

    from pulsegraph.compute.apps.rowtable import RowTable

    rng = np.random.default_rng(3)
    n, m, c, sweeps = 3_000_000, 10_000_000, 50_000, 20
    keys = np.unique((((rng.pareto(1.2, m) * 1000).astype(np.int64) % n) << 32) | rng.integers(0, n, m))
    rows, cols = keys >> 32, keys & 0xFFFFFFFF
    w = rng.integers(1, 5, len(keys)).astype(np.float64)
    g = mod.ResidentGraph.from_edges(n, rows, cols, w)
    t = RowTable.from_entries(n, rows, cols, {"weight": w}, compact_fraction=0.25)
    ms = {k: [0.0, 0.0] for k in ("merge", f"{sweeps} sweeps", "frontier")}  # [resident graph, row table]
    v = rng.random(n)
    for _ in range(10):
        gone = rng.choice(len(keys), c // 2, replace=False)
        fresh = np.setdiff1d((((rng.pareto(1.2, c) * 1000).astype(np.int64) % n) << 32) | rng.integers(0, n, c), keys)[: c // 2]
        fw = rng.integers(1, 5, len(fresh)).astype(np.float64)
        t0 = time.perf_counter()
        g.apply(np.concatenate([rows[gone], fresh >> 32]), np.concatenate([cols[gone], fresh & 0xFFFFFFFF]),
                np.concatenate([-w[gone], fw]))
        t1 = time.perf_counter()
        batch = np.concatenate([keys[gone], fresh])
        order = np.argsort(batch)
        t.assign(batch[order], (np.arange(len(batch)) >= len(gone))[order], {"weight": np.concatenate([w[gone], fw])[order]})
        t2 = time.perf_counter()
        ms["merge"][0] += t1 - t0
        ms["merge"][1] += t2 - t1
        keep = np.ones(len(keys), bool)
        keep[gone] = False
        keys, rows, cols, w = keys[keep], rows[keep], cols[keep], w[keep]
        keys = np.concatenate([keys, fresh])
        keys.sort()
        rows, cols = keys >> 32, keys & 0xFFFFFFFF
        w = t.get(rows, cols, "weight", 0.0)
        t0 = time.perf_counter()
        for _ in range(sweeps):
            a = g.pull(v)
        t1 = time.perf_counter()
        base = sp.csr_matrix((t.vals["weight"] * t.alive, t.col, t.ptr), shape=(n, n))
        over = sp.csr_matrix((t.ov_vals["weight"], ((t.ov_key >> 32), t.ov_key & 0xFFFFFFFF)), shape=(n, n))
        for _ in range(sweeps):
            b = base.T @ v + over.T @ v
        t2 = time.perf_counter()
        assert np.allclose(a, b)
        ms[f"{sweeps} sweeps"][0] += t1 - t0
        ms[f"{sweeps} sweeps"][1] += t2 - t1
        frontier = rng.integers(0, n, 20_000)
        t0 = time.perf_counter()
        pairs = []
        for mat in (g._base_out, g._ov_out):  # the graph's own two CSRs, rows by source
            if mat is None:
                continue
            starts = mat.indptr[frontier].astype(np.int64)
            pos, owner = g.be.gather_ranges(starts, mat.indptr[frontier + 1].astype(np.int64) - starts)
            pairs.append(((owner << 32) | mat.indices[pos], mat.data[pos]))
        k_all = np.concatenate([p for p, _ in pairs])
        uk, inv = np.unique(k_all, return_inverse=True)
        live_g = uk[np.bincount(inv, np.concatenate([d for _, d in pairs])) != 0]
        t1 = time.perf_counter()
        nb, own = t.neighbors(frontier)
        t2 = time.perf_counter()
        assert len(live_g) == len(nb)
        ms["frontier"][0] += t1 - t0
        ms["frontier"][1] += t2 - t1
    per = ", ".join(f"{k} {a * 100:.0f} / {b * 100:.0f} ms" for k, (a, b) in ms.items())
    return (f"{len(keys):,} pairs, per epoch (resident graph / row table): {per}; bytes per pair "
            f"{g.nbytes() / len(keys):.1f} / {t.nbytes() / t.nnz:.1f}")


def landmark_bfs(mod) -> str:
    """16 landmarks' BFS (:func:`pulsegraph.compute.apps.landmarks.bfs_many`, as a re-choice runs it) over a 13 M-edge
    graph of skewed in-degrees: time, and the traced peak above the distances it fills (its levels' arrays)."""
    import scipy.sparse as sp

    from pulsegraph.compute.apps.base import CSR

    n, m = 2_500_000, 13_000_000
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, n, m), (n * rng.power(0.3, m)).astype(np.int64) % n
    a = sp.csr_matrix((np.ones(m, np.int8), (src, dst)), shape=(n, n))
    a.sum_duplicates()
    adj = CSR(a.indptr.astype(np.int64), a.indices.astype(np.int64))
    del a, src, dst
    sources = np.argsort(-np.diff(adj.indptr))[:16]
    out = np.full((16, n), mod.UNREACHABLE, dtype=mod.HOPS)
    tracemalloc.start()
    t0 = time.perf_counter()
    mod.bfs_many(adj, sources, n, out)
    took = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return f"{len(adj.indices):,} edges: {took:.2f} s, peak {peak / 2**20:,.0f} MiB above the distances"


def landmark_epochs(mod) -> str:
    """The landmarks' update, epoch by epoch, as the applications run it with the landmarks kept (steady scores):
    2 M synthetic tweets of the soak's stream in 10 epochs; its time summed over epochs 2-10."""
    from bench.apps import filled_shards
    from pulsegraph.compute.apps.runner import Applications
    from pulsegraph.compute.changes import EdgeChanges
    from pulsegraph.compute.graph import GlobalGraph

    tweets, epochs = 2_000_000, 10
    stores, g, apps = filled_shards(tweets, 2, 3_000_000, 100_000), GlobalGraph(), Applications()
    at = next(i for i, a in enumerate(apps.apps) if a.name == "landmarks")
    kept = apps.apps[at]
    apps.apps[at] = mod.Landmarks(kept.count, kept.drift, kept.score)
    total = 0.0
    for epoch in range(1, epochs + 1):
        merged = [g.apply_with_previous(s.apply(epoch, {"p": tweets * epoch // epochs})[1]) for s in stores]
        changes, before = (EdgeChanges.concat([m[k] for m in merged]) for k in (0, 1))
        apps.run(g, epoch, changes, before, False, {"tunkrank": 1.0 / (1.0 + np.arange(g.n))}, 0)
        total += apps.ms["landmarks"] if epoch > 1 else 0.0
    return f"{g.live_edges():,} edges: the landmarks' updates took {total:,.0f} ms over epochs 2-{epochs}"


CASES = {
    "overlays": (overlays, "compute/resident.py"),
    "rowtable": (rowtable, "compute/apps/adjacency.py"),
    "api-names": (api_names, "api/names.py"),
    "name-fold": (name_fold, "api/namebook.py"),
    "graph-view": (graph_view, "api/graph.py"),
    "compute-names": (compute_names, "compute/ids.py"),
    "compaction": (compaction, "compute/resident.py"),
    "shard-names": (shard_names, "snapshots/interner.py"),
    "name-reads": (name_reads, "snapshots/nametable.py"),
    "shard-store": (shard_store, "snapshots/store.py"),
    "landmark-bfs": (landmark_bfs, "compute/apps/landmarks.py"),
    "landmark-epochs": (landmark_epochs, "compute/apps/landmarks.py"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--ref", help="a git revision whose code runs the same case first, side by side")
    args = ap.parse_args(argv)
    run, path = CASES[args.case]
    print(f"# {machine()}; {args.case}")
    for rev in ([args.ref] if args.ref else []) + [None]:
        print(f"{rev or 'now'}: {run(module_at(rev, path))}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
