"""The Lua scripts behind :class:`~gateway.admission.shared.SharedAdmission`: one backend's holders and
its fair per-key queue in Redis, each change one atomic script (Redis runs a script alone: no other
replica's command interleaves, https://redis.io/docs/latest/develop/interact/programmability/eval-intro/).

Keys (``KEYS[1]`` is the backend's prefix, ``dspark:admission:{name}:``; the braces keep every key in
one Redis Cluster slot):

- ``h`` hash fence -> holder ``{key, seq, kv, long, ticket, replica}``; ``hx`` zset fence -> expiry (ms).
  A *fence* is ``INCR f``: increasing, so a lease that expired and was purged can't be released
  twice, nor free a later holder's capacity; releases and renewals name the ticket too, as a Redis
  that restarted empty counts fences from 1 again;
- ``t`` hash ticket -> waiter ``{key, prio, maxc, seq, kv, long, b, replica, enq, passes}`` (``b``
  1 for a batch request); ``tx`` zset
  ticket -> expiry (ms), renewed by the replica that waits; ``q:<key>`` list of the key's tickets (FIFO);
  ``r`` list of keys with waiters in serving order; ``c`` hash key -> grants left in its turn;
  ``px`` zset of tickets passed ``bypass_limit`` times (by ``o``, the enqueue counter: FIFO);
  ``gd`` the guarded ticket;
- ``k`` hash key -> its requests holding the backend; ``g`` hash ticket -> the fence it was granted.

Policy, the in-process scheduler's (``gateway.admission.scheduler``): weighted round robin over keys
(a key holding nothing of the backend joining ahead of the waiting keys that hold some), interactive
requests before batch ones, FIFO within a key, a waiter that doesn't fit passed by one that does
(only the first :data:`SCAN_DEPTH` of a key's queue are looked at), a waiter passed ``bypass_limit``
times guarded with the EASY-backfilling reservation of
:meth:`~gateway.admission.capacity.Capacity.spares`.
A grant is published on ``grant:<replica>`` as ``"<ticket> <fence>"``; a replica that missed it
finds it in ``g`` at its next renewal.

Every script's ARGV starts with the capacity, ``slots, kv_budget_tokens (-1: none), long_slots,
ttl_ms, bypass_limit``, and returns a JSON object: ``result`` plus the backend's totals (``seq``,
``kv``, ``long``, ``waiting``, ``in_flight`` and ``queued`` by key). Redis's cjson writes an empty
table as ``{}``, so an empty list or object of an answer may be either.
"""

from __future__ import annotations

#: Tickets of one key looked at for passing, from the head of its queue.
SCAN_DEPTH = 64

_PRELUDE = """
local P = KEYS[1]
local H, HX, T, TX, R, C, K, G, F, GD, PX =
  P..'h', P..'hx', P..'t', P..'tx', P..'r', P..'c', P..'k', P..'g', P..'f', P..'gd', P..'px'
local cap = {slots = tonumber(ARGV[1]), kv = tonumber(ARGV[2]), long = tonumber(ARGV[3]),
             ttl = tonumber(ARGV[4]), bypass = tonumber(ARGV[5])}
local now = (function() local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end)()

local function blocker(held, need)
  if held.seq + need.seq > cap.slots then return 'slot' end
  if need.long == 1 and held.long + 1 > cap.long then return 'lane' end
  if cap.kv >= 0 and held.kv + need.kv > cap.kv then return 'kv' end
  return false
end

local function plus(a, b, sign)
  return {seq = a.seq + sign * b.seq, kv = a.kv + sign * b.kv, long = a.long + sign * b.long}
end

local function holders()
  local flat, list = redis.call('HGETALL', H), {}
  for i = 1, #flat, 2 do
    local h = cjson.decode(flat[i + 1]); h.fence = tonumber(flat[i]); list[#list + 1] = h
  end
  table.sort(list, function(a, b) return a.fence < b.fence end)
  local held = {seq = 0, kv = 0, long = 0}
  for _, h in ipairs(list) do held = plus(held, h, 1) end
  return list, held
end

local function spares(list, held, guarded, extra)
  local rest = held
  for _, h in ipairs(list) do
    if not blocker(rest, guarded) then break end
    rest = plus(rest, h, -1)
  end
  return not blocker(plus(rest, extra, 1), guarded)
end

local function waiter(ticket)
  local raw = redis.call('HGET', T, ticket)
  return raw and cjson.decode(raw)
end

local function key_free(t)
  return t.maxc < 0 or tonumber(redis.call('HGET', K, t.key) or '0') < t.maxc
end

local function drop_holder(fence, ticket)
  local raw = redis.call('HGET', H, fence)
  if not raw then return false end
  local h = cjson.decode(raw)
  if ticket and h.ticket ~= ticket then return false end  -- another lease's (fences restart with Redis)
  redis.call('HDEL', H, fence); redis.call('ZREM', HX, fence); redis.call('HDEL', G, h.ticket)
  if redis.call('HINCRBY', K, h.key, -1) <= 0 then redis.call('HDEL', K, h.key) end
  return true
end

local function unqueue(ticket, t)
  redis.call('HDEL', T, ticket); redis.call('ZREM', TX, ticket); redis.call('ZREM', PX, ticket)
  local q = P..'q:'..t.key
  redis.call('LREM', q, 1, ticket)
  if redis.call('GET', GD) == ticket then redis.call('DEL', GD) end
  if redis.call('LLEN', q) == 0 then
    redis.call('HDEL', C, t.key); redis.call('LREM', R, 0, t.key)
    return false
  end
  return q
end

local function purge()
  for _, fence in ipairs(redis.call('ZRANGEBYSCORE', HX, '-inf', now)) do drop_holder(fence) end
  for _, ticket in ipairs(redis.call('ZRANGEBYSCORE', TX, '-inf', now)) do
    local t = waiter(ticket)
    if t then unqueue(ticket, t) else redis.call('ZREM', TX, ticket) end
  end
end

local function grant(ticket, t)
  local q = unqueue(ticket, t)
  local fence = redis.call('INCR', F)
  redis.call('HSET', H, fence, cjson.encode({key = t.key, seq = t.seq, kv = t.kv, long = t.long,
                                             ticket = ticket, replica = t.replica}))
  redis.call('ZADD', HX, now + cap.ttl, fence)
  redis.call('HSET', G, ticket, fence)
  redis.call('HINCRBY', K, t.key, 1)
  if q and redis.call('HINCRBY', C, t.key, -1) <= 0 then
    redis.call('HSET', C, t.key, waiter(redis.call('LINDEX', q, 0)).prio)
    redis.call('LREM', R, 0, t.key); redis.call('RPUSH', R, t.key)
  end
  redis.call('PUBLISH', P..'grant:'..t.replica, ticket..' '..fence)
  t.fence = fence
  return t
end

local function guard()
  local g = redis.call('GET', GD)
  if not g then
    g = redis.call('ZRANGE', PX, 0, 0)[1]
    if not g then return nil, nil end
    redis.call('SET', GD, g)
  end
  return g, waiter(g)
end

local function pick(list, held, gticket, gt)
  local passed, chosen, ct = {}, nil, nil
  for batch = 0, 1 do  -- interactive waiters first, then batch ones
    for _, key in ipairs(redis.call('LRANGE', R, 0, -1)) do
      local tickets = redis.call('LRANGE', P..'q:'..key, 0, __SCAN_DEPTH__ - 1)
      if tickets[1] and key_free(waiter(tickets[1])) then
        for _, ticket in ipairs(tickets) do
          local t = waiter(ticket)
          if (t.b or 0) == batch then
            if ticket == gticket or blocker(held, t) then passed[#passed + 1] = {ticket, t}
            elseif gticket == nil or spares(list, held, gt, t) then chosen, ct = ticket, t; break end
          end
        end
      end
      if chosen then break end
    end
    if chosen then break end
  end
  if chosen then
    for _, p in ipairs(passed) do
      p[2].passes = p[2].passes + 1
      redis.call('HSET', T, p[1], cjson.encode(p[2]))
      if p[2].passes == cap.bypass then redis.call('ZADD', PX, p[2].order, p[1]) end
    end
  end
  return chosen, ct
end

-- the expired leases and tickets gone, grant while a waiter fits
local function dispatch()
  purge()
  local list, held = holders()
  while redis.call('HLEN', T) > 0 and held.seq < cap.slots do
    local gticket, gt = guard()
    local ticket, t
    if gt and key_free(gt) and not blocker(held, gt) then ticket, t = gticket, gt
    else ticket, t = pick(list, held, gticket, gt) end
    if not ticket then break end
    list[#list + 1] = grant(ticket, t)
    held = plus(held, t, 1)
  end
  return list, held
end

-- what a queued ticket waits for, and its place (grants before it, 1 = next)
local function describe(ticket, t, list, held)
  local reason
  if not key_free(t) then reason = 'key_concurrency' else reason = blocker(held, t) end
  local gticket, gt = guard()
  if not reason and gt and ticket ~= gticket and not spares(list, held, gt, t) then reason = 'reserved' end
  local keys = redis.call('LRANGE', R, 0, -1)
  local turn = 0
  for i, key in ipairs(keys) do if key == t.key then turn = i end end
  local index = redis.call('LPOS', P..'q:'..t.key, ticket) or 0
  return {reason or 'slot', index * math.max(1, #keys) + turn}
end

local function answer(result, held)
  local in_flight, queued = {}, {}
  local flat = redis.call('HGETALL', K)
  for i = 1, #flat, 2 do in_flight[flat[i]] = tonumber(flat[i + 1]) end
  for _, key in ipairs(redis.call('LRANGE', R, 0, -1)) do queued[key] = redis.call('LLEN', P..'q:'..key) end
  return cjson.encode({result = result, seq = held.seq, kv = held.kv, long = held.long,
                       waiting = redis.call('HLEN', T), in_flight = in_flight, queued = queued})
end
""".replace("__SCAN_DEPTH__", str(SCAN_DEPTH))

ENQUEUE = (
    _PRELUDE
    + """
-- ARGV[6] ticket, ARGV[7] waiter JSON (without enq, passes), ARGV[8] queue_max,
-- ARGV[9] queue_max_per_key (-1: none), ARGV[10] reserve
-- result: {"full": "total"|"key"} | {"fence": n} | {"queued": [reason, place]}
purge()
local ticket, t = ARGV[6], cjson.decode(ARGV[7])
local queue_max, per_key, reserve = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local waits = redis.call('LLEN', P..'q:'..t.key)
local _, held_before = holders()
local runs_now = redis.call('LLEN', R) == 0 and key_free(t) and not blocker(held_before, t)
if not runs_now then  -- the queue's bounds hold for a request that would wait (as in-process)
  local bound = queue_max
  if waits > 0 then bound = queue_max - reserve end
  if redis.call('HLEN', T) >= bound then
    return answer({full = waits > 0 and 'key' or 'total'}, held_before)
  end
  if per_key >= 0 and waits >= per_key then return answer({full = 'key'}, held_before) end
end
t.enq, t.passes, t.order = now, 0, redis.call('INCR', P..'o')
redis.call('HSET', T, ticket, cjson.encode(t))
redis.call('ZADD', TX, now + cap.ttl, ticket)
redis.call('RPUSH', P..'q:'..t.key, ticket)
if redis.call('HEXISTS', C, t.key) == 0 then  -- joins the rotation (see the in-process _join_turns)
  redis.call('HSET', C, t.key, t.prio)
  local pivot = false
  if redis.call('HEXISTS', K, t.key) == 0 then
    for _, key in ipairs(redis.call('LRANGE', R, 0, -1)) do
      if redis.call('HEXISTS', K, key) == 1 then pivot = key; break end
    end
  end
  if pivot then redis.call('LINSERT', R, 'BEFORE', pivot, t.key) else redis.call('RPUSH', R, t.key) end
end
local list, held = dispatch()
local fence = redis.call('HGET', G, ticket)
if fence then return answer({fence = tonumber(fence)}, held) end
return answer({queued = describe(ticket, t, list, held)}, held)
"""
)

RELEASE = (
    _PRELUDE
    + """
-- ARGV[6] fence, ARGV[7] ticket; result: true if it was held (false: released before, or expired)
local held_now = drop_holder(ARGV[6], ARGV[7])
local _, held = dispatch()
return answer(held_now, held)
"""
)

ABANDON = (
    _PRELUDE
    + """
-- ARGV[6] ticket: out of its queue, or the grant it got back; result: true if anything was given up
local ticket = ARGV[6]
local t = waiter(ticket)
local gave = false
if t then unqueue(ticket, t); gave = true
else
  local fence = redis.call('HGET', G, ticket)
  if fence then gave = drop_holder(fence, ticket) end
end
local _, held = dispatch()
return answer(gave, held)
"""
)

RENEW = (
    _PRELUDE
    + """
-- ARGV[6] n: then n (fence, ticket) pairs held, then the tickets waiting, all of one replica.
-- Extends each one's expiry; result: {"lost": [fences no longer held], "granted": {ticket: fence},
-- "queued": {ticket: [reason, place]}, "gone": [tickets neither queued nor granted]}
local n = tonumber(ARGV[6])
local lost, granted, gone = {}, {}, {}
for i = 7, 5 + 2 * n, 2 do
  local raw = redis.call('HGET', H, ARGV[i])
  if raw and cjson.decode(raw).ticket == ARGV[i + 1] then redis.call('ZADD', HX, now + cap.ttl, ARGV[i])
  else lost[#lost + 1] = tonumber(ARGV[i]) end
end
for i = 7 + 2 * n, #ARGV do
  if redis.call('HEXISTS', T, ARGV[i]) == 1 then redis.call('ZADD', TX, now + cap.ttl, ARGV[i]) end
end
local list, held = dispatch()
local queued = {}
for i = 7 + 2 * n, #ARGV do
  local ticket = ARGV[i]
  local t = waiter(ticket)
  local fence = redis.call('HGET', G, ticket)
  if t then queued[ticket] = describe(ticket, t, list, held)
  elseif fence then granted[ticket] = tonumber(fence)
  else gone[#gone + 1] = ticket end
end
return answer({lost = lost, granted = granted, queued = queued, gone = gone}, held)
"""
)
