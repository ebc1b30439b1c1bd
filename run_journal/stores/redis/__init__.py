"""The Redis store: ``store`` is the store, ``scripts`` the Lua that makes every write one atomic
step (and documents the key layout), ``records`` how records are encoded and pages read."""

from run_journal.stores.redis.store import DEFAULT_PREFIX, RedisRetention, RedisRunEventStore

__all__ = ["DEFAULT_PREFIX", "RedisRetention", "RedisRunEventStore"]
