"""``--compute-partitions``: the setting, and the whole pipeline ranking over partition actors.

The file source runs through real ingest, shard, coordinator and compute actors, the ranking over two
``RankPartitionActor`` actors, the API's graph view over two ``GraphPartActor`` actors; one of them (or the
applications' actor: tests/pulsegraph/test_apps_loss.py) is killed mid-stream (the pipeline relaunches from the
newest checkpoint with new partitions, and new graph view parts where one of those died). The run must end in the reference graph (the compute stage's
and the API's view), with PageRank within its published bound of networkx's on that graph and the top ranks of
one partition's run, and every actor it made must be gone once the service stops.
"""

from __future__ import annotations

import time

import networkx as nx
import numpy as np
import pytest
import ray
from ray.exceptions import RayActorError

from pulsegraph.api.exceptions import NotFound
from pulsegraph.api.graph import GraphHistory
from pulsegraph.cli import main
from pulsegraph.compute.stage import StageConfig
from pulsegraph.settings import MAX_COMPUTE_PARTITIONS, Settings
from pulsegraph.topology import Pipeline
from tests.graphref import live_digraph, reference, without_attrs
from tests.pulsegraph.test_pipeline import edge_lines, write
from tests.pulsegraph.test_recovery import relaunched


def test_the_setting_its_default_its_variable_and_its_bounds(monkeypatch, capsys):
    assert Settings().compute_partitions == 1
    assert StageConfig.from_settings(Settings()).partitions == 1
    monkeypatch.setenv("PULSEGRAPH_COMPUTE_PARTITIONS", "3")
    assert StageConfig.from_settings(Settings()).partitions == 3
    monkeypatch.delenv("PULSEGRAPH_COMPUTE_PARTITIONS")
    assert Settings(compute_partitions=MAX_COMPUTE_PARTITIONS).compute_partitions == MAX_COMPUTE_PARTITIONS
    for bad in (0, -2, MAX_COMPUTE_PARTITIONS + 1):
        with pytest.raises(ValueError, match=f"{bad} ranking partitions: give 1 .* to {MAX_COMPUTE_PARTITIONS}"):
            Settings(compute_partitions=bad)
    assert main(["run", "--compute-partitions", "0"]) == 2  # refused before anything starts
    err = capsys.readouterr().err
    assert "--compute-partitions" in err and f"to {MAX_COMPUTE_PARTITIONS}" in err


def dead(actor) -> bool:
    try:
        ray.get(actor.__ray_ready__.remote(), timeout=30)
    except RayActorError:
        return True
    return False


def run(tmp_path, lines, parts: int, rate: float = 0, kill: int | str | None = None, at_end: bool = False):
    """The last result of a run over ``lines``, the compute actor's graph, and every partition, applications' and
    graph view part actor made; ``kill``: which is killed as soon as the first epoch is served, mid-stream (an index
    into the compute actor's list: the partitions, then the applications' two actors; ``"view"``: a graph view part),
    or with ``at_end`` once the whole stream is served, when no epoch is left to fail on the loss."""
    (tmp_path / "in").mkdir(parents=True)
    records = {"file:0": write(tmp_path / "in" / "events.jsonl", lines)}
    p = Pipeline(Settings(
        source="file", path=tmp_path / "in" / "events.jsonl", data_dir=tmp_path / "data", epoch_interval="50ms",
        checkpoint_every=3, rate=rate, shards=2, batch_size=60, compute_partitions=parts, pagerank_tol=1e-9,
    )).start()
    made = []
    try:
        if kill is not None:
            if at_end:
                p.wait_for_epoch(lambda v: v.result.vector.get("file:0") == len(lines), timeout=120)
            else:
                first = p.wait_for_epoch(lambda v: True, timeout=60)
                assert first.result.vector.get("file:0", 0) < len(lines) * 3 // 4, "the stream ended before the kill"
            made = ray.get(p.compute.owned_actors.remote())
            assert len(made) == parts + 2  # the partitions, and the applications' two actors
            assert p.graph_parts is not None
            ray.kill(p.graph_parts.graph.port.actors[0] if kill == "view" else made[kill], no_restart=True)
            p.wait_for_epoch(lambda v: relaunched(p, 1), timeout=90)
        view = p.wait_for_epoch(lambda v: v.result.vector.get("file:0") == len(lines), timeout=120)
        # Killed at the end, the relaunched stage re-merges what the API already serves: its graph is read once it
        # merged the served epoch (the read waits behind that batch): a minute or more while other tests load 2 cores.
        deadline = time.monotonic() + 150
        while ray.get(p.compute.latest_epoch.remote()) < view.result.epoch:
            assert time.monotonic() < deadline, f"the compute stage never got back to epoch {view.result.epoch}"
            time.sleep(0.1)
        now = ray.get(p.compute.owned_actors.remote())
        assert len(now) == (parts + 2 if parts > 1 else 0) and not set(now) & set(made)
        made += now + ([] if p.graph_parts is None else list(p.graph_parts.graph.port.actors))  # and the graph view's parts
        graph = ray.get(p.compute.snapshot.remote())
        assert graph == without_attrs(reference(records, view.result.vector, "edges"))
        assert api_edges(p, view.result.epoch) == {k: v for k, v in graph["edges"].items() if v[0] > 0}
        assert (p.graph_parts is None) == (parts == 1) and (parts == 1) == isinstance(p.store.graph, GraphHistory)
        return view.result, graph, {n: i for i, n in enumerate(p.store.names[: view.result.vertices])}, made
    finally:
        p.stop()


def api_edges(p: Pipeline, epoch: int) -> dict[tuple[str, str, str], tuple[int, int]]:
    """The live edges of the API's graph view as of ``epoch``, by name, read both ways (with P > 1 from its parts)."""
    deadline = time.monotonic() + 60
    while p.store.graph.epoch < epoch:  # new parts (the old were lost) fill once the compute stage hands its graph over
        assert time.monotonic() < deadline, f"the API's graph view is at epoch {p.store.graph.epoch}, never {epoch}"
        time.sleep(0.1)
    # Parts filled whole after a relaunch keep edges only from the epoch they were filled at. A relaunch near the
    # stream's end may re-cut the same vector as a later epoch: that is the same graph, so it is read there.
    at = max(epoch, p.store.graph.kept_from)
    if at != epoch:
        assert p.store.get(at).result.vector == p.store.get(epoch).result.vector, f"epoch {epoch}'s edges are not kept"
    names, types, n = p.store.names, p.store.types, len(p.store.names)
    out, into = (p.store.graph.neighbors_many(list(range(n)), way, at) for way in ("out", "in"))
    edges = {(names[v], names[o], types[t]): (m, w) for v in range(n) for o, t, m, w in zip(*(a.tolist() for a in out[v]))}
    assert edges == {(names[o], names[v], types[t]): (m, w) for v in range(n) for o, t, m, w in zip(*(a.tolist() for a in into[v]))}
    return edges


def ranks_by_name(result, ids: dict[str, int], order: list[str]) -> np.ndarray:
    """PageRank in ``order`` of names: ids follow the epochs' cuts, which differ between runs."""
    return result.scores["pagerank"][[ids[n] for n in order]]


def test_two_partitions_end_in_the_graph_and_the_top_ranks_of_one(ray_cluster, tmp_path):
    lines = edge_lines(1600, seed=5)
    two, graph, names, made = run(tmp_path / "two", lines, parts=2)
    one, graph_one, names_one, _ = run(tmp_path / "one", lines, parts=1)
    assert all(dead(a) for a in made)  # stopped with the service
    assert graph == graph_one and names.keys() == names_one.keys()
    order = list(names)
    got, want = ranks_by_name(two, names, order), ranks_by_name(one, names_one, order)
    bound = two.error_bounds["pagerank"]
    assert bound == one.error_bounds["pagerank"] == 1e-9
    assert np.abs(got - want).sum() <= 2 * bound  # each within its bound of the exact ranks
    kth = np.sort(want)[::-1][9]  # the same top 10, up to ties within the two bounds
    assert np.all(got[np.argsort(-got, kind="stable")[:10]] >= kth - 2 * bound)
    assert two.compute_ms.keys() == one.compute_ms.keys() == two.iterations.keys() == two.methods.keys()
    # TunkRank's bound is tol times the scores' sum rounded up to 2 digits: equal unless the sums straddle a step.
    assert two.error_bounds["tunkrank"] == pytest.approx(one.error_bounds["tunkrank"], rel=0.1)


@pytest.mark.parametrize("victim", [1, "view"], ids=["a partition", "a graph view part"])
def test_a_partition_killed_mid_stream_relaunches_with_new_partitions_and_the_same_answer(ray_cluster, tmp_path, victim):
    killed_and_relaunched(tmp_path, victim, at_end=False)


def killed_and_relaunched(tmp_path, victim: int | str, at_end: bool) -> None:
    """A run of 2 partitions with ``victim`` killed (see :func:`run`) ends in the graph and ranks of the stream."""
    lines = edge_lines(1600, seed=6)
    # 8 s of stream: the partition actors' workers take a few seconds to start on a busy 2-core machine.
    two, graph, names, made = run(tmp_path, lines, parts=2, rate=200, kill=victim, at_end=at_end)
    # The killed one, its three siblings, the relaunch's four, and the graph view's two parts (new ones if one was killed).
    assert len(made) == 10 and all(dead(a) for a in made)
    order = list(names)
    exact = nx.pagerank(live_digraph(graph), alpha=0.85, tol=1e-14, max_iter=10_000)
    assert np.abs(ranks_by_name(two, names, order) - np.array([exact[n] for n in order])).sum() <= two.error_bounds["pagerank"]


def test_a_restart_s_new_graph_view_parts_take_the_clean_stop_s_view_back(ray_cluster, tmp_path):
    """As the service restarts: the API serves (the view file is read) before the pipeline starts on its own thread;
    the parts made then read their files back beside the rest of the launch, and answer the stopped service's
    graph, edge for edge, as of its newest epoch; the compute stage goes on from it without a whole epoch."""
    lines = edge_lines(1200, seed=9)
    path = tmp_path / "events.jsonl"
    write(path, lines)
    settings = Settings(source="file", path=path, data_dir=tmp_path / "data", epoch_interval="50ms", checkpoint_every=3,
                        shards=2, batch_size=60, compute_partitions=2)
    p = Pipeline(settings).start()
    try:
        p.wait_for_epoch(lambda v: v.result.vector.get("file:0") == len(lines), timeout=120)
    finally:
        p.stop()
    assert sorted(f.name for f in (tmp_path / "data" / "results").glob("view*.res")) == [
        "view-part-0.res", "view-part-1.res", "view.res"]
    again = Pipeline(settings)
    again.open()
    again.store.serving()
    again.start_in_background()
    try:
        stopped = again.store.latest_epoch
        assert stopped == p.store.latest_epoch, "the archived epochs are served from the start"
        deadline = time.monotonic() + 90
        while True:
            try:
                got = api_edges(again, stopped)
                break
            except NotFound:  # the parts are not up yet
                assert time.monotonic() < deadline, "the parts never took the view back"
                time.sleep(0.1)
        want = reference({"file:0": list(enumerate(lines))}, dict(again.store.get(stopped).result.vector), "edges")
        assert got == {k: v for k, v in want["edges"].items() if v[0] > 0}
        assert not list((tmp_path / "data" / "results").glob("view*.res")), "each file is read once"
        first = again.wait_for_epoch(lambda v: v.result.epoch > stopped, timeout=60).result
        assert not first.full_changes and again.store.graph.missed_epochs == 0
    finally:
        again.stop()
