"""A POSTed batch of events: bounded before it is parsed, then each event checked on its own.

Owns the write path's reading of a body (``POST /v1/events``): the body's JSON values are counted
before anything is allocated for them (a 5 MB body of 1.7 M empty objects would cost ~130 MB once
parsed), the batch is parsed once, and every event is re-encoded compactly (the record the sinks
store) and checked by the pipeline's transform. A bad event is refused by its index with the reason;
the others go on. It knows nothing of HTTP beyond the API's errors, and nothing of the sinks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from pulsegraph.api.exceptions import ApiError, PayloadTooLarge, Unprocessable

# One request is at most this many events and bytes: a client cannot make the service hold more for it.
MAX_EVENTS = 10_000
MAX_BODY_BYTES = 5 * 1024 * 1024
# JSON values one body may hold (containers, members, elements). A batch of 10,000 tweets with five
# mentions and three hashtags each holds ~140,000; this bound keeps a parsed body under ~30 MB
# (at most ~70 bytes a value), whatever its shape.
MAX_JSON_VALUES = 400_000
# orjson re-encodes at most this many nested levels (it parses up to 1024): a deeper event is refused
# by its index; a body nested deeper than 1024 is not JSON to the parser, and is refused whole.
MAX_EVENT_DEPTH = 254

_SEPARATORS = np.zeros(256, dtype=bool)
_SEPARATORS[[ord("["), ord("{"), ord(",")]] = True


def count_values(body: bytes) -> int:
    """The JSON values of ``body``, give or take one: each is opened by a bracket or follows a comma.

    Counted with C loops only. The quick count includes brackets and commas inside strings; when it
    is over the bound, the exact count looks only outside strings: escaped backslashes and quotes are
    masked first (same length), then a quote's running parity tells what lies inside a string.
    """
    rough = body.count(b",") + body.count(b"[") + body.count(b"{")
    if rough <= MAX_JSON_VALUES:
        return rough
    masked = body.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    chars = np.frombuffer(masked, dtype=np.uint8)
    in_string = np.bitwise_xor.accumulate(chars == ord('"'))
    return int(np.count_nonzero(_SEPARATORS[chars] & ~in_string))


def parse_batch(body: bytes) -> list:
    """The events of ``body``, a JSON array; raises the API error that says what is wrong with it."""
    if count_values(body) > MAX_JSON_VALUES:
        raise PayloadTooLarge(f"the body holds more than {MAX_JSON_VALUES} JSON values", code="too_many_values")
    try:
        events = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(f"the body is not JSON: {exc}", code="invalid_json") from None
    if not isinstance(events, list):
        raise ApiError("the body must be a JSON array of events", code="invalid_request")
    if len(events) > MAX_EVENTS:
        # The schema's maxItems: a request that breaks the schema is a 422, as every other one.
        raise Unprocessable(f"{len(events)} events in one request; at most {MAX_EVENTS}", code="too_many_events")
    return events


def encode(event: Any) -> tuple[bytes | None, str | None]:
    """The event as the compact JSON record the sinks store, or why it cannot be one."""
    if not isinstance(event, dict):
        return None, "an event must be a JSON object"
    try:
        return orjson.dumps(event), None
    except orjson.JSONEncodeError as exc:
        if "recursion" in str(exc).lower():
            return None, f"the event is nested more than {MAX_EVENT_DEPTH} levels deep"
        return None, f"the event cannot be stored as JSON: {exc}"


def check_batch(events: list, transform: Callable[[bytes], Any] | None) -> tuple[list[bytes], list[tuple[int, str]]]:
    """The records of the good events, and ``(index, reason)`` of each bad one."""
    good: list[bytes] = []
    bad: list[tuple[int, str]] = []
    for i, event in enumerate(events):
        raw, reason = encode(event)
        if raw is not None and transform is not None:
            try:
                transform(raw)
            except Exception as exc:  # noqa: BLE001 - BadRecord, or any fault of a user's transform: the event is refused
                reason = str(exc) or type(exc).__name__
        if reason is None and raw is not None:
            good.append(raw)
        else:
            bad.append((i, reason or "refused"))
    return good, bad
