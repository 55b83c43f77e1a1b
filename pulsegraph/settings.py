"""The one settings object: typed, validated, frozen, built once at the entry point.

Values come from flags (the CLI passes them in), then ``PULSEGRAPH_*``
environment variables, then the defaults below, which run as they are. Nothing
else in the project reads ``os.environ``; the secrets read from it are removed
from it before any other process is started (:func:`drop_secrets_from_environment`).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from pulsegraph.ingest.exceptions import IngestError, KafkaConfigError
from pulsegraph.ingest.decode import RegistrySpec, registry_client_conf
from pulsegraph.ingest.sources.kafka_config import KafkaConfig, load_kafka_config, parse_properties
from pulsegraph.ingest.transforms import get_transform

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
# The synthetic stream's rate when none is given: lively on a dashboard, light on a laptop.
DEFAULT_SYNTHETIC_RATE = 1000.0


def parse_duration(value) -> float:
    """Seconds from 1.5, "1.5", "1500ms", "1s", "2m", "6h" or "7d"."""
    if isinstance(value, (int, float)):
        return float(value)
    m = _DURATION.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a duration such as 500ms, 1s, 2m, 6h or 7d")
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}[m.group(2)]


# A bearer token shorter than this is guessable; `python -c "import secrets; print(secrets.token_urlsafe(32))"` makes one.
MIN_TOKEN_CHARS = 16
# And it must take a cracker at least 2**80 guesses, as zxcvbn estimates them (it knows dictionaries, names,
# l33t spellings, keyboard runs, repeats, sequences and dates, and counts a random character as 10 guesses, not
# 64): out of reach for any offline attack. secrets.token_urlsafe(32) estimates at ~140 bits.
MIN_TOKEN_BITS = 80
MAKE_TOKEN = 'python3 -c "import secrets; print(secrets.token_urlsafe(32))"'
# Words a careless operator builds a token from, counted as the dictionary words they are here.
_PROJECT_WORDS = ["pulsegraph", "pulse", "graph", "token", "api", "apitoken", "secret", "bearer", "kafka", "ray"]
# zxcvbn looks at this many characters at a time (its own limit); a longer token is estimated in pieces.
_ZXCVBN_CHARS = 72
_PLACEHOLDERS = re.compile(
    r"(change[-_ ]?me|changeit|secret|password|passw0rd|token|api[-_]?token|placeholder|example|default|todo|test|dummy|"
    r"x+|\*+|0+|1234.*|<.*>|\$\{.*\}|your[-_ ].*|replace[-_ ]?me.*|insert[-_ ].*)",
    re.IGNORECASE,
)


def token_bits(value: str) -> float:
    """log2 of the guesses zxcvbn estimates ``value`` needs; a piece repeated counts once."""
    from zxcvbn import zxcvbn

    bits, seen = 0.0, set()
    for i in range(0, len(value), _ZXCVBN_CHARS):
        piece = value[i : i + _ZXCVBN_CHARS]
        if piece not in seen:
            seen.add(piece)
            bits += math.log2(max(float(zxcvbn(piece, user_inputs=_PROJECT_WORDS)["guesses"]), 1.0))
    return bits


def check_secret(value: str) -> None:
    """Refuse placeholder, short and guessable secrets: a default-looking token is as good as none.
    The messages never repeat the token."""
    value = value.strip()
    if _PLACEHOLDERS.fullmatch(value) or len(set(value)) < 4:
        raise ValueError(f"the API token is a placeholder; generate one with: {MAKE_TOKEN}")
    if len(value) < MIN_TOKEN_CHARS:
        raise ValueError(f"the API token has {len(value)} characters; use at least {MIN_TOKEN_CHARS}: {MAKE_TOKEN}")
    unit = re.fullmatch(r"(.+?)\1+", value, re.DOTALL)
    if unit:
        raise ValueError(f"the API token is {len(unit.group(1))} characters repeated; generate a random one with: {MAKE_TOKEN}")
    bits = token_bits(value)
    if bits < MIN_TOKEN_BITS:
        raise ValueError(
            f"the API token is too easy to guess: about {bits:.0f} bits where {MIN_TOKEN_BITS} are needed (dictionary words, "
            f"names, keyboard runs, repeats and sequences add little). Generate a random one with: {MAKE_TOKEN}"
        )


# The most ranking partitions (--compute-partitions). Every round of a partitioned solve is one call to each
# partition from the compute actor, and a ranked epoch takes ~50-135 rounds (bench/partition_ray.py); an
# exchange moves P * P messages. Measured on local Ray on this 2-core machine (BENCHMARKS.md, "The ranking
# over P partitions as Ray actors"), one empty round cost 1.5-2.1 ms with one actor, 2.1-2.9 ms with 2 and
# 4.3-5.1 ms with 4: ~1-1.3 ms per partition called. Even at a fifth of that on a cluster's idle cores, 64
# partitions' calls would be ~15 ms a round, ~1-2 s of an epoch, longer than one engine's solve of millions of
# edges, so more partitions could only slow ranking down; a cluster that wants more needs a driver that
# reaches its partitions through a tree of calls first.
MAX_COMPUTE_PARTITIONS = 64

# Variables whose values are secrets: read once into the settings, then removed from the environment
# before any process is started (every child inherits it; none needs them).
SECRET_VARIABLES = ("PULSEGRAPH_API_TOKEN",)


def drop_secrets_from_environment() -> None:
    """Remove the secret variables from this process's environment, so that no process it starts
    inherits them; the settings built from them keep their values."""
    for name in SECRET_VARIABLES:
        os.environ.pop(name, None)


class Settings(BaseSettings):
    # hide_input_in_errors: a refused token is never echoed back in the error (nor in a traceback).
    model_config = SettingsConfigDict(env_prefix="PULSEGRAPH_", frozen=True, extra="forbid", hide_input_in_errors=True)

    source: Literal["synthetic", "file", "kafka"] = Field("synthetic", description="where events come from")
    path: Path | None = Field(None, description="the JSONL file of --source file (followed as it grows)")
    bootstrap: str | None = Field(None, description="Kafka bootstrap servers HOST:PORT[,HOST:PORT] of --source kafka")
    topic: str | None = Field(None, description="the Kafka topic of --source kafka (its bad records go to TOPIC.dlq)")
    group: str = Field("pulsegraph", description="Kafka consumer group that durable offsets are committed to (for lag monitoring)")
    kafka_client: Literal["kafka-python", "confluent"] = Field(
        "confluent", description="the Kafka client library of --source kafka: confluent (librdkafka) or kafka-python"
    )
    kafka_config: Path | None = Field(
        None, description="a properties file in librdkafka's names (the file kcat -F takes: security.protocol, sasl.mechanism, "
        "sasl.username, sasl.password, ssl.ca.location, ...) that every Kafka client of the service connects with; "
        "read by this process only, its secrets never shown",
    )
    results_kafka_config: Path | None = Field(
        None, description="the properties file of --results-bootstrap's cluster (default: --kafka-config)"
    )
    format: Literal["json", "avro", "jsonschema", "protobuf"] = Field(
        "json", description="what a record holds: json, or avro, jsonschema or protobuf framed by a schema registry (decoded "
        "before the transform, which sees the same object a JSON record gives; protobuf needs no generated classes)",
    )
    schema_registry: str | None = Field(None, description="the schema registry's URL (Confluent's API) of --format avro|jsonschema|protobuf")
    schema_registry_config: Path | None = Field(
        None, description="a properties file of the schema registry client (basic.auth.user.info, ssl.ca.location, "
        "ssl.certificate.location, ssl.key.location), read by this process only, its secrets never shown",
    )
    results_topic: str | None = Field(
        None, description="publish each ranked epoch to this Kafka topic, once, in a transaction, keyed by its number (created with 1 partition if missing)"
    )
    results_bootstrap: str | None = Field(
        None, description="Kafka bootstrap servers of --results-topic (default: --bootstrap of --source kafka; required with another source)"
    )
    results_k: int = Field(100, ge=1, le=1000, description="how many of each ranking a --results-topic record holds (the top k)")
    transform: str | None = Field(None, description="record -> updates: edges, tweets, or your own as package.module:NAME (default: tweets for synthetic, edges for file)")
    rate: float | None = Field(None, ge=0, description="events/s to read; 0 means as fast as the pipeline takes them (default: 1000 for synthetic, unbounded for file)")
    limit: int | None = Field(None, ge=0, description="stop the source after this many records")
    partitions: int = Field(2, ge=1, le=1024, description="partitions of the synthetic stream")
    seed: int = Field(7, description="seed of the synthetic stream")
    users: int = Field(20_000, ge=2, description="users in the synthetic stream")
    hashtags: int = Field(1_000, ge=1, description="hashtags in the synthetic stream")
    shards: int | None = Field(None, ge=1, le=256, description="shard actors (default: 2 per node of the Ray cluster; a checkpoint's count when resuming)")
    ingest_actors: int | None = Field(None, ge=1, le=256, description="ingest actors, partitions spread over them (default: two per node, at most one per partition)")
    batch_size: int = Field(2000, ge=1, le=1_000_000, description="records read per partition per round")
    epoch_interval: float = Field(1.0, gt=0, description="time between epoch cuts, e.g. 1s or 500ms")
    window: float | None = Field(None, gt=0, description="sliding window of event time, e.g. 10m, 6h or 7d: an epoch holds the "
        "transactions of the last WINDOW before its watermark (default: off, the graph keeps everything)")
    id_reuse_after: float = Field(120.0, ge=0, description="with --window: a vertex out of the snapshot while the watermark advances this much "
        "event time, e.g. 2m, gives its id to new vertices, so the ids follow the window; the API then keeps no epoch whose watermark is "
        "this much below the newest one's (0: never reuse)")
    host: str = Field("127.0.0.1", description="address the API binds")
    port: int = Field(8000, ge=0, le=65535, description="port the API binds")
    api_token: SecretStr | None = Field(None, description="bearer token that POST /v1/events (and protected reads) need; no default; placeholders, repeats and tokens "
        "under ~80 bits of estimated strength are refused")
    api_token_file: Path | None = Field(None, description="a file whose first line is the bearer token (instead of --api-token)")
    allow_anonymous_writes: bool = Field(False, description="accept POST /v1/events without a token when none is configured")
    protect_reads: bool = Field(False, description="reads need the bearer token too")
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field((), description="origins that browsers may call the API from, comma-separated (default: none)")
    max_connections: int = Field(
        2048, ge=16, le=1_000_000,
        description="open API connections at most; at the cap a new one evicts the longest idle, or gets 503 when all are busy "
        "(lowered to fit the process's file descriptor limit, with a reserve for the pipeline)",
    )
    max_header_bytes: int = Field(32 * 1024, ge=1024, le=1024 * 1024, description="request line and headers at most, e.g. 32KiB; past it 431")
    header_timeout: float = Field(10.0, gt=0, description="a request's line and headers must arrive within this, e.g. 10s; past it 408")
    keep_alive_timeout: float = Field(5.0, gt=0, description="an API connection with no request in flight is closed after this idle time, e.g. 5s")
    send_timeout: float = Field(30.0, gt=0, description="an API connection whose client takes none of the bytes sent to it for this long is dropped (a stream client that stopped reading)")
    max_streams: int = Field(1000, ge=1, description="open /v1/stream and /v1/alerts/stream connections at most, together (never more than half of the connections: streams do not end by themselves); the last tenth is kept for the dashboard's own origin and authenticated clients")
    max_concurrent_writes: int = Field(4, ge=1, le=256, description="POST /v1/events requests processed at once; more get 503 with Retry-After")
    data_dir: Path = Field(Path("data"), description="epoch log, checkpoints, dead letters and the embedded event log")
    checkpoint_every: int = Field(10, ge=0, description="write a checkpoint every this many epochs (0: never); a restart resumes from the newest")
    checkpoint_budget: float = Field(0.1, gt=0, le=1, description="share of its time a stage may spend writing checkpoints: after one that stalled a stage for d seconds, "
        "new epochs are not checkpointed for d * (1 / budget - 1) (checkpoints under 0.25 s never pause; 1: never pause)")
    checkpoint_whole_every: int = Field(0, ge=0, description="write the compute stage whole (its graph, ranking and applications: ~110 B per live edge) in every this many "
        "checkpoints, so that a restart after a crash goes on from it instead of rebuilding them from the shards (0: only in a clean stop's)")
    epoch_log_keep: int = Field(10_000, ge=0, description="epochs the epoch log keeps at least; older entries that a kept checkpoint covers are dropped (with checkpoints on)")
    rank_types: Annotated[tuple[str, ...] | None, NoDecode] = Field(None, description="edge types PageRank ranks, comma-separated (default: mentions for tweets, all for edges)")
    pagerank_tol: float = Field(1e-7, gt=0, lt=1, description="ranks are within this L1 error of the exact PageRank (TunkRank: relative to the scores' sum)")
    pagerank_max_iter: int = Field(1000, ge=1, description="PageRank fails past this many iterations")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="where ranking runs: cuda (CuPy, asks Ray for a GPU), cpu (NumPy/SciPy), auto (CuPy if it sees a GPU)")
    rank_dtype: Literal["float64", "float32"] = Field("float64", description="floats of the resident graph and the ranks (float32 ranks to a tolerance of at most 1e-5)")
    tunkrank_p: float = Field(0.05, gt=0, lt=1, description="TunkRank's retweet probability p")
    rank_push_max_delta: float = Field(0.0001, ge=0, description="epochs changing at most this share of the ranked edges start with a residual push, larger ones go straight to warm-started GMRES")
    rank_compact_fraction: float = Field(0.05, gt=0, description="the resident graph folds its overlay of changes into its CSR past this share of the edges")
    landmarks: int = Field(16, ge=1, le=256, description="landmarks of approximate shortest paths (/v1/paths): the top vertices by TunkRank")
    landmark_drift: float = Field(0.25, ge=0, le=1, description="the landmarks are re-chosen once more than this share of them has left the TunkRank top set")
    topics_budget: float = Field(0.2, gt=0, le=1, description="K-exposure recounts run on a thread beside the epochs, at most this share of the time (1: within every epoch); /v1/topics says which epoch the curves were counted at")
    path_bfs_budget: int = Field(2000, ge=0, le=1_000_000, description="vertices the bidirectional BFS of /v1/paths may expand to confirm an estimate (0: never)")
    memory_limit: int | None = Field(
        None, ge=0,
        description="memory budget of the whole service, e.g. 16GB; near it ingest stops reading until memory falls "
        "(0: no budget; default: 70% of the node's memory, under Ray's own monitor)",
    )
    compute_queue_limit: int = Field(
        256 * 1024 * 1024, ge=0,
        description="deltas of the sealed epochs not merged yet (waiting for the compute stage or in its hands), e.g. 256MiB; at it "
        "ingest stops reading until the compute stage is done with its batch (backpressure: the lag grows, nothing is lost), so a "
        "slow merge never makes Ray's object store spill (default: half the embedded object store; 0: no bound but 64 epochs)",
    )
    max_result_lag: float | None = Field(
        None, gt=0,
        description="how far the newest ranked epoch may fall behind the newest sealed one, in seal time, e.g. 5s; past it "
        "ingest stops reading until ranking catches up (backpressure: the lag grows, nothing is lost), so results are never "
        "older than this plus one batch's ranking (default: off: ranking keeps up with the stream by merging larger batches)",
    )
    compute_partitions: int = Field(
        1,
        description="ranking partitions: with more than 1, PageRank and TunkRank are solved over this many Ray actors, spread "
        "over the cluster's nodes, each holding the ranked rows and vectors of the vertices it owns; the applications then run "
        "in an actor of their own, and the API's graph view is split over this many more actors "
        f"(1 to {MAX_COMPUTE_PARTITIONS}; "
        "default 1: on one machine the partitions' exchange costs more than it spreads, see docs/scaling.md; on a cluster "
        "use the number of nodes)",
    )
    retain_epochs: int = Field(120, ge=1, le=100_000, description="epochs whose results the API keeps")
    archive_results: bool = Field(True, description="keep the retained epochs' results under DATA_DIR/results too, so a restart serves the history from before it")
    ray_address: str | None = Field(None, description="join an existing Ray cluster (auto or HOST:PORT) instead of starting a local one")
    num_cpus: int | None = Field(None, ge=1, description="CPUs the embedded Ray instance advertises (default: at least 4)")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="how much every process of the service logs: DEBUG, INFO, WARNING or ERROR")

    @field_validator("compute_partitions")
    @classmethod
    def _compute_partitions(cls, v: int) -> int:
        if not 1 <= v <= MAX_COMPUTE_PARTITIONS:
            raise ValueError(
                f"{v} ranking partitions: give 1 (one compute actor ranks the whole graph) to {MAX_COMPUTE_PARTITIONS} "
                f"(each partition is called in every round of a solve, so more would cost the compute actor more in calls "
                f"than they spread); on a cluster, the number of its nodes"
            )
        return v

    @field_validator("epoch_interval", "id_reuse_after", "header_timeout", "keep_alive_timeout", "send_timeout", "max_result_lag",
                     mode="before")
    @classmethod
    def _duration(cls, v):
        return None if v is None else parse_duration(v)  # None: only where the field allows it (a bound that is off)

    @field_validator("window", mode="before")
    @classmethod
    def _window(cls, v):
        return None if v is None or str(v).strip().lower() in ("", "off", "none") else parse_duration(v)

    @field_validator("max_header_bytes", "compute_queue_limit", mode="before")
    @classmethod
    def _bytes(cls, v):
        from pulsegraph.memory import parse_size

        return parse_size(v) if isinstance(v, str) else v

    @field_validator("memory_limit", mode="before")
    @classmethod
    def _size(cls, v):
        from pulsegraph.memory import parse_size

        return None if v is None or v == "" else parse_size(v)

    @property
    def memory_budget(self) -> int | None:
        """The memory budget in bytes (None: none)."""
        from pulsegraph.memory import DEFAULT_SHARE, node_memory

        if self.memory_limit is None:
            return int(DEFAULT_SHARE * node_memory())
        return self.memory_limit or None

    @field_validator("rank_types", mode="before")
    @classmethod
    def _types(cls, v):
        if isinstance(v, str):
            v = tuple(t.strip() for t in v.split(",") if t.strip())
        return v or None

    @model_validator(mode="after")
    def _consistent(self):
        if self.source == "file" and self.path is None:
            raise ValueError("--source file needs --path FILE")
        if self.source == "kafka" and not (self.bootstrap and self.topic):
            raise ValueError("--source kafka needs --bootstrap HOST:PORT and --topic TOPIC")
        if self.results_topic is not None and not self.results_brokers:
            raise ValueError(
                "--results-topic needs a Kafka cluster: give --results-bootstrap HOST:PORT "
                "(or use --source kafka, whose --bootstrap it then shares)"
            )
        if self.results_bootstrap is not None and self.results_topic is None:
            raise ValueError("--results-bootstrap is the cluster of --results-topic: give --results-topic TOPIC too")
        if self.results_kafka_config is not None and self.results_topic is None:
            raise ValueError("--results-kafka-config is for the cluster of --results-topic: give --results-topic TOPIC too")
        try:  # read and checked now, not at the first connection (the messages show no value of the file)
            self.kafka_properties()
            self.results_kafka_properties()
            self.registry()
        except KafkaConfigError as exc:
            raise ValueError(str(exc)) from None
        if self.format != "json" and not self.schema_registry:
            raise ValueError(f"--format {self.format} needs --schema-registry URL")
        if self.transform is not None:
            try:
                get_transform(self.transform)
            except IngestError as exc:
                raise ValueError(str(exc)) from None
        return self

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, v):
        if isinstance(v, str):
            v = tuple(o.strip() for o in v.split(",") if o.strip())
        return v or ()

    @model_validator(mode="after")
    def _secrets(self):
        if self.api_token is not None and self.api_token_file is not None:
            raise ValueError("give --api-token or --api-token-file, not both")
        token = self.bearer_token()  # reads and checks the file now, not at the first request
        if token is not None:
            check_secret(token)
        if self.protect_reads and token is None:
            raise ValueError("--protect-reads needs --api-token or --api-token-file")
        return self

    def bearer_token(self) -> str | None:
        """The API token, from --api-token or the first line of --api-token-file."""
        if self.api_token is not None:
            return self.api_token.get_secret_value()
        if self.api_token_file is None:
            return None
        try:
            lines = self.api_token_file.read_text().splitlines()
        except OSError as exc:
            raise ValueError(f"cannot read --api-token-file: {exc}") from None
        return lines[0].strip() if lines else ""

    def kafka_properties(self) -> KafkaConfig | None:
        """The --kafka-config file's properties (None: a plaintext cluster), read now."""
        return load_kafka_config(self.kafka_config) if self.kafka_config is not None else None

    def results_kafka_properties(self) -> KafkaConfig | None:
        """The properties of the results topic's cluster: --results-kafka-config, else --kafka-config."""
        if self.results_kafka_config is not None:
            return load_kafka_config(self.results_kafka_config)
        return self.kafka_properties()

    def registry(self) -> RegistrySpec | None:
        """The schema registry of --format avro|jsonschema|protobuf (its properties read now), or None for JSON records."""
        if self.format == "json" or not self.schema_registry:
            return None
        config = None
        if self.schema_registry_config is not None:
            try:
                config = parse_properties(self.schema_registry_config.read_text(), str(self.schema_registry_config))
            except OSError as exc:
                raise KafkaConfigError(f"cannot read --schema-registry-config {self.schema_registry_config}: {exc.strerror}") from None
        registry_client_conf(self.schema_registry, config)  # a property the client cannot take fails here, not in an actor
        return RegistrySpec(self.format, self.schema_registry, config)

    @property
    def results_brokers(self) -> str | None:
        """Where --results-topic lives: its own --results-bootstrap, else the Kafka source's cluster."""
        if self.results_bootstrap:
            return self.results_bootstrap
        return self.bootstrap if self.source == "kafka" else None

    @property
    def results_transactional_id(self) -> str:
        """The results producer's transactional.id: from the consumer group (and the topic), so a restarted
        service with the same --group fences its predecessor's producer, and two services publishing to
        different topics never fence each other."""
        return f"pulsegraph-results.{self.group}.{self.results_topic}"

    @property
    def transform_name(self) -> str:
        return self.transform or ("tweets" if self.source == "synthetic" else "edges")

    @property
    def source_rate(self) -> float | None:
        if self.rate is None:
            return DEFAULT_SYNTHETIC_RATE if self.source == "synthetic" else None
        return self.rate or None

    @property
    def ranked_types(self) -> tuple[str, ...] | None:
        return self.rank_types or get_transform(self.transform_name).rank_types
