"""Results to Kafka (``--results-topic``): each ranked epoch, once, as one record, in a Kafka transaction.

Owns what a downstream system reads from the topic, :func:`epoch_record` (its JSON
Schema is ``docs/results.schema.json``), and :class:`ResultPublisher`, the thread
that writes it with a transactional confluent-kafka producer. It reads the epochs
from the API's :class:`~pulsegraph.api.store.ResultStore` and calls no actor; the feed only
tells it that an epoch arrived (:meth:`ResultPublisher.notify`: O(1), never
blocks), so a slow or absent broker never slows the API. It must not touch the
pipeline's checkpoint or the source's offsets: those stay the truth (README,
Results to Kafka, says why the source offsets are not committed in its
transactions).

The guarantee, exactly: the topic has one partition, the record key is the epoch
number in decimal, and a ``read_committed`` consumer sees each published epoch
once, in strictly increasing order. The ``transactional.id`` comes from the
consumer group and the topic, so a restarted service fences its predecessor
(``init_transactions`` aborts whatever transaction it left open); only then is
the topic's last committed epoch read, and only epochs above it are published.
An epoch is therefore never published twice, so no consumer ever sees two
versions of one. Of a record, the epoch's facts (``epoch``, ``vector``,
``records``, ``vertices``, ``edges``, ``watermark``) are a pure function of its
vector and so the same after any recovery; its scores are not bit for bit: a
ranking re-solved after a restore starts from another point, and agrees with the
first solve within twice the stated bound (scores are written to the digits the
bound leaves meaningful). On each start the re-cut of the last committed epoch,
when the service holds it, is compared with the committed record (/health: ``results.recut``).

Alerts (:mod:`pulsegraph.api.alerts`) go to ``T.alerts`` (one partition too): for every epoch record of T, one
record in T.alerts with the same key, the epoch's alerts as one JSON object
(``docs/alerts.schema.json``), produced in the same transaction, so a ``read_committed`` consumer
sees an epoch's alerts exactly when, and as often as, it sees the epoch: once.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from typing import Any, Sequence

import numpy as np
import orjson

from pulsegraph.api.alerts import AlertBook
from pulsegraph.api.exceptions import NotFound
from pulsegraph.api.ranking import certified_ranks, held_in_both, mover_items
from pulsegraph.api.store import EpochView, ResultStore
from pulsegraph.errors import ResultsError
from pulsegraph.ingest.sources.kafka_clients import librdkafka_config
from pulsegraph.ingest.sources.kafka_config import KafkaConfig
from pulsegraph.ingest.sources.kafka_faults import diagnose

log = logging.getLogger(__name__)

MOVERS_K = 10  # movers per algorithm in a record, as /v1/movers answers by default
# Epochs per transaction while catching up after an outage: one commit per 50 records keeps a
# catch-up of thousands to seconds, and a transaction small enough to retry whole.
BATCH = 50
# Epoch numbers heard of and not yet published. The store retains the epochs themselves (its
# --retain-epochs); this only remembers which existed, to count the ones it drops as gaps.
PENDING_MAX = 100_000
WAKE_S = 0.2  # how long the publisher waits for news before it looks at the store anyway
# librdkafka calls that block: long enough for a broker answering under load, short enough that a
# broker outage is reported within seconds and stop() never waits long.
REQUEST_TIMEOUT_S = 10.0
# A transaction the broker aborts by itself if its producer vanished mid-way (a SIGKILL): the next
# service fences it sooner anyway, with init_transactions.
TRANSACTION_TIMEOUT_MS = 60_000
# Reconnect backoff while the broker is away.
BACKOFF_S = 0.5
BACKOFF_MAX_S = 10.0
# The error codes that mean another producer with our transactional.id took over.
_FENCED = {"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
FACTS = ("epoch", "vector", "watermark", "records", "vertices", "edges")

# librdkafka's own log: while the transaction coordinator loads (a broker start) it warns several times
# a millisecond that it retries; this module logs the outages and errors that matter itself.
_librdkafka_log = logging.getLogger(f"{__name__}.librdkafka")
_librdkafka_log.setLevel(logging.ERROR)


def score_decimals(bound: float | None) -> int | None:
    """Decimal places worth writing for scores within ``bound`` of exact: one digit below the bound's.
    More would be noise that differs between two solves of one graph; None: no bound, no rounding."""
    if bound is None or bound <= 0 or not math.isfinite(bound):
        return None
    return min(17, max(0, math.ceil(-math.log10(bound)) + 1))


def _rounded(x: float, decimals: int | None) -> float:
    return float(x) if decimals is None else round(float(x), decimals)


def epoch_record(view: EpochView, names: Sequence[str], k: int) -> dict:
    """The record of one ranked epoch: a function of the epoch (and of the ranked epoch before it, for
    the movers) only, never of when or how often it is built."""
    r = view.result
    top: dict[str, list] = {}
    bounds: dict[str, dict] = {}
    movers: dict[str, Any] = {}
    for algo in sorted(r.scores):
        scores = np.asarray(r.scores[algo])
        ids = np.asarray(view.top[algo][:k])
        best = scores[ids] if len(ids) else np.zeros(0)
        bound = r.bound(algo)
        d = score_decimals(bound)
        top[algo] = [{"vertex": names[v], "score": _rounded(s, d)} for v, s in zip(ids.tolist(), best.tolist())]
        m = certified_ranks(best, bound)
        bounds[algo] = {"error": bound, "norm": "l1", "certified": bound is not None and m == len(ids), "certified_ranks": m}
        prev = view.previous
        if prev is not None and algo in prev.ranks and algo in view.ranks:
            rising, falling = mover_items(prev.ranks[algo], view.ranks[algo], scores, names, MOVERS_K,
                                          held_in_both(prev.result, r))
            for item in (*rising, *falling):
                item["score"] = _rounded(item["score"], d)
            movers[algo] = {"from": prev.result.epoch, "rising": rising, "falling": falling}
        else:
            movers[algo] = None  # the ranked epoch before is not retained (the first one, or after a gap)
    return {
        "epoch": r.epoch,
        "vector": dict(sorted(r.vector.items())),
        # With --window, the largest event time below the vector (a pure function of it); null without.
        "watermark": getattr(r, "watermark", None),
        "records": r.records,
        "vertices": r.vertices,
        "edges": r.edges,
        "skipped": list(r.skipped),
        "k": k,
        "top": top,
        "bounds": bounds,
        "movers": movers,
    }


def encode(record: dict) -> bytes:
    """The record's bytes: keys sorted, floats in their shortest round-trip form, so equal records are equal bytes."""
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def compare_recut(committed: bytes, recut: bytes) -> dict:
    """How the record of an epoch built again (after a recovery) compares with the one committed before."""
    a, b = orjson.loads(committed), orjson.loads(recut)
    within = True
    for algo, items in a.get("top", {}).items():
        err = (a.get("bounds", {}).get(algo) or {}).get("error")
        other = {i["vertex"]: i["score"] for i in b.get("top", {}).get(algo, [])}
        d = score_decimals(err)
        slack = 2 * err + (10.0 ** -d if d is not None else 0.0) if err is not None else 0.0
        for i in items:
            if i["vertex"] in other and abs(other[i["vertex"]] - i["score"]) > slack:
                within = False
    return {
        "epoch": a.get("epoch"),
        "bytes_identical": committed == recut,
        "facts_identical": all(a.get(f) == b.get(f) for f in FACTS),
        "scores_within_bound": within,
    }


class _Fenced(Exception):
    pass


class ResultPublisher:
    """Publishes every epoch the store holds above the topic's last committed one, in order, in transactions."""

    def __init__(
        self, store: ResultStore, bootstrap: str, topic: str, transactional_id: str, k: int = 100,
        alerts: AlertBook | None = None, config: KafkaConfig | None = None,
    ) -> None:
        self.store = store
        self.config = config  # how to reach the results topic's cluster (--results-kafka-config or --kafka-config)
        self.alerts = alerts
        # The epochs' alerts, one record per epoch record, in the same transactions.
        self.alerts_topic = f"{topic}.alerts" if alerts is not None else None
        self.bootstrap = bootstrap
        self.topic = topic
        self.transactional_id = transactional_id
        self.k = k
        self._pending: collections.deque[int] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="results-publisher", daemon=True)
        self._producer: Any = None
        self.state = "starting"
        self.error: str | None = None
        self.last_committed: int | None = None  # None until read from the topic
        self.published = 0
        self.gaps = 0
        self.gap_epochs: collections.deque[int] = collections.deque(maxlen=20)
        self._committed_value: bytes | None = None  # the last committed record as read at connect
        self.recut: dict | None = None

    # -- the feed's side ----------------------------------------------------------------------------
    def notify(self, view: EpochView) -> None:
        """An epoch arrived in the store (called on the feed thread: must not block)."""
        with self._lock:
            if len(self._pending) >= PENDING_MAX:
                self._gap(self._pending.popleft())
            self._pending.append(view.result.epoch)
        self._wake.set()

    def start(self) -> "ResultPublisher":
        self._thread.start()
        return self

    def stop(self, timeout: float = REQUEST_TIMEOUT_S + 5) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=timeout)

    def status(self) -> dict:
        with self._lock:
            pending = sum(1 for e in self._pending if self.last_committed is None or e > self.last_committed)
        return {
            "topic": self.topic,
            "alerts_topic": self.alerts_topic,
            "state": self.state,
            "last_committed": self.last_committed,
            "published": self.published,
            "pending": pending,
            # Epochs the API's retention dropped before they could be published: missing from the topic.
            "gaps": self.gaps,
            "gap_epochs": list(self.gap_epochs),
            "error": self.error,
            "recut": self.recut,
        }

    # -- the publisher's thread ---------------------------------------------------------------------
    def _gap(self, epoch: int) -> None:
        if self.last_committed is not None and epoch <= self.last_committed:
            return
        self.gaps += 1
        self.gap_epochs.append(epoch)
        log.error(
            "results topic %s: epoch %d left the API's retention before it was published; it is missing "
            "from the topic (a gap; --retain-epochs bounds how long a broker outage can be caught up)", self.topic, epoch,
        )

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        backoff = BACKOFF_S
        while True:
            stopping = self._stop.is_set()
            try:
                if self._producer is None:
                    if stopping:
                        break
                    self._connect()
                    backoff = BACKOFF_S
                if not self.store.provisional:  # epochs taken back at a start are not known to be the history yet
                    self._check_recut()
                    self._publish_pending()
                self.state, self.error = "publishing", None
            except _Fenced as exc:
                self.state, self.error = "fenced", str(exc)
                log.error("%s", exc)
                self._drop_producer()
                return
            except (KafkaException, ResultsError) as exc:  # an outage, or a refusal (credentials, ACLs): its action
                fault = diagnose(str(exc), self.bootstrap, self.config, self.topic)
                self.state, self.error = ("faulted", fault) if fault else ("disconnected", f"Kafka: {exc}")
                log.warning("results topic %s at %s: %s; retrying in %.1f s", self.topic, self.bootstrap, exc, backoff)
                self._drop_producer()
                if stopping or self._stop.wait(backoff):
                    break
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            except Exception:  # noqa: BLE001 - a bug must not end publishing silently: say so, and retry
                log.exception("results publisher failed")
                self.state, self.error = "disconnected", "internal error (see the log)"
                self._drop_producer()
                if stopping or self._stop.wait(BACKOFF_MAX_S):
                    break
                continue
            if stopping:
                break  # one last pass above published what had arrived
            self._wake.wait(WAKE_S)
            self._wake.clear()
        self._drop_producer()
        if self.state != "fenced":
            self.state = "stopped"

    def _connect(self) -> None:
        from confluent_kafka import KafkaException, Producer

        self.state = "connecting"
        self._ensure_topic()
        producer = Producer(librdkafka_config(self.bootstrap, self.config, {
            "transactional.id": self.transactional_id,
            "enable.idempotence": True,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "linger.ms": 5,
            "logger": _librdkafka_log,
        }))
        try:
            # Fences any producer of a service before this one and ends its open transaction, so the
            # last committed epoch read next cannot change under us.
            producer.init_transactions(REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            self._raise_if_fenced(exc)
            raise
        last, value = read_last_committed(self.bootstrap, self.topic, self.transactional_id, config=self.config)
        self._producer = producer
        if last is not None and self.last_committed is not None and last < self.last_committed:
            raise ResultsError(
                f"results topic {self.topic} ends at epoch {last}, below epoch {self.last_committed} that this service "
                f"committed to it: the topic lost records (re-created or truncated)"
            )
        if self.last_committed is None:
            self._committed_value = value  # compared with the same epoch re-cut, once, at start
        self.last_committed = last if last is not None else 0
        log.info("results topic %s: last committed epoch %d; publishing the epochs after it", self.topic, self.last_committed)

    def _ensure_topic(self) -> None:
        """The topics (results, and alerts when there is a book), each created with one partition (one
        order of epochs) if it does not exist."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(librdkafka_config(self.bootstrap, self.config, {"logger": _librdkafka_log}))
        meta = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        for topic in (self.topic, self.alerts_topic):
            if topic is None:
                continue
            found = meta.topics.get(topic)
            if found is not None and found.error is None:
                if len(found.partitions) != 1:
                    log.warning("results topic %s has %d partitions; records go to partition 0 only", topic, len(found.partitions))
                continue
            futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1)], request_timeout=REQUEST_TIMEOUT_S)
            try:
                futures[topic].result(timeout=REQUEST_TIMEOUT_S)
                log.info("created the results topic %s (1 partition)", topic)
            except Exception as exc:  # noqa: BLE001 - created meanwhile by another client is fine
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise ResultsError(f"cannot create the results topic {topic}: {exc}") from exc

    def _raise_if_fenced(self, exc: Exception) -> None:
        err: Any = exc.args[0] if exc.args else None
        name = err.name() if err is not None and hasattr(err, "name") else ""
        if name in _FENCED:
            raise _Fenced(
                f"results topic {self.topic}: another service publishes with transactional.id {self.transactional_id} "
                f"({name}); this one stopped publishing. Operator action: run one service per --group and "
                f"--results-topic, or give this one another --group"
            ) from exc

    def _drop_producer(self) -> None:
        p, self._producer = self._producer, None
        if p is None:
            return
        try:
            p.abort_transaction(1.0)  # nothing open is the usual case: it raises, and that is fine
        except Exception:  # noqa: BLE001
            pass
        try:
            p.purge()
            p.flush(0)
        except Exception:  # noqa: BLE001
            pass

    def _candidates(self) -> list[int]:
        last = self.last_committed or 0
        with self._lock:
            while self._pending and self._pending[0] <= last:
                self._pending.popleft()
            heard = set(self._pending)
        return sorted(heard | set(self.store.epoch_numbers(after=last)))

    def _alerts_value(self, epoch: int) -> bytes | None:
        """The epoch's T.alerts record (None without a book). Building it fixes the epoch's alerts: a rule
        made from now on applies to later epochs only."""
        if self.alerts is None:
            return None
        return self.alerts.record_json(epoch)

    def _publish_pending(self) -> None:
        while True:
            batch: list[tuple[int, bytes, bytes | None]] = []
            for e in self._candidates()[:BATCH]:
                try:
                    view = self.store.get(e)
                except NotFound:
                    self._gap(e)
                    with self._lock:
                        self._pending = collections.deque(p for p in self._pending if p != e)
                    continue
                batch.append((e, encode(epoch_record(view, self.store.names, self.k)), self._alerts_value(e)))
            if not batch:
                return
            self._commit(batch)
            if self._stop.is_set():
                return  # stopping: one batch more, then what remains waits for the next start

    def _commit(self, batch: list[tuple[int, bytes, bytes | None]]) -> None:
        from confluent_kafka import KafkaException

        p = self._producer
        failed: list[Any] = []

        def delivered(err, msg) -> None:
            if err is not None:
                failed.append(err)

        try:
            p.begin_transaction()
            for e, value, alerts in batch:
                p.produce(self.topic, key=str(e).encode(), value=value, partition=0, on_delivery=delivered)
                if self.alerts_topic is not None and alerts is not None:
                    p.produce(self.alerts_topic, key=str(e).encode(), value=alerts, partition=0, on_delivery=delivered)
            p.commit_transaction(REQUEST_TIMEOUT_S)  # flushes first: every record is acknowledged, or none counts
        except KafkaException as exc:
            self._raise_if_fenced(exc)
            # The outcome may be unknown (a commit that timed out); the next producer's init_transactions
            # settles it and the topic then says what was committed.
            raise
        if failed:
            raise ResultsError(f"records of a committed transaction failed: {failed[0]}")
        self.last_committed = batch[-1][0]
        self.published += len(batch)

    def _check_recut(self) -> None:
        """Once after start: the record of the last committed epoch, built again from what this service holds
        (re-cut after the recovery, or read back from the archive), against the committed bytes."""
        if self._committed_value is None or self.last_committed is None:
            return
        try:
            view = self.store.get(self.last_committed)
        except NotFound:
            if self.store.latest_epoch > self.last_committed:
                self._committed_value = None  # it will not come: the history resumed after it
            return
        self.recut = compare_recut(self._committed_value, encode(epoch_record(view, self.store.names, self.k)))
        self._committed_value = None
        (log.info if self.recut["bytes_identical"] else log.warning)("results topic %s: epoch built again after the start: %s", self.topic, self.recut)


def read_last_committed(bootstrap: str, topic: str, transactional_id: str, timeout: float = REQUEST_TIMEOUT_S,
                        config: KafkaConfig | None = None) -> tuple[int | None, bytes | None]:
    """The key (an epoch number) and value of the last committed record of ``topic``'s partition 0, or (None, None).

    Read with ``isolation.level=read_committed``: the end offset is then the last stable offset
    (librdkafka >= 1.7.1), and aborted records are never returned. The last offsets hold commit
    markers, so it reads back from the end in growing steps until it finds a record.
    """
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer(librdkafka_config(bootstrap, config, {
        "group.id": f"{transactional_id}.reader",  # never joined nor committed to: assign() only
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "logger": _librdkafka_log,
    }))
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout, cached=False)
        step = 16
        while high > low:
            start = max(low, high - step)
            c.assign([TopicPartition(topic, 0, start)])
            last: tuple[int, bytes] | None = None
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None:
                    continue
                failure = msg.error()
                if failure is not None:
                    if failure.code() == KafkaError._PARTITION_EOF:
                        break
                    raise KafkaException(failure)
                key = (msg.key() or b"").decode(errors="replace")
                if not key.isdigit():
                    raise ResultsError(
                        f"results topic {topic} holds a record (offset {msg.offset()}) whose key {key!r} is not an epoch "
                        f"number: it is not a pulsegraph results topic. Operator action: give another --results-topic"
                    )
                last = (int(key), msg.value() or b"")
                if (msg.offset() or 0) >= high - 1:
                    break
            else:
                raise ResultsError(f"results topic {topic}: reading its last records timed out")
            if last is not None:
                return last
            if start == low:
                break
            step *= 8
        return None, None
    finally:
        c.close()
