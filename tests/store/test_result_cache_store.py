"""The result cache's table, on both run-store backends: served until its TTL, then not."""

from __future__ import annotations

from pathlib import Path

from runner.store.runstore import RunStore


def test_an_entry_is_served_until_it_expires(store_target: str | Path) -> None:
    store = RunStore(store_target)
    try:
        cache = store.result_cache
        cache.put("model:abc", "model", {"content": "hi", "n": [1, 2]}, 60, now=1000.0)
        assert cache.get("model:abc", now=1059.0) == {"content": "hi", "n": [1, 2]}
        assert cache.get("model:abc", now=1060.0) is None  # the TTL is an open interval
        assert cache.get("model:other", now=1000.0) is None
        cache.put("model:abc", "model", {"content": "new"}, 10, now=2000.0)  # replaced, with a new TTL
        assert cache.get("model:abc", now=2005.0) == {"content": "new"}
        assert cache.purge_expired(now=2010.0) == 1
        assert cache.get("model:abc", now=2000.0) is None
    finally:
        store.close()


def test_the_table_is_shared_by_every_store_on_the_database(store_target: str | Path) -> None:
    first, second = RunStore(store_target), RunStore(store_target)
    try:
        first.result_cache.put("tool:x", "tool", {"content": "4"}, 60)
        assert second.result_cache.get("tool:x") == {"content": "4"}
    finally:
        first.close()
        second.close()
