"""Alerts: standing rules over the ranked epochs, and the alerts they raise.

Owns the rule set, kept durably in ``<data_dir>/alert-rules.json`` (written whole under a temporary
name, fsynced, renamed, its folder fsynced: a rule acknowledged to a client survives a crash or a
power cut), and the alerts the rules raise on each ranked epoch (the rule kinds and their evaluation are
:mod:`pulsegraph.api.alert_rules`). It reads the epochs from the
:class:`~pulsegraph.api.store.ResultStore` and calls no actor; it must not touch the result archive, the
checkpoints or the epoch log.

**The promise.** The alerts of a ranked epoch ``e`` are a pure function of ``e``, of the ranked epoch
before it (``EpochView.previous``: the store knows which epochs were ranked, and skips the ones merged
into a later one) and of the rules whose ``since_epoch <= e``. Nothing else enters: not the clock, not
the order or the batches in which epochs arrived, not what was evaluated before. So an epoch never
raises an alert twice, and a restart that takes the retained epochs back from the result archive
(``--archive-results``) evaluates them again into the same alerts. An epoch has alerts only while the
ranked epoch before it is retained too (the oldest retained epoch has none): the retained alerts are
then the same whether or not the service restarted in between.

A rule made while the service runs applies from the epoch *after* the newest one that exists (recorded
in the rule as ``since_epoch``): the newest epoch's alerts may already be on the results topic or on a
stream, and an epoch's alerts never change once given out. A deleted rule takes its alerts with it
(they are a function of the rule set); what was streamed or published stays where it went.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from pulsegraph.api.alert_rules import MAX_PER_EPOCH, EpochAlerts, Rule, evaluate
from pulsegraph.api.exceptions import AlertRulesError, Conflict, NotFound, Unavailable
from pulsegraph.api.models import (
    RuleSpec,
)
from pulsegraph.api.store import EpochView, ResultStore, kept_json
from pulsegraph.base.durable import fsync_dir, open_durably

log = logging.getLogger(__name__)

RULES_FILE = "alert-rules.json"
FORMAT = 1
# Every rule is evaluated on every ranked epoch, on the feed thread, over at most the 2,000 vertices of
# either epoch's top 1,000 (shared by the rules of an epoch) or the epoch's topics: 1,000 rules of mixed
# kinds took 0.13 s on 200,000 vertices and 20,000 topics whose every rank and value changed (the worst
# case; two shared cores), well within an epoch interval. The file is rewritten whole at each change.
MAX_RULES = 1000
# Alerts per page of GET /v1/alerts: one whole epoch always fits.
MAX_PAGE = MAX_PER_EPOCH

_SPEC: TypeAdapter = TypeAdapter(RuleSpec)


@dataclass(frozen=True)
class _Kept:
    """An epoch's alerts as the book retains them: each encoded once, beside its rule's id. Measured: ~310
    bytes an alert so, ~470 as a dict; at 1,000 alerts an epoch and 120 retained epochs, 37 MB, not 56. The
    stream and the results topic send these bytes as they are."""

    epoch: int
    previous_epoch: int | None
    items: tuple[tuple[int, bytes], ...]
    dropped: int
    # The epoch's vector: an epoch taken back at a start and then dropped as another history may come again
    # under its number with other contents (a snapshot is a function of its vector, not of its number).
    vector: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, got: EpochAlerts, vector: tuple[tuple[str, int], ...] = ()) -> "_Kept":
        return cls(got.epoch, got.previous_epoch, tuple((a["rule"], kept_json(a)) for a in got.alerts), got.dropped, vector)


class AlertBook:
    """The rules and the retained epochs' alerts. ``path``: the rules file (None: rules in memory only, for
    an app without a data folder). ``floor``: the newest epoch this data folder's service had before this
    start (the result archive's newest), so that a rule made before the history is taken back does not
    apply to epochs already given out."""

    def __init__(self, store: ResultStore, path: Path | None = None, floor: int = 0) -> None:
        self.store = store
        self.path = Path(path) if path is not None else None
        self.floor = floor
        self._rules: dict[int, Rule] = {}
        self._next_id = 1
        self._cache: dict[int, _Kept] = {}
        self._evaluated_through = 0  # the newest epoch whose alerts were given out (or could have been)
        self._lock = threading.RLock()
        if self.path is not None:
            self._load()

    # -- rules -------------------------------------------------------------------------------------------
    def _load(self) -> None:
        assert self.path is not None
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise AlertRulesError(f"cannot read the alert rules {self.path}: {exc}. Operator action: check the disk and its permissions.") from exc
        try:
            doc = orjson.loads(raw)
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}, not {FORMAT}")
            rules = [Rule(int(r["id"]), int(r["since_epoch"]), str(r["created_at"]), _SPEC.validate_python(r["rule"])) for r in doc["rules"]]
            next_id = int(doc["next_id"])
        except (orjson.JSONDecodeError, ValidationError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AlertRulesError(
                f"{self.path} is not a rules file of this version ({type(exc).__name__}: {str(exc).splitlines()[0]}). "
                f"Operator action: restore it from a backup, or move it aside to start with no alert rules."
            ) from exc
        self._rules = {r.id: r for r in sorted(rules, key=lambda r: r.id)}
        self._next_id = max([next_id, *(r.id + 1 for r in rules)])

    def _save(self, rules: dict[int, Rule], next_id: int) -> None:
        """The whole rule set under a temporary name, fsynced, then renamed over the file and the folder fsynced."""
        if self.path is None:
            return
        body = orjson.dumps({"format": FORMAT, "next_id": next_id, "rules": [r.body() for r in rules.values()]}, option=orjson.OPT_INDENT_2)
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            fd = open_durably(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                view = memoryview(body)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            fsync_dir(self.path.parent)
        except OSError as exc:
            log.error("alert rules not saved to %s: %s", self.path, exc)
            raise Unavailable(f"the alert rules could not be saved ({exc}); nothing changed", code="rules_not_saved") from None

    def rules(self) -> list[dict]:
        with self._lock:
            return [r.body() for r in self._rules.values()]

    def rule(self, rule_id: int) -> dict:
        with self._lock:
            r = self._rules.get(rule_id)
        if r is None:
            raise NotFound(f"no alert rule {rule_id}", code="rule_not_found")
        return r.body()

    def add(self, spec: Any) -> dict:
        """Keep a new rule (a validated pulsegraph.api.models rule), durably, before it can apply to any epoch."""
        with self._lock:
            if len(self._rules) >= MAX_RULES:
                raise Conflict(
                    f"at most {MAX_RULES} alert rules are kept and there are {len(self._rules)}; delete one first "
                    f"(DELETE /v1/alerts/rules/{{id}})", code="too_many_rules",
                )
            # After every epoch that exists or was given out: those keep the alerts they had.
            since = max(self.store.latest_epoch, self._evaluated_through, self.floor) + 1
            created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
            rule = Rule(self._next_id, since, created, spec)
            rules = {**self._rules, rule.id: rule}
            self._save(rules, rule.id + 1)  # raises, and nothing changes, when the disk refuses
            self._rules, self._next_id = rules, rule.id + 1
        log.info("alert rule %d added (%s), evaluated from epoch %d", rule.id, spec.kind, since)
        return rule.body()

    def delete(self, rule_id: int) -> None:
        with self._lock:
            if rule_id not in self._rules:
                raise NotFound(f"no alert rule {rule_id}", code="rule_not_found")
            rules = {i: r for i, r in self._rules.items() if i != rule_id}
            self._save(rules, self._next_id)
            self._rules = rules
        log.info("alert rule %d deleted", rule_id)

    # -- alerts ------------------------------------------------------------------------------------------
    def _of(self, view: EpochView) -> _Kept:
        """The epoch's alerts for the rules it was evaluated with, evaluated once (under the lock)."""
        e = view.result.epoch
        prev = view.previous.result.epoch if view.previous is not None else None
        got = self._cache.get(e)
        vector = tuple(sorted(view.result.vector.items()))
        if got is None or got.previous_epoch != prev or got.vector != vector:
            # The first time, or its previous epoch left the retention (then it has none, as after a restart).
            got = self._cache[e] = _Kept.of(evaluate(view, list(self._rules.values()), self.store), vector)
        self._evaluated_through = max(self._evaluated_through, e)
        return got

    def _views(self, after: int = 0) -> list[EpochView]:
        out = []
        for e in self.store.epoch_numbers(after=after):
            try:
                out.append(self.store.get(e))
            except NotFound:
                continue  # left the retention meanwhile
        return out

    def catch_up(self) -> None:
        """Evaluate every retained epoch not evaluated yet (the new one; at a start, the history taken back)
        and forget the epochs no longer retained. Called on the feed thread for each new epoch."""
        views = self._views()
        with self._lock:
            for v in views:
                self._of(v)
            keep = {v.result.epoch for v in views}
            for e in [e for e in self._cache if e not in keep]:
                del self._cache[e]

    def _active(self, got: _Kept, rule: int | None = None) -> list[bytes]:
        return [a for r, a in got.items if r in self._rules and (rule is None or r == rule)]

    def _kept(self, epoch: int) -> tuple[_Kept, list[bytes]] | None:
        try:
            view = self.store.get(epoch)
        except NotFound:
            return None
        with self._lock:
            got = self._of(view)
            return got, self._active(got)

    def epoch_alerts(self, epoch: int) -> EpochAlerts | None:
        """The alerts of a retained ranked epoch (those of deleted rules left out); None when not retained."""
        found = self._kept(epoch)
        if found is None:
            return None
        got, alerts = found
        return EpochAlerts(got.epoch, got.previous_epoch, tuple(orjson.loads(a) for a in alerts), got.dropped)

    def record_json(self, epoch: int) -> bytes | None:
        """The epoch's alerts as one JSON object (docs/alerts.schema.json): the alert stream's event and the
        results topic's ``T.alerts`` record; None when the epoch is not retained."""
        found = self._kept(epoch)
        if found is None:
            return None
        got, alerts = found
        prev = b"null" if got.previous_epoch is None else b"%d" % got.previous_epoch
        return b'{"epoch":%d,"previous_epoch":%s,"alerts":[%s],"dropped":%d}' % (got.epoch, prev, b",".join(alerts), got.dropped)

    def record(self, epoch: int) -> dict | None:
        """:meth:`record_json`, decoded."""
        got = self.record_json(epoch)
        return orjson.loads(got) if got is not None else None

    def page(self, since: int | None, limit: int, rule: int | None = None) -> dict:
        """GET /v1/alerts: whole epochs, oldest first. With ``since``: the first epochs after it that fit in
        ``limit`` alerts; without: the newest that fit. At least one epoch with alerts always fits."""
        views = self._views()
        with self._lock:
            epochs = [(v.result.epoch, self._of(v)) for v in views]
            got = [(e, self._active(a, rule), a.dropped) for e, a in epochs]
        if since is not None:
            got = [g for g in got if g[0] > since]
        else:
            got.reverse()
        items: list[list[bytes]] = []
        total = dropped = 0
        through = since if since is not None else None
        more = False
        for e, alerts, d in got:
            if alerts and total and total + len(alerts) > limit:
                more = since is not None
                break
            items.append(alerts)
            total += len(alerts)
            dropped += d
            through = e if since is not None else max(through or 0, e)
        if since is None:
            items.reverse()
        return {"items": [orjson.loads(a) for chunk in items for a in chunk], "through": through, "more": more, "dropped": dropped}

    def frames_after(self, cursor: int) -> tuple[list[tuple[int, bytes]], int]:
        """The alert records of the retained epochs after ``cursor`` that hold alerts, and the new cursor."""
        out = []
        for v in self._views(after=cursor):
            found = self._kept(v.result.epoch)
            cursor = max(cursor, v.result.epoch)
            if found is not None and found[1]:
                out.append((v.result.epoch, self.record_json(v.result.epoch) or b""))
        return out, cursor

    def stats(self) -> dict:
        with self._lock:
            return {"rules": len(self._rules), "max_rules": MAX_RULES, "evaluated_through": self._evaluated_through}
