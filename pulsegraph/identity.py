"""Which source a data folder's history was read from, and the check that every launch reads that one.

An epoch vector names offsets, and offsets mean something only in the log they
were read from. A topic deleted and re-created under its name, a file replaced
by another at its path, a synthetic stream with another seed or a different
transform all keep the partition names and change what the offsets hold: a
restart would resume at the old offsets and silently skip (or misread) the new
records. So the first launch on a folder writes the source's identity to
``DATA_DIR/SOURCE.json`` (durably), and every launch compares: on a mismatch it
stops with an error that names the field and the operator action.

The identity: the kind and the transform; for Kafka the topic and its id (Kafka
topic ids, which a re-created topic does not keep); for a file its path and its
inode; for the synthetic stream its seed, users and hashtags. Not the partition
count (a topic may grow; :func:`check_resumable`, every launch's check, refuses
a history of partitions the source lacks), nor the bootstrap servers (a cluster
may move behind new addresses and keep its topics).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from pulsegraph.base.durable import fsync_dir
from pulsegraph.errors import PipelineError
from pulsegraph.ingest.sources.kafka import partition_number
from pulsegraph.ingest.sources.kafka_clients import TopicInfo
from pulsegraph.settings import Settings
from pulsegraph.snapshots.recovery import RecoveryPlan

log = logging.getLogger(__name__)

FILE = "SOURCE.json"

# What each field's change means, for the operator.
_MEANING = {
    "topic_id": "the topic was deleted and re-created: its offsets hold other records than the ones this history applied",
    "inode": "the file at this path was replaced by another: its lines are not the ones this history applied",
    "kind": "this is another kind of source",
    "topic": "this is another topic",
    "path": "this is another file",
    "transform": "another transform makes other transactions of the same records",
    "seed": "another seed makes another synthetic stream",
    "users": "another number of users makes another synthetic stream",
    "hashtags": "another number of hashtags makes another synthetic stream",
    "window": "another --window makes another graph of the same records, and the checkpoints hold the old one",
}


def source_identity(settings: Settings, topic: TopicInfo | None = None) -> dict:
    """The identity of the source ``settings`` name (``topic``: the broker's answer, for Kafka)."""
    s = settings
    # Not the source, strictly, but as binding: the same vectors under another window are another history.
    out: dict = {"kind": s.source, "transform": s.transform_name, "window": s.window or "off"}
    if s.source == "kafka":
        out.update(topic=s.topic, topic_id=topic.topic_id if topic else None)
    elif s.source == "file":
        path = Path(str(s.path)).resolve()
        out.update(path=str(path), inode=path.stat().st_ino if path.exists() else None)
    else:
        out.update(seed=s.seed, users=s.users, hashtags=s.hashtags)
    return out


def check_source_identity(data_dir: Path, current: dict, has_history: bool) -> None:
    """Refuse a launch whose source is not the one of the folder's history; record it on the first launch."""
    path = Path(data_dir) / FILE
    if path.exists():
        stored = json.loads(path.read_text())
        for field, was in stored.items():
            now = current.get(field)
            if was is not None and now is not None and was != now:
                raise PipelineError(
                    f"{data_dir} holds the history of another source: its {field} was {was!r}, now {now!r} "
                    f"({_MEANING.get(field, 'another source')}). Operator action: run with the source that wrote it, "
                    f"or move {data_dir} aside (or use another --data-dir) to start anew from this one."
                )
        if all(stored.get(k) is not None or v is None for k, v in current.items()):
            return
        # Something the first launch could not know (a file that did not exist yet): recorded now.
        current = {**current, **{k: v for k, v in stored.items() if v is not None}}
    elif has_history:
        log.warning("%s has a history but no %s (written by an older version); recording this source as its own", data_dir, FILE)
    tmp = path.with_name(FILE + ".tmp")
    tmp.write_text(json.dumps(current, sort_keys=True))
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def check_resumable(s: Settings, resume: RecoveryPlan | None, partitions: list[str], topic: TopicInfo | None) -> None:
    """Refuse to resume a history this source cannot continue: another source (the identity above),
    partitions it does not have (it would wait forever), or a Kafka
    partition that now ends below offsets the history applied (records lost to an unclean leader
    election: the new records that take their offsets would be skipped)."""
    check_source_identity(s.data_dir, source_identity(s, topic), has_history=resume is not None)
    known = resume.partitions() if resume else set()
    missing = sorted(known - set(partitions))
    if missing:
        raise PipelineError(
            f"{s.data_dir} holds the history of other partitions ({', '.join(missing[:4])}) than this "
            f"source has. Operator action: run with the settings that wrote it, or use another --data-dir."
        )
    if topic is None or resume is None:
        return
    for name, offset in sorted(resume.newest_vector.items()):
        if name.startswith(f"{s.topic}:") and offset > topic.ends.get(partition_number(name), 0):
            raise PipelineError(
                f"Kafka partition {name} ends at offset {topic.ends.get(partition_number(name), 0)}, below offset "
                f"{offset} that {s.data_dir}'s history already applied: the log lost records (an unclean leader "
                f"election, or the topic truncated), and new records would take their offsets unseen. Operator "
                f"action: restore the topic, or move {s.data_dir} aside to start anew from the topic as it is."
            )
