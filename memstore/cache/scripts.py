"""The Lua scripts behind the Redis window: each change is one atomic round trip.

They implement the same rules as :func:`memstore.core.window.eviction_count` (a window
opened by a summary entry, kind ``M``, keeps it and trims the entries after it) and
:func:`memstore.core.window.can_append_result` (a test runs both on random windows).
Entries are ``<kind><ids>[<0x1d><tokens>]<0x1e><json>`` (see
:func:`memstore.cache.base.encode_entry`).
KEYS are always ``window, interrupted, version, origin, generation, heads`` of one app.

The ``heads`` key holds ``<stamp>|`` followed by every window entry's header with its
``0x1e`` (the entry without its JSON), in window order: what APPEND needs to apply the edge
rules (kinds, call ids, token counts), so it does not read the whole window (every message's
JSON: with large tool results, most of the window's bytes) into Lua on each append. STORE
writes it, APPEND keeps it in step. APPEND trusts it only while its stamp is the window's
stamp (``origin``) and it has one header per entry; otherwise (a window stored or extended by
a memstore that did not keep heads) APPEND reads the whole window as before and writes the
heads anew, so a window never goes wrong for lack of them. Every script that drops a window
drops them too. APPEND looks a new request's call ids up in the heads (or, without them, in
the window's ids, read once), and reads the ``interrupted`` set only once a result needs it.

The ``generation`` key holds the app's SQL generation (``chat_app_generation``) the window
reflects: STORE sets it to the generation the rebuild read after its rows; APPEND gets the
write's generation step (``before``, ``after``) and extends the window only when it is at
``before`` (then moves it to ``after``); otherwise it drops the window, so appends that arrive
out of commit order, or after a rebuild that already read their rows, never change a window.

Every script learns the replication id of the master it runs on (``INFO replication``; ``''``
where the server does not report one). A window is served and appended to only while its
``origin`` key holds that id: after a failover the promoted replica reports a new id, so the
windows written before it (which may lack writes the old master acknowledged) read as misses.
Versions handed to rebuilds are ``<replication id>/<counter>`` for the same reason.

The ``origin`` key holds ``<replication id>|<stamp>``: ``stamp`` is a random token the writer
(STORE, or an APPEND that changed the window) chose, so every change of a window's content
gives it a new stamp. READ is handed the stamp of the window the process already decoded and
sends no entries when the window still has it (see :class:`memstore.cache.base.WindowMemo`).
A window whose ``origin`` holds a bare id (stored by an older memstore) is served, never
memoized; an older memstore never extends a window whose ``origin`` holds a stamp (its id
check fails), and its STORE replaces the stamp.
"""

from __future__ import annotations

_ORIGIN = r"""
local function origin()
  local ok, info = pcall(redis.call, 'INFO', 'replication')
  if not ok or type(info) ~= 'string' then return '' end
  return string.match(info, 'master_replid:(%w+)') or ''
end
local function stored_on(value)
  if not value then return '', '' end
  local bar = string.find(value, '|', 1, true)
  if not bar then return value, '' end
  return string.sub(value, 1, bar - 1), string.sub(value, bar + 1)
end
"""

_HEAD_OF = r"""
local function head_of(e) return string.sub(e, 1, string.find(e, '\30', 1, true)) end
"""
"""An entry's header with its 0x1e (what the ``heads`` key keeps of it)."""

APPEND = (
    _ORIGIN
    + _HEAD_OF
    + r"""
local ttl = tonumber(ARGV[1])
redis.call('INCR', KEYS[3])
redis.call('EXPIRE', KEYS[3], ttl)
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local here = origin()
local stored_id, stored_stamp = stored_on(redis.call('GET', KEYS[4]))
if stored_id ~= here then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6])
  return -1
end
local function header(e)
  local sep = string.find(e, '\30', 1, true)
  local h = string.sub(e, 2, sep - 1)
  local t = string.find(h, '\29', 1, true)
  if t then return string.sub(h, 1, t - 1) end
  return h
end
local function entry_tokens(e)
  local sep = string.find(e, '\30', 1, true)
  local h = string.sub(e, 2, sep - 1)
  local t = string.find(h, '\29', 1, true)
  if t then return tonumber(string.sub(h, t + 1)) or 0 end
  return 0
end
local function invalidate()
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6])
  return -1
end
if (redis.call('GET', KEYS[5]) or '') ~= ARGV[5] then return invalidate() end
redis.call('SET', KEYS[5], ARGV[6], 'EX', ttl)
if #ARGV < 8 then
  redis.call('EXPIRE', KEYS[1], ttl)
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('EXPIRE', KEYS[2], ttl) end
  redis.call('EXPIRE', KEYS[4], ttl)
  redis.call('EXPIRE', KEYS[6], ttl)
  return 1
end
local heads_body = ''
local function window_heads()
  if stored_stamp == '' then return nil end
  local value = redis.call('GET', KEYS[6])
  if not value then return nil end
  local bar = string.find(value, '|', 1, true)
  if not bar or string.sub(value, 1, bar - 1) ~= stored_stamp then return nil end
  local heads = {}
  heads_body = string.sub(value, bar + 1)
  for head in string.gmatch(heads_body, '[^\30]*\30') do
    heads[#heads + 1] = head
  end
  if #heads ~= redis.call('LLEN', KEYS[1]) then return nil end
  return heads
end
local function in_heads(id)
  -- whether a header of the window holds call id ``id``: found where an id starts (after
  -- 0x1f, or after an R or T kind that opens a header) and ends (0x1f, 0x1d or 0x1e)
  local from = 1
  while true do
    local first, last = string.find(heads_body, id, from, true)
    if not first then return false end
    local before = string.sub(heads_body, first - 1, first - 1)
    local after = string.sub(heads_body, last + 1, last + 1)
    if after == '\31' or after == '\29' or after == '\30' then
      if before == '\31' then return true end
      if (before == 'R' or before == 'T')
          and (first == 2 or string.sub(heads_body, first - 2, first - 2) == '\30') then
        return true
      end
    end
    from = first + 1
  end
end
local items = window_heads()
local from_heads = items ~= nil
if not from_heads then items = redis.call('LRANGE', KEYS[1], 0, -1) end
local count = #items
local kinds = {}
for k = 1, count do kinds[k] = string.sub(items[k], 1, 1) end
local heads_at = {}  -- the header (call ids) of entry k, taken apart once
local function head_at(k)
  local h = heads_at[k]
  if h == nil then
    h = header(items[k])
    heads_at[k] = h
  end
  return h
end
local first_new = count + 1
local fresh = {}  -- call ids of the entries this append adds
local held = nil  -- without heads: the window's call ids, read on first need
local function is_held(id)
  if fresh[id] then return true end
  if from_heads then return in_heads(id) end
  if held == nil then
    held = {}
    for k = 1, first_new - 1 do
      if kinds[k] == 'R' or kinds[k] == 'T' then
        for part in string.gmatch(head_at(k), '[^\31]+') do held[part] = true end
      end
    end
  end
  return held[id] == true
end
local calls_at, calls_count = {}, {}  -- request k's call ids as a set, and how many
local function calls_of(k)
  local calls = calls_at[k]
  if calls == nil then
    calls = {}
    local n = 0
    for part in string.gmatch(head_at(k), '[^\31]+') do
      calls[part] = true
      n = n + 1
    end
    calls_at[k] = calls
    calls_count[k] = n
  end
  return calls
end
local interrupted = nil
for i = 8, #ARGV do
  local e = ARGV[i]
  local kind = string.sub(e, 1, 1)
  if kind == 'T' then
    local id = header(e)
    if interrupted == nil then  -- read once: usually no call is answered as interrupted
      interrupted = {}
      for _, member in ipairs(redis.call('SMEMBERS', KEYS[2])) do interrupted[member] = true end
      -- without its marker the set was evicted (maxmemory) or predates it: which results of
      -- the window are synthetic is unknown, so the window goes
      if not interrupted[''] then return invalidate() end
    end
    if interrupted[id] then return invalidate() end
    local idx = count
    local verdict = nil
    while verdict == nil do
      if idx < 1 then
        verdict = 'invalidate'
      elseif kinds[idx] == 'T' then
        if head_at(idx) == id then verdict = 'skip' end
        idx = idx - 1
      elseif kinds[idx] == 'R' and calls_of(idx)[id] then
        verdict = 'append'
      else
        verdict = 'invalidate'
      end
    end
    if verdict == 'invalidate' then return invalidate() end
    if verdict == 'append' then
      count = count + 1
      items[count] = e
      kinds[count] = kind
      heads_at[count] = id
      fresh[id] = true
    end
  else
    local results = 0
    local idx = count
    while idx >= 1 and kinds[idx] == 'T' do
      results = results + 1
      idx = idx - 1
    end
    if idx >= 1 and kinds[idx] == 'R' then
      calls_of(idx)
      if results < calls_count[idx] then return invalidate() end
    end
    count = count + 1
    items[count] = e
    kinds[count] = kind
    if kind == 'R' then
      local ids = header(e)
      heads_at[count] = ids
      for part in string.gmatch(ids, '[^\31]+') do
        if is_held(part) then return invalidate() end
      end
      for part in string.gmatch(ids, '[^\31]+') do fresh[part] = true end
    end
  end
end
local skip = 0
if count > 0 and kinds[1] == 'M' then skip = 1 end
local n = count - skip
local function kind_at(i) return kinds[skip + i + 1] end
local keep = tonumber(ARGV[2]) - skip
if keep < 1 then keep = 1 end
local drop = n - keep
if drop < 0 then drop = 0 end
while drop > 0 and drop < n and kind_at(drop) == 'T' do
  drop = drop - 1
end
local budget = tonumber(ARGV[4])
if budget > 0 and n > 0 then
  if skip == 1 then
    budget = budget - entry_tokens(items[1])
    if budget < 1 then budget = 1 end
  end
  local total = 0
  local start = n
  local i = n - 1
  while i >= 0 do
    local j = i
    while j > 0 and kind_at(j) == 'T' do j = j - 1 end
    local cost = 0
    for k = j, i do cost = cost + entry_tokens(items[skip + k + 1]) end
    if start < n and total + cost > budget then break end
    total = total + cost
    start = j
    i = j - 1
  end
  if start > drop then drop = start end
end
if ARGV[3] == '1' then
  while drop < n and kind_at(drop) ~= 'U' do
    drop = drop + 1
  end
end
if drop >= n then return invalidate() end
local opening = items[1]
if drop > 0 and skip == 1 and from_heads then opening = redis.call('LINDEX', KEYS[1], 0) end
for k = first_new, count, 1000 do
  redis.call('RPUSH', KEYS[1], unpack(items, k, math.min(k + 999, count)))
end
if drop > 0 then
  redis.call('LTRIM', KEYS[1], skip + drop, -1)
  if skip == 1 then redis.call('LPUSH', KEYS[1], opening) end
end
redis.call('EXPIRE', KEYS[1], ttl)
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('EXPIRE', KEYS[2], ttl) end
redis.call('SET', KEYS[4], here .. '|' .. ARGV[7], 'EX', ttl)
local from_k = first_new
if not from_heads then from_k = 1 end
for k = math.max(from_k, skip + drop + 1), count do items[k] = head_of(items[k]) end
local heads = table.concat(items, '', skip + drop + 1, count)
if skip == 1 then heads = head_of(items[1]) .. heads end
redis.call('SET', KEYS[6], ARGV[7] .. '|' .. heads, 'EX', ttl)
return 1
"""
)
"""ARGV: ttl, max messages, start_at_user ('1'/'0'), max tokens (0: none), the write's
generation before and after it, the window's new stamp, entries... (none: a display-only
write, which only moves a window at ``before`` to ``after`` and keeps its stamp). Returns 1
appended,
0 no window cached (left missing on purpose), -1 window dropped for a rebuild."""

STORE = (
    _ORIGIN
    + _HEAD_OF
    + r"""
local here = origin()
local current = here .. '/' .. (redis.call('GET', KEYS[3]) or '')
if current ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('DEL', KEYS[5], KEYS[6])
local ttl = tonumber(ARGV[2])
if ARGV[3] ~= '' then redis.call('SET', KEYS[5], ARGV[3], 'EX', ttl) end
local synthetic = tonumber(ARGV[5])
redis.call('SADD', KEYS[2], '')  -- the marker: the set is there, not evicted
for i = 6, 5 + synthetic do redis.call('SADD', KEYS[2], ARGV[i]) end
redis.call('EXPIRE', KEYS[2], ttl)
local first = 6 + synthetic
for i = first, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if #ARGV >= first then
  redis.call('EXPIRE', KEYS[1], ttl)
  local heads = {}
  for i = first, #ARGV do heads[#heads + 1] = head_of(ARGV[i]) end
  redis.call('SET', KEYS[6], ARGV[4] .. '|' .. table.concat(heads), 'EX', ttl)
end
redis.call('SET', KEYS[4], here .. '|' .. ARGV[4], 'EX', ttl)
return 1
"""
)
"""ARGV: expected version (as READ returned it), ttl, the app's SQL generation the window
reflects (``''``: unknown, every later APPEND drops the window), the window's stamp, number
of synthetic ids, those ids, entries...
Returns 1 stored, 0 refused because a write happened since the version was read."""

READ = (
    _ORIGIN
    + r"""
local here = origin()
local counter = redis.call('GET', KEYS[3])
if not counter then
  -- a rebuild must hold a version a purge (which deletes it) or a write (INCR) changes
  counter = '0'
  redis.call('SET', KEYS[3], counter, 'EX', tonumber(ARGV[2]))
end
local version = here .. '/' .. counter
local id, stamp = stored_on(redis.call('GET', KEYS[4]))
if id ~= here then return {version} end
if stamp ~= '' and stamp == ARGV[1] then
  if redis.call('EXISTS', KEYS[1]) == 0 then return {version} end
  return {version, stamp}
end
local entries = redis.call('LRANGE', KEYS[1], 0, -1)
if #entries == 0 then return {version} end
return {version, stamp, entries}
"""
)
"""ARGV: the stamp of the window the caller already holds (``''``: none), ttl (of the version
counter READ starts when there is none, so that a purge racing the rebuild refuses its STORE).
Returns
``{version}`` when no window of this master is cached (a miss; a window stored on another
master is left for the rebuild to replace), ``{version, stamp}`` when the window still has
the caller's stamp (unchanged: no entries are sent), else ``{version, stamp, entries}``
(``stamp`` ``''`` for a window an older memstore stored)."""

INVALIDATE = r"""
redis.call('DEL', KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6])
redis.call('INCR', KEYS[3])
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[1]))
return 1
"""
"""ARGV: ttl. Drops the window and bumps the version, so a rebuild racing it is refused."""

PURGE = r"""
local existed = redis.call('DEL', KEYS[1])
if redis.call('SCARD', KEYS[2]) > redis.call('SISMEMBER', KEYS[2], '') then
  existed = existed + 1
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
return existed
"""
"""Deletes every key of the app; returns how many of the keys holding its messages existed:
the window, and the set of interrupted call ids when it held one (not only its marker)."""
