"""The service's memory budget: how much it uses, and when ingest must stop reading.

Owns the measurement and the decision, nothing else: the wiring
(:mod:`pulsegraph.topology`) asks :class:`MemoryGuard` once per status poll and
tells the ingest actors to pause or resume. What counts is what the kernel
cannot take back: the anonymous resident memory of every process of the service
(the driver with the API, and, in the embedded Ray instance, every Ray process
below it) plus the object store's shared memory. File pages (the memory-mapped
result archive, the page cache) are the kernel's to drop and do not count.
Joined to a Ray cluster, the actors run on other machines; there the node's
used memory (MemTotal - MemAvailable) is the measure.

Throttling starts at :data:`HIGH_WATER` of the budget and ends below
:data:`LOW_WATER`, so it does not flap at the line. Ray's own memory monitor
kills workers at 95% of the node's memory (``RAY_memory_usage_threshold``); the
default budget, :data:`DEFAULT_SHARE` of the node, stays well under it.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

# The default budget as a share of the node's memory: under Ray's monitor (95%) with room for the
# rest of the machine and for an epoch's transient arrays above the line.
DEFAULT_SHARE = 0.7
# Pause reading at this share of the budget; resume below the lower one.
HIGH_WATER = 0.9
LOW_WATER = 0.8
# Throttled this long without getting back under the low-water mark: the live graph itself needs more.
OUTGROWN_AFTER_S = 60.0

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)


def parse_size(value) -> int:
    """Bytes from 123, "500MB", "16G", "1.5GiB"."""
    if isinstance(value, (int, float)):
        return int(value)
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a size such as 16GB, 512MB or 2GiB")
    unit = (m.group(2) or "").lower()
    base = 1024 if "i" in unit else 1000
    power = "bkmgt".index(unit[0]) if unit else 0
    return int(float(m.group(1)) * base**power)


def node_memory() -> int:
    """The memory this machine (or its cgroup, when smaller) gives the service."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return total


def node_used() -> int:
    """MemTotal - MemAvailable of this node."""
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        info[key] = int(rest.split()[0]) * 1024
    return info["MemTotal"] - info.get("MemAvailable", info.get("MemFree", 0))


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it, from /proc."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
                kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(d))
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def anonymous_rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def service_memory(root: int | None = None, object_store: int = 0) -> int:
    """Anonymous resident memory of ``root`` (default: this process) and every process below it,
    plus the object store's shared memory."""
    return sum(anonymous_rss(p) for p in process_tree(root or os.getpid())) + object_store


@dataclass
class MemoryGuard:
    """Decides, from each measurement, whether ingest should read."""

    limit: int
    throttled: bool = False
    since: float = 0.0  # when the current throttle started
    throttled_s: float = 0.0  # total time throttled, finished throttles
    used: int = 0
    warned: bool = False
    _clock: object = field(default=time.monotonic, repr=False)

    def update(self, used: int) -> bool:
        """Take a measurement; True when the throttle state changed."""
        self.used = used
        now = self._clock()  # type: ignore[operator]
        if not self.throttled and used >= HIGH_WATER * self.limit:
            self.throttled, self.since = True, now
            return True
        if self.throttled and used < LOW_WATER * self.limit:
            self.throttled = False
            self.throttled_s += now - self.since
            self.warned = False
            return True
        return False

    def total_throttled_s(self) -> float:
        return self.throttled_s + ((self._clock() - self.since) if self.throttled else 0.0)  # type: ignore[operator]

    def outgrown(self) -> bool:
        """Throttled for so long that the live graph itself must be what fills the budget."""
        return self.throttled and self._clock() - self.since >= OUTGROWN_AFTER_S  # type: ignore[operator]

    def reason(self) -> str | None:
        if not self.throttled:
            return None
        gb = 1e9
        why = (f"memory {self.used / gb:.1f} GB is over {HIGH_WATER:.0%} of the {self.limit / gb:.1f} GB budget "
               f"(--memory-limit); ingest waits until it is under {LOW_WATER:.0%}")
        if self.outgrown():
            why += (". The live graph alone fills the budget: raise --memory-limit, or keep a sliding "
                    "--window of the stream")
        return why
