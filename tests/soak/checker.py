"""The soak's judge: what each call was told (the workers' logs) against what the database
holds at the end.

Violations it reports:

* **lost**: an acknowledged message is not stored, and no purge or prune of its app that
  could have deleted it ran (a pruned app must still hold a suffix of what was acknowledged);
  or it is stored under other ids than the ones acknowledged;
* **stored twice**: a text (every message's text is unique to the run) is stored more than
  once, also after retries of writes whose outcome was unknown;
* **failed but stored**: an append that only ever got a plain ``StorageError`` ("nothing was
  committed") is stored;
* **stale window**: a window read that started more than the bound after an acknowledged
  message of the app was acknowledged does not hold it although it holds an older message
  (windows are a contiguous suffix of the history), or is empty (the bound is 0 for
  ``load_window``, which reads SQL, and the staleness bound for cached windows);
* **purged data served**: a read that started after a purge returned serves a message whose
  append ended before the purge started (or the database still holds it);
* **duplicate in window**: a window holds one message twice.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Item:
    """One message a worker tried to write."""

    key: str
    app: str
    t0: float
    t1: float
    outcome: str  # ok / unknown / failed
    acked_id: int | None
    source: str  # append / turn


@dataclass
class Findings:
    violations: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


def _items(records: list[dict[str, Any]]) -> list[Item]:
    items = []
    for rec in records:
        if rec["op"] == "append":
            ids = rec["ids"] or [None] * len(rec["keys"])
            for key, acked in zip(rec["keys"], ids, strict=True):
                items.append(
                    Item(key, rec["app"], rec["t0"], rec["t1"], rec["outcome"], acked, "append")
                )
        elif rec["op"] == "turn":
            for key in rec["keys"]:
                items.append(
                    Item(key, rec["app"], rec["t0"], rec["t1"], rec["outcome"], None, "turn")
                )
    return items


def check(
    records: list[dict[str, Any]],
    stored: dict[str, list[tuple[int, str | None]]],
    cached_bound: float,
    sql_bound: float = 0.0,
) -> Findings:
    """``stored``: per soak app, its original-history rows at the end as ``(id, key)``."""
    found = Findings()
    violations = found.violations
    items = _items(records)
    by_key = {item.key: item for item in items}
    rows: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for app, app_rows in stored.items():
        for row_id, key in app_rows:
            if key is not None:
                rows[key].append((app, row_id))
    deleters: dict[str, list[dict[str, Any]]] = defaultdict(list)  # prunes and purges
    purges: dict[str, list[dict[str, Any]]] = defaultdict(list)  # purges that returned
    for rec in records:
        if rec["op"] in ("prune", "purge"):
            deleters[rec["app"]].append(rec)
            if rec["op"] == "purge" and "error" not in rec:
                purges[rec["app"]].append(rec)
    min_stored = {app: min(i for i, _ in app_rows) for app, app_rows in stored.items() if app_rows}

    def may_have_deleted(item: Item, before: float) -> bool:
        """Whether a prune or purge that started before ``before`` may have deleted it."""
        return any(op["t0"] < before and op["t1"] > item.t0 for op in deleters[item.app])

    # -- stored twice, lost, failed but stored ------------------------------------------------
    for key, where in rows.items():
        if len(where) > 1:
            violations.append(f"stored twice: {key} at {where}")
        item = by_key.get(key)
        if item is not None and any(app != item.app for app, _ in where):
            violations.append(f"stored in another app: {key} at {where}")
    for item in items:
        where = rows.get(item.key, [])
        if item.outcome == "failed" and item.source == "append" and where:
            violations.append(f"failed but stored: {item.key} ({item.app})")
        if item.outcome != "ok":
            continue
        if where:
            if item.acked_id is not None and where[0][1] != item.acked_id:
                violations.append(f"stored under other ids: {item.key} {where} != {item.acked_id}")
            continue
        if not may_have_deleted(item, float("inf")):
            violations.append(f"lost: {item.key} ({item.app}) acknowledged at {item.t1:.3f}")
        elif (
            item.acked_id is not None
            and item.app in min_stored
            and item.acked_id > min_stored[item.app]
            and not any(op["op"] == "purge" for op in deleters[item.app])
        ):
            violations.append(f"lost (not a pruned prefix): {item.key} ({item.app})")

    # -- windows --------------------------------------------------------------------------------
    def id_of(key: str) -> int | None:
        where = rows.get(key)
        if where:
            return where[0][1]
        item = by_key.get(key)
        return item.acked_id if item is not None else None

    acked_by_app: dict[str, list[Item]] = defaultdict(list)
    for item in items:
        if item.outcome == "ok":
            acked_by_app[item.app].append(item)
    reads = checked = 0
    for rec in records:
        if rec["op"] != "read" or "error" in rec:
            continue
        reads += 1
        app, start = rec["app"], rec["t0"]
        keys = [k for k in rec["keys"] if k is not None]
        read_by = f"{rec['kind']} read by worker {rec['w']} of {app} at {start:.3f}"
        for key, count in Counter(keys).items():
            if count > 1:
                violations.append(f"duplicate in window: {key} in {read_by}")
        for purge in purges[app]:
            if purge["t1"] < start:
                for key in keys:
                    item = by_key.get(key)
                    if item is not None and item.app == app and item.t1 < purge["t0"]:
                        violations.append(f"purged data served: {key} in {read_by}")
        bound = cached_bound if rec["kind"] == "cached" else sql_bound
        ids = [i for i in (id_of(k) for k in keys) if i is not None]
        low = min(ids) if ids else None
        present = set(keys)
        for item in acked_by_app[app]:
            if item.t1 >= start - bound or item.key in present:
                continue
            item_id = id_of(item.key)
            if item_id is None:
                continue
            if item.key not in rows and may_have_deleted(item, rec["t1"]):
                continue
            checked += 1
            if low is None or item_id > low:
                late = start - item.t1
                violations.append(
                    f"stale window: {read_by} misses {item.key} acknowledged {late:.2f} s earlier"
                )
    for app, app_purges in purges.items():
        for purge in app_purges:
            for item in items:
                if item.app == app and item.t1 < purge["t0"] and item.key in rows:
                    violations.append(f"purged data still stored: {item.key} ({app})")

    outcomes = Counter(item.outcome for item in items)
    errors: Counter[str] = Counter()
    for rec in records:
        for name in rec.get("errors", []):
            errors[name] += 1
        if "error" in rec:
            errors[rec["error"]] += 1
    found.stats = {
        "ops": dict(Counter(rec["op"] for rec in records)),
        "messages": dict(outcomes),
        "stored_rows": sum(len(r) for r in stored.values()),
        "reads_checked": reads,
        "acked_messages_checked_in_windows": checked,
        "errors": dict(errors),
        "retried_appends": sum(
            1 for rec in records if rec["op"] == "append" and len(rec["errors"]) > 0
        ),
    }
    return found
