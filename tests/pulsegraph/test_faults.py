"""Faults that are recovered or stop the service loudly, never silently wrong.

Each fault is produced for real on real actors: a user's transform that raises,
an ingest loop that dies, an epoch log that is not one history.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import ray

from pulsegraph.settings import Settings
from pulsegraph.snapshots.epoch import EpochLog
from pulsegraph.snapshots.exceptions import EpochLogError
from pulsegraph.topology import Pipeline
from tests.graphref import reference, without_attrs
from tests.pulsegraph.test_pipeline import edge_lines, write
from tests.pulsegraph.test_recovery import crash, relaunched

FAULTY = "tests.pulsegraph.faulty_transform:faulty"
EXE = os.path.join(os.path.dirname(sys.executable), "pulsegraph")


def edge(src: str, dst: str) -> bytes:
    return json.dumps({"op": "add_edge", "src": src, "dst": dst}).encode()


def test_a_transform_that_raises_makes_dead_letters_and_an_ingest_loop_that_dies_relaunches(ray_cluster, tmp_path):
    marker = tmp_path / "crash-once"
    marker.touch()
    lines = edge_lines(900, seed=21)
    raising = {60, 250, 610, 800}
    for o in raising:
        lines[o] = edge("raise", f"v{o}")
    lines[400] = edge(f"crash-once:{marker}", "v1")
    records = {"file:0": write(tmp_path / "events.jsonl", lines)}
    settings = Settings(
        source="file", path=tmp_path / "events.jsonl", data_dir=tmp_path / "data", epoch_interval="50ms",
        checkpoint_every=3, rate=1500, shards=2, batch_size=40, transform=FAULTY,
    )
    p = Pipeline(settings).start()
    try:
        view = p.wait_for_epoch(lambda v: relaunched(p, 1) and v.result.vector.get("file:0") == len(lines), timeout=120)
        assert not marker.exists(), "the ingest loop met the record that crashes it"
        assert p.recoveries == 1, p.status()
        # The replayed record is an ordinary edge; the raising ones are no edges at all.
        kept = {"file:0": [(o, raw) for o, raw in records["file:0"] if o not in raising]}
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(reference(kept, view.result.vector))
        # The status is a cache the supervisor refreshes every second: the relaunched actors' count may
        # reach it a poll after the epoch does (seen on a loaded machine).
        deadline = time.monotonic() + 10
        while p.status().get("dead_letters", 0) == 0 and time.monotonic() < deadline:  # none before the first poll
            time.sleep(0.2)
        assert p.status()["dead_letters"] > 0
    finally:
        p.stop()
    letters = [json.loads(line) for line in (tmp_path / "data" / "dead-letter.jsonl").read_bytes().splitlines()]
    # Once each, though the relaunch replayed the records after its checkpoint (some of them raising).
    assert sorted(d["offset"] for d in letters) == sorted(raising)
    assert all("transform tests.pulsegraph.faulty_transform:faulty raised ValueError" in d["reason"] for d in letters)


def duplicate_line(path, line: int) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(line, lines[line - 1])
    path.write_bytes(b"".join(lines))


def test_an_epoch_log_that_is_not_one_history_stops_the_service_with_the_operator_action(ray_cluster, tmp_path):
    lines = edge_lines(3000, seed=22)
    write(tmp_path / "events.jsonl", lines)
    settings = Settings(
        source="file", path=tmp_path / "events.jsonl", data_dir=tmp_path / "data", epoch_interval="50ms",
        checkpoint_every=1000, rate=1500, shards=2, batch_size=40,
    )
    log_path = tmp_path / "data" / "epochs.log"
    p = Pipeline(settings).start()
    try:
        p.wait_for_epoch(lambda v: v.result.epoch >= 4, timeout=60)
        # A running service whose log is damaged: the next relaunch reads it, and stops for good.
        duplicate_line(log_path, 2)
        ray.kill(p.shards[0], no_restart=True)
        assert p.fatal.wait(60), p.status()
        status = p.status()
        assert status["status"] == "failed" and status["ingest"] == "stopped"
        assert "line 3" in status["error"] and "Operator action" in status["error"], status
    finally:
        crash(p)
    with pytest.raises(EpochLogError, match="epoch 2 comes after epoch 2, not 3"):
        EpochLog.read(str(log_path))
    # The command an operator runs refuses at once, with the same words, and exits 1.
    out = subprocess.run(
        [EXE, "run", "--source", "file", "--path", str(tmp_path / "events.jsonl"), "--data-dir", str(tmp_path / "data"),
         "--port", "0", "--num-cpus", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
    )
    assert out.returncode == 1, out.stdout
    assert "line 3" in out.stdout and "Operator action" in out.stdout, out.stdout[-2000:]


def test_a_relaunch_with_other_shards_and_no_checkpoint_pairs_every_score_with_its_vertex(ray_cluster, tmp_path):
    """A relaunch before the first checkpoint on a cluster that lost or gained a node cuts the logged
    epochs again with another shard count (2 per node), while the API keeps the names it has and appends
    what the compute stage sends after them. (The node count is stood in for by the shard setting the
    relaunch reads.) Degrees read by name through the API's ids must be the reference's."""
    lines = edge_lines(2400, seed=23, vertices=400)
    records = {"file:0": write(tmp_path / "events.jsonl", lines)}
    settings = Settings(
        source="file", path=tmp_path / "events.jsonl", data_dir=tmp_path / "data", epoch_interval="50ms",
        checkpoint_every=100_000, rate=2000, shards=2, batch_size=40,
    )
    p = Pipeline(settings).start()
    try:
        p.wait_for_epoch(lambda v: v.result.vector.get("file:0", 0) > 800, timeout=60)
        p.settings = settings.model_copy(update={"shards": 3})
        ray.kill(p.shards[0], no_restart=True)
        view = p.wait_for_epoch(lambda v: relaunched(p, 1) and v.result.vector.get("file:0") == len(lines), timeout=120)
        assert p.sizing["shards"] == 3
        want = reference(records, view.result.vector)
        out_deg = {n: 0 for n in want["vertices"]}
        for (s, _, _), (m, _) in want["edges"].items():
            out_deg[s] += m > 0
        r = view.result
        assert len(p.store.names) == len(out_deg)
        assert {n: int(r.out_degree[p.store.index[n]]) for n in out_deg} == out_deg
    finally:
        p.stop()


def test_a_start_that_fails_on_its_thread_ends_the_service_loudly_not_serving_on(tmp_path, monkeypatch):
    """The service serves its archived epochs while the pipeline starts on a thread of its own; a start that
    raises there (here Ray's start, made to fail: a real one exits the process from Ray's C++ side) must
    set ``fatal``, so the service exits with the reason, and stop() must still return."""
    import pulsegraph.topology as topology

    def no_ray(settings):
        raise RuntimeError("GCS unreachable")

    monkeypatch.setattr(topology, "init_ray", no_ray)
    p = Pipeline(Settings(data_dir=tmp_path / "data"))
    p.open()
    p.start_in_background()
    assert p.fatal.wait(30), "a failed start left the service serving on"
    assert "RuntimeError: GCS unreachable" in (p.fatal_error or "") and p.status()["status"] == "failed"
    t0 = time.monotonic()
    p.stop()
    assert time.monotonic() - t0 < 10
