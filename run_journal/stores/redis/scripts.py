"""The Lua scripts behind ``RedisRunEventStore``: every write is one script, so it is atomic.

Redis runs a script to completion without interleaving other commands, and a script that fails
half-way keeps what it already wrote. So each write script first *decides* everything (reads only:
dedupe, seq assignment, singleton checks) and only then writes, with commands that cannot fail on
well-formed keys. Keys are built in the scripts from the prefix and ids (ids never contain ``/``, which
is the separator), so the scripts need a single Redis node, not a cluster.

Key layout (``P`` is the store prefix, ``B`` = ``P t/<thread>/``):
``B seq`` counter, ``B ev`` hash seq -> record, ``B ids`` hash event_id -> seq, sorted sets of seqs
(score = seq): ``B all``, ``B msg``, ``B r/<run>/all``, ``B r/<run>/msg``, ``B ty/<type>``,
``B r/<run>/ty/<type>``, ``B task/<sha1(task_id)>``, ``B u/<user>/all``, ``B u/<user>/msg``;
``B keys`` (set of the dynamic index keys, for deletes and TTL), ``B users``, ``B runs`` (run ids,
score = started_at or else first put_run, epoch microseconds), ``B bodies`` (hash digest -> body
data) and ``B bodyix`` (lexical set of its digests, for pages by digest; layout 4), ``B at`` and
``B u/<user>/at`` (the thread's member of ``P recent`` and of ``P u/<user>/recent``); global: ``P threads``,
``P u/<user>/threads`` (lexical sets), ``P recent`` and ``P u/<user>/recent`` (lexical sets of
``<stamp>/<thread>``: the created_at of the thread's, or the user's, newest event there, so a reverse
lexical range is the activity order), ``P run/<run>`` (run row hash), ``P runs`` (as ``B runs``),
``P st/<status>`` (the runs of one status, scored as ``P runs``), search sets scored as ``P runs``
(layout 5): ``P x/<tag>`` (the runs of a search tag: ``model:<name>``, ``tool:<name>``,
``caller:<name>``), ``P u/<user>/runs`` (a user's runs), ``P err`` (runs with an error), each run
hash's ``search`` field naming the sets it is in,
``P start/<run>`` (``<thread>\n<event_id>`` of the run's ``run.start``: the run id is taken while
that event is stored), ``P starts`` (lexical set of run ids that have a ``run.start`` and no row yet).
Channel ``B new`` carries the last seq after each append.
"""

from __future__ import annotations

from typing import Final

_FIXED_KEYS: Final = """
local function fixed_keys(B)
  return {B .. 'seq', B .. 'ev', B .. 'ids', B .. 'all', B .. 'msg', B .. 'keys', B .. 'users', B .. 'runs',
          B .. 'at', B .. 'bodies', B .. 'bodyix'}
end

-- Keep the n bodies whose (digest, data) pairs start at ARGV[first]: each one the thread does not hold.
local function keep_bodies(B, first, n, ttl)
  for i = first, first + 2 * n - 1, 2 do
    if redis.call('HSETNX', B .. 'bodies', ARGV[i], ARGV[i + 1]) == 1 then
      redis.call('ZADD', B .. 'bodyix', 0, ARGV[i])
    end
  end
  if ttl > 0 and n > 0 then
    redis.call('EXPIRE', B .. 'bodies', ttl)
    redis.call('EXPIRE', B .. 'bodyix', ttl)
  end
end

-- The activity order: lexical set S holds '<stamp>/<thread>' per thread, the thread's current member
-- kept at key A, so a new member replaces the old one (member nil: the thread leaves the set).
local function place(S, A, member)
  local old = redis.call('GET', A)
  if old == member then return end
  if old then redis.call('ZREM', S, old) end
  if member then
    redis.call('ZADD', S, 0, member)
    redis.call('SET', A, member)
  else
    redis.call('DEL', A)
  end
end

-- The stamp of a stored record's created_at, fixed width ('.000000' added when it has no fraction).
local function record_stamp(record)
  local at = cjson.decode(record).created_at
  if string.len(at) == 25 then at = string.sub(at, 1, 19) .. '.000000' .. string.sub(at, 20) end
  return at
end

-- Put the thread (index I: all its events, or a user's) where its newest event says, or take it out.
local function replace(S, A, I, B, T)
  local newest = redis.call('ZREVRANGE', I, 0, 0)[1]
  local record = newest and redis.call('HGET', B .. 'ev', newest)
  place(S, A, record and (record_stamp(record) .. '/' .. T) or nil)
end

-- The search sets a run row is in (P .. each key of its 'search' field, NUL-separated).
local function search_keys(text)
  local keys = {}
  if text then
    for key in string.gmatch(text, '[^%z]+') do keys[#keys + 1] = key end
  end
  return keys
end

-- Remove a run row and its every index entry (the thread's own set of runs aside).
local function drop_row(P, run, status, search)
  redis.call('UNLINK', P .. 'run/' .. run)
  redis.call('ZREM', P .. 'runs', run)
  redis.call('ZREM', P .. 'st/' .. status, run)
  for _, key in ipairs(search_keys(search)) do redis.call('ZREM', P .. key, run) end
end

local function unlink_all(keys)
  for i = 1, #keys, 500 do
    redis.call('UNLINK', unpack(keys, i, math.min(i + 499, #keys)))
  end
end

-- Remove every key of a thread (and its entries in the global sets); returns the number of events.
-- with_runs: also its run rows, and keep the seq counter (a delete never lets a seq be reused).
local function drop_thread(P, T, B, with_runs)
  local count = redis.call('ZCARD', B .. 'all')
  for _, user in ipairs(redis.call('SMEMBERS', B .. 'users')) do
    redis.call('ZREM', P .. 'u/' .. user .. '/threads', T)
    place(P .. 'u/' .. user .. '/recent', B .. 'u/' .. user .. '/at', nil)
  end
  place(P .. 'recent', B .. 'at', nil)
  if with_runs then
    for _, run in ipairs(redis.call('ZRANGE', B .. 'runs', 0, -1)) do
      local owner, status, search = unpack(redis.call('HMGET', P .. 'run/' .. run, 'thread_id', 'status',
                                                      'search'))
      if owner == T then drop_row(P, run, status, search) end
    end
  end
  local dynamic = redis.call('SMEMBERS', B .. 'keys')
  if #dynamic > 0 then unlink_all(dynamic) end
  local fixed = fixed_keys(B)
  if with_runs then table.remove(fixed, 1) end -- fixed[1] is the seq counter
  unlink_all(fixed)
  redis.call('ZREM', P .. 'threads', T)
  return count
end
"""

APPEND: Final = _FIXED_KEYS + """
-- ARGV: prefix, thread_id, mode ('append' | 'once'), ttl_seconds, n, then n event types (mode
-- 'once': the run may hold none of them), then nb and nb bodies of the thread (digest, data), then
-- 8 fields per event: event_id, run_id, event_type, is_message ('1'/'0'), task key ('' or sha1),
-- user_id ('' or id), record, created_at stamp.
-- Returns seq, stored-record-or-false per event (a record when the event was stored before); or,
-- writing nothing, {'run_taken', run_id, thread, event_id} when a new run.start names a run id whose
-- run.start (another event) is stored.
local P, T, mode, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local nx = tonumber(ARGV[5])
local nb = tonumber(ARGV[6 + nx])
local events_at = 7 + nx + 2 * nb
local B = P .. 't/' .. T .. '/'
local last = tonumber(redis.call('GET', B .. 'seq') or '0')
if last == 0 and redis.call('EXISTS', B .. 'ev', B .. 'ids', B .. 'keys') > 0 then
  -- leftovers of a thread whose counter expired first (keys expire one by one): seq restarts at 1
  drop_thread(P, T, B, false)
end

-- The owner of a run id a new run.start (event eid of thread T) would take, or nil: a claim whose
-- run.start is still stored, or another run.start of the run in this thread.
local function run_taken(P, T, B, run, eid)
  local claim = redis.call('GET', P .. 'start/' .. run)
  if claim and claim ~= T .. '\\n' .. eid then
    local cut = string.find(claim, '\\n', 1, true)
    local owner, owner_event = string.sub(claim, 1, cut - 1), string.sub(claim, cut + 1)
    if redis.call('HEXISTS', P .. 't/' .. owner .. '/ids', owner_event) == 1 then
      return {'run_taken', run, owner, owner_event}
    end
  end
  local first = redis.call('ZRANGE', B .. 'r/' .. run .. '/ty/run.start', 0, 0)[1]
  local record = first and redis.call('HGET', B .. 'ev', first)
  if record then
    local other = cjson.decode(record).event_id
    if other ~= eid then return {'run_taken', run, T, other} end
  end
  return nil
end

-- decide: no writes in this loop
local out, plan, fresh = {}, {}, {}
for o = events_at, #ARGV, 8 do
  local eid = ARGV[o]
  local seq, stored = fresh[eid], false
  if not seq then
    local known = redis.call('HGET', B .. 'ids', eid)
    if known then stored = redis.call('HGET', B .. 'ev', known) end
    if not stored and mode == 'once' then
      known = nil
      for x = 6, 5 + nx do -- the run's first event of any exclusive type
        local first = redis.call('ZRANGE', B .. 'r/' .. ARGV[o + 1] .. '/ty/' .. ARGV[x], 0, 0)[1]
        if first and (not known or tonumber(first) < tonumber(known)) then known = first end
      end
      if known then stored = redis.call('HGET', B .. 'ev', known) end
    end
    if stored then
      seq = tonumber(known)
    elseif ARGV[o + 2] == 'run.start' then
      local taken = run_taken(P, T, B, ARGV[o + 1], eid)
      if taken then return taken end
    end
    if not stored then
      last = last + 1
      seq = last
      fresh[eid] = seq
      plan[#plan + 1] = o
    end
  end
  out[#out + 1] = seq
  out[#out + 1] = stored
end
keep_bodies(B, 7 + nx, nb, ttl)
if #plan == 0 then return out end

-- write
local touched, users, newest = {}, {}, nil
local function index(key, s)
  redis.call('ZADD', key, s, s)
  touched[key] = true
end
for _, o in ipairs(plan) do
  local eid, run, etype = ARGV[o], ARGV[o + 1], ARGV[o + 2]
  local msg, task, user = ARGV[o + 3], ARGV[o + 4], ARGV[o + 5]
  local s = fresh[eid]
  local R = B .. 'r/' .. run .. '/'
  redis.call('HSET', B .. 'ev', s, ARGV[o + 6])
  redis.call('HSET', B .. 'ids', eid, s)
  redis.call('ZADD', B .. 'all', s, s)
  index(R .. 'all', s)
  index(B .. 'ty/' .. etype, s)
  index(R .. 'ty/' .. etype, s)
  if msg == '1' then
    redis.call('ZADD', B .. 'msg', s, s)
    index(R .. 'msg', s)
  end
  if task ~= '' then index(B .. 'task/' .. task, s) end
  newest = ARGV[o + 7] .. '/' .. T -- the events are planned in seq order: the last is the newest
  if user ~= '' then
    index(B .. 'u/' .. user .. '/all', s)
    if msg == '1' then index(B .. 'u/' .. user .. '/msg', s) end
    users[user] = newest
  end
  if etype == 'run.start' then
    redis.call('SET', P .. 'start/' .. run, T .. '\\n' .. eid)
    if redis.call('EXISTS', P .. 'run/' .. run) == 0 then redis.call('ZADD', P .. 'starts', 0, run) end
  end
  if ttl > 0 then redis.call('EXPIRE', P .. 'start/' .. run, ttl) end
end
redis.call('SET', B .. 'seq', last)
redis.call('ZADD', P .. 'threads', 0, T)
place(P .. 'recent', B .. 'at', newest)
for user, member in pairs(users) do
  redis.call('SADD', B .. 'users', user)
  redis.call('ZADD', P .. 'u/' .. user .. '/threads', 0, T)
  place(P .. 'u/' .. user .. '/recent', B .. 'u/' .. user .. '/at', member)
  touched[B .. 'u/' .. user .. '/at'] = true
end
for key in pairs(touched) do redis.call('SADD', B .. 'keys', key) end
if ttl > 0 then
  for _, key in ipairs(fixed_keys(B)) do redis.call('EXPIRE', key, ttl) end
  for _, key in ipairs(redis.call('SMEMBERS', B .. 'keys')) do redis.call('EXPIRE', key, ttl) end
end
redis.call('PUBLISH', B .. 'new', last)
return out
"""

PUT_BODIES: Final = _FIXED_KEYS + """
-- ARGV: prefix, thread_id, ttl_seconds, then (digest, data) per body: each one the thread lacks.
local B = ARGV[1] .. 't/' .. ARGV[2] .. '/'
keep_bodies(B, 4, (#ARGV - 3) / 2, tonumber(ARGV[3]))
return 1
"""

DROP_BODIES: Final = """
-- ARGV: prefix, thread_id, through_seq. Deletes the thread's bodies if its counter is still through_seq.
local B = ARGV[1] .. 't/' .. ARGV[2] .. '/'
if tonumber(redis.call('GET', B .. 'seq') or '0') ~= tonumber(ARGV[3]) then return 0 end
redis.call('UNLINK', B .. 'bodies', B .. 'bodyix')
return 1
"""

LIST_BODIES: Final = """
-- ARGV: prefix, thread_id, lexical start ('-' or '(<digest>'), limit. Returns digest, data, ... of
-- the thread's first bodies by digest from there.
local B = ARGV[1] .. 't/' .. ARGV[2] .. '/'
local digests = redis.call('ZRANGEBYLEX', B .. 'bodyix', ARGV[3], '+', 'LIMIT', 0, tonumber(ARGV[4]))
if #digests == 0 then return {} end
local data = redis.call('HMGET', B .. 'bodies', unpack(digests))
local out = {}
for i, digest in ipairs(digests) do
  if data[i] then
    out[#out + 1] = digest
    out[#out + 1] = data[i]
  end
end
return out
"""

PAGE: Final = """
-- KEYS: a sorted set of seqs, the thread's record hash. ARGV: min, max, count, '1' for descending.
-- Returns one JSON text [seq, record, seq, record, ...] in range order (null for a record that is
-- gone): one round trip per index page, and the client parses the whole page with one decode.
local seqs
if ARGV[4] == '1' then
  seqs = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[2], ARGV[1], 'LIMIT', 0, ARGV[3])
else
  seqs = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, ARGV[3])
end
local parts = {}
for i = 1, #seqs, 1000 do
  local upto = math.min(i + 999, #seqs)
  local records = redis.call('HMGET', KEYS[2], unpack(seqs, i, upto))
  for j = i, upto do
    parts[#parts + 1] = seqs[j] .. ',' .. (records[j - i + 1] or 'null')
  end
end
return '[' .. table.concat(parts, ',') .. ']'
"""

DELETE_THREAD: Final = _FIXED_KEYS + """
-- ARGV: prefix, thread_id. Deletes events, indexes and run rows of the thread; the counter stays,
-- so new events continue above the highest seq ever assigned.
local P, T = ARGV[1], ARGV[2]
local B = P .. 't/' .. T .. '/'
-- the run ids its run.starts took are free again
local starts = redis.call('ZRANGE', B .. 'ty/run.start', 0, -1)
for i = 1, #starts, 500 do
  local records = redis.call('HMGET', B .. 'ev', unpack(starts, i, math.min(i + 499, #starts)))
  for _, record in ipairs(records) do
    if record then
      local e = cjson.decode(record)
      if redis.call('GET', P .. 'start/' .. e.run_id) == T .. '\\n' .. e.event_id then
        redis.call('UNLINK', P .. 'start/' .. e.run_id)
        redis.call('ZREM', P .. 'starts', e.run_id)
      end
    end
  end
end
return drop_thread(P, T, B, true)
"""

PUT_RUN: Final = _FIXED_KEYS + """
-- ARGV: prefix, run_id, thread_id, status, row JSON, ttl_seconds, started_at (epoch microseconds
-- or ''), now (epoch microseconds), search keys (NUL-separated, under the prefix), terminal
-- statuses...
-- Refused (nothing written): a run of another thread returns {'thread', owner}; a stored terminal
-- status only accepts the same status and returns the stored row JSON otherwise.
-- Sort score (list_runs, search_runs): started_at, else the time of the first put_run; equal scores
-- sort by run id. The row joins the search sets its keys name and leaves those it left.
local P, run, T, status, row, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local key = P .. 'run/' .. run
local current = redis.call('HMGET', key, 'status', 'thread_id', 'first_put', 'row', 'search')
if current[2] and current[2] ~= T then return {'thread', current[2]} end
if current[1] and current[1] ~= status then
  for i = 10, #ARGV do
    if ARGV[i] == current[1] then return current[4] end
  end
end
local first_put = current[3] or ARGV[8]
local score = first_put
if ARGV[7] ~= '' then score = ARGV[7] end
redis.call('HSET', key, 'status', status, 'thread_id', T, 'first_put', first_put, 'row', row,
           'search', ARGV[9])
redis.call('ZADD', P .. 't/' .. T .. '/runs', score, run)
redis.call('ZADD', P .. 'runs', score, run)
if current[1] and current[1] ~= status then redis.call('ZREM', P .. 'st/' .. current[1], run) end
redis.call('ZADD', P .. 'st/' .. status, score, run)
local kept = {}
for _, name in ipairs(search_keys(ARGV[9])) do
  kept[name] = true
  redis.call('ZADD', P .. name, score, run)
end
for _, name in ipairs(search_keys(current[5])) do
  if not kept[name] then redis.call('ZREM', P .. name, run) end
end
redis.call('ZREM', P .. 'starts', run)
if ttl > 0 then
  redis.call('EXPIRE', key, ttl)
  redis.call('EXPIRE', P .. 't/' .. T .. '/runs', ttl)
end
return false
"""

DELETE_RUN_STEP: Final = _FIXED_KEYS + """
-- ARGV: prefix, thread_id, run_id, through_seq ('+inf': all), limit. One step of deleting a run
-- (``delete_by_run``, ``prune``): deletes at most ``limit`` of the run's events with seq <= through_seq
-- (the oldest) from every index, freeing the run id with its run.start; when no such event is left,
-- the run's row too. The counter stays, so new events continue above the highest seq ever assigned.
-- Returns the number of events deleted.
local P, T, run, through, limit = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local B = P .. 't/' .. T .. '/'
local R = B .. 'r/' .. run .. '/'
local seqs = redis.call('ZRANGEBYSCORE', R .. 'all', '-inf', through, 'LIMIT', 0, limit)
local users, emptied = {}, {}
local records = #seqs > 0 and redis.call('HMGET', B .. 'ev', unpack(seqs)) or {}
for j, s in ipairs(seqs) do
  local keys = {B .. 'all', B .. 'msg', R .. 'all', R .. 'msg'}
  local record = records[j]
  if record then
    local e = cjson.decode(record)
    redis.call('HDEL', B .. 'ids', e.event_id)
    if redis.call('GET', P .. 'start/' .. run) == T .. '\\n' .. e.event_id then
      redis.call('UNLINK', P .. 'start/' .. run) -- the run id is free again
      redis.call('ZREM', P .. 'starts', run)
    end
    keys[#keys + 1] = B .. 'ty/' .. e.event_type
    keys[#keys + 1] = R .. 'ty/' .. e.event_type
    local task = type(e.metadata) == 'table' and e.metadata.task_id
    if type(task) == 'string' then keys[#keys + 1] = B .. 'task/' .. redis.sha1hex(task) end
    if type(e.user_id) == 'string' then
      keys[#keys + 1] = B .. 'u/' .. e.user_id .. '/all'
      keys[#keys + 1] = B .. 'u/' .. e.user_id .. '/msg'
      users[e.user_id] = true
    end
  end
  for _, key in ipairs(keys) do
    redis.call('ZREM', key, s)
    emptied[key] = true
  end
  redis.call('HDEL', B .. 'ev', s)
end
for key in pairs(emptied) do
  if redis.call('EXISTS', key) == 0 then redis.call('SREM', B .. 'keys', key) end
end
for user in pairs(users) do
  local U = B .. 'u/' .. user .. '/'
  replace(P .. 'u/' .. user .. '/recent', U .. 'at', U .. 'all', B, T)
  if redis.call('EXISTS', U .. 'all') == 0 then
    redis.call('ZREM', P .. 'u/' .. user .. '/threads', T)
    redis.call('SREM', B .. 'users', user)
    redis.call('SREM', B .. 'keys', U .. 'at')
  end
end
if #seqs > 0 then replace(P .. 'recent', B .. 'at', B .. 'all', B, T) end
if redis.call('EXISTS', B .. 'all') == 0 then redis.call('ZREM', P .. 'threads', T) end
local owner, status, search = unpack(redis.call('HMGET', P .. 'run/' .. run, 'thread_id', 'status', 'search'))
if #seqs < limit and owner == T then
  drop_row(P, run, status, search)
  redis.call('ZREM', B .. 'runs', run)
end
return #seqs
"""

PLACE_THREAD: Final = _FIXED_KEYS + """
-- ARGV: prefix, thread_id. The upgrade of a store written before the activity order: the thread and
-- each of its users take their place in it (from the newest event), unless a writer placed them.
local P, T = ARGV[1], ARGV[2]
local B = P .. 't/' .. T .. '/'
if redis.call('EXISTS', B .. 'at') == 0 then replace(P .. 'recent', B .. 'at', B .. 'all', B, T) end
for _, user in ipairs(redis.call('SMEMBERS', B .. 'users')) do
  local U = B .. 'u/' .. user .. '/'
  if redis.call('EXISTS', U .. 'at') == 0 then
    replace(P .. 'u/' .. user .. '/recent', U .. 'at', U .. 'all', B, T)
    redis.call('SADD', B .. 'keys', U .. 'at')
  end
end
return 1
"""

INDEX_RUN_STATUSES: Final = """
-- ARGV: prefix, then run ids. The upgrade of a prefix written before the status index: each run of
-- ``P runs`` joins ``P st/<status>`` with its score there.
local P = ARGV[1]
for i = 2, #ARGV do
  local run = ARGV[i]
  local status = redis.call('HGET', P .. 'run/' .. run, 'status')
  local score = redis.call('ZSCORE', P .. 'runs', run)
  if status and score then redis.call('ZADD', P .. 'st/' .. status, score, run) end
end
return 1
"""

INDEX_RUN_SEARCH: Final = """
-- ARGV: prefix, run_id, search keys (NUL-separated). The upgrade of a prefix written before the
-- search sets: the run joins them, scored as in ``P runs``, unless a writer indexed it already.
local P, run = ARGV[1], ARGV[2]
local key = P .. 'run/' .. run
local score = redis.call('ZSCORE', P .. 'runs', run)
if redis.call('HEXISTS', key, 'search') == 1 or redis.call('EXISTS', key) == 0 or not score then return 0 end
redis.call('HSET', key, 'search', ARGV[3])
for name in string.gmatch(ARGV[3], '[^%z]+') do redis.call('ZADD', P .. name, score, run) end
return 1
"""
