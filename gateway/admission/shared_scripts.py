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
- ``k`` hash key -> its requests holding the backend; ``g`` hash ticket -> the fence it was granted;
- ``hs`` hash session -> its hold ``{key, tokens, since}`` (since: Redis ms); ``ho`` zset session ->
  ``INCR hn`` at the hold: the holds, least recently used first. A holder and a ticket carry the
  ``session`` and ``footprint`` of a session's turn (absent for other requests).

Policy, the in-process scheduler's (``gateway.admission.scheduler``): weighted round robin over keys
(a key holding nothing of the backend joining ahead of the waiting keys that hold some), interactive
requests before batch ones, FIFO within a key, a waiter that doesn't fit passed by one that does
(only the first :data:`SCAN_DEPTH` of a key's queue are looked at), a waiter passed ``bypass_limit``
times guarded with the EASY-backfilling reservation of
:meth:`~gateway.admission.capacity.Capacity.spares`; agent session holds as the scheduler keeps them
(a released turn holds its prompt ``hold_ms``; a cold long waiter that would evict another session's
hold waits, ``held``, while the held session's next turn is resumed first; a grant cuts the holds
the pool has no room left for), on Redis's clock, so every replica sees one set of holds.
A grant is published on ``grant:<replica>`` as ``"<ticket> <fence>"``; a replica that missed it
finds it in ``g`` at its next renewal.

Every script's ARGV starts with the capacity, ``slots, kv_budget_tokens (-1: none), long_slots,
ttl_ms, bypass_limit, hold_ms`` (0: no holds), and returns a JSON object: ``result`` plus the backend's
totals (``seq``, ``kv``, ``long``, ``waiting``, ``in_flight`` and ``queued`` by key) and ``holds``
(``[session, key, tokens, ms left]``, most recently used first). Redis's cjson writes an empty
table as ``{}``, so an empty list or object of an answer may be either.
"""

from __future__ import annotations

from gateway.admission.scheduler import HOLDS_PER_KEY

#: Tickets of one key looked at for passing, from the head of its queue.
SCAN_DEPTH = 64

_PRELUDE = """
local P = KEYS[1]
local H, HX, T, TX, R, C, K, G, F, GD, PX, HS, HO =
  P..'h', P..'hx', P..'t', P..'tx', P..'r', P..'c', P..'k', P..'g', P..'f', P..'gd', P..'px', P..'hs', P..'ho'
local cap = {slots = tonumber(ARGV[1]), kv = tonumber(ARGV[2]), long = tonumber(ARGV[3]),
             ttl = tonumber(ARGV[4]), bypass = tonumber(ARGV[5]), hold = tonumber(ARGV[6])}
local now = (function() local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end)()

local function blocker(held, need)
  if held.seq + need.seq > cap.slots then return 'slot' end
  if need.long == 1 and held.long + 1 > cap.long then return 'lane' end
  if cap.kv >= 0 and held.kv + need.kv > cap.kv then return 'kv' end
  return false
end

-- the session holds (the in-process scheduler's _held_tokens, _hold, _evict_holds): the live ones,
-- least recently used first, each {session, key, tokens, since}; the ended ones dropped
local function drop_hold(session) redis.call('HDEL', HS, session); redis.call('ZREM', HO, session) end

local function live_holds()
  local list = {}
  for _, session in ipairs(redis.call('ZRANGE', HO, 0, -1)) do
    local h = cjson.decode(redis.call('HGET', HS, session))
    if h.since + cap.hold <= now then drop_hold(session)
    else h.session = session; list[#list + 1] = h end
  end
  return list
end

local function hold(h)  -- the prompt a turn of session h.session leaves, kept for its next turn
  drop_hold(h.session)
  local mine = {}
  for _, x in ipairs(live_holds()) do if x.key == h.key then mine[#mine + 1] = x.session end end
  for i = 1, #mine - __HOLDS_PER_KEY__ + 1 do drop_hold(mine[i]) end
  redis.call('HSET', HS, h.session, cjson.encode({key = h.key, tokens = h.footprint, since = now}))
  redis.call('ZADD', HO, redis.call('INCR', P..'hn'), h.session)
end

local function evict_holds(held)  -- cut what the running requests leave no room for, LRU first, from its end
  if cap.kv < 0 then return end
  local hs, over = live_holds(), held.kv - cap.kv
  for _, h in ipairs(hs) do over = over + h.tokens end
  for _, h in ipairs(hs) do
    if over <= 0 then return end
    if h.tokens > over then
      local cut = {key = h.key, tokens = h.tokens - over, since = h.since}
      redis.call('HSET', HS, h.session, cjson.encode(cut))
      return
    end
    over = over - h.tokens
    drop_hold(h.session)
  end
end

-- blocker, and 'held' for a long waiter that would evict another session's held prefix, until it
-- has waited a hold's length
local function held_blocker(held, t, hs)
  local reason = blocker(held, t)
  if reason or t.long ~= 1 or cap.kv < 0 or #hs == 0 or now - t.enq >= cap.hold then return reason end
  local kept = 0
  for _, h in ipairs(hs) do if h.session ~= t.session then kept = kept + h.tokens end end
  if held.kv + t.kv + kept > cap.kv then return 'held' end
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
  return h
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
                                             ticket = ticket, replica = t.replica,
                                             session = t.session, footprint = t.footprint}))
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

local function pick(list, held, hs, gticket, gt)
  local passed, chosen, ct = {}, nil, nil
  for batch = 0, 1 do  -- interactive waiters first, then batch ones
    for _, key in ipairs(redis.call('LRANGE', R, 0, -1)) do
      local tickets = redis.call('LRANGE', P..'q:'..key, 0, __SCAN_DEPTH__ - 1)
      if tickets[1] and key_free(waiter(tickets[1])) then
        for _, ticket in ipairs(tickets) do
          local t = waiter(ticket)
          if (t.b or 0) == batch then
            if ticket == gticket or held_blocker(held, t, hs) then passed[#passed + 1] = {ticket, t}
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

-- the waiting next turn of a held session that fits, the most recently used session first, while a
-- waiter is held back by the holds (the in-process scheduler's _resumed); nil once one has waited a
-- hold's length or is guarded
local function resumed(held, hs)
  if #hs == 0 or cap.kv < 0 or redis.call('EXISTS', GD) == 1 then return nil end
  local room = cap.kv - held.kv
  for _, h in ipairs(hs) do room = room - h.tokens end
  local turns, held_back = {}, false
  for _, key in ipairs(redis.call('LRANGE', R, 0, -1)) do
    for _, ticket in ipairs(redis.call('LRANGE', P..'q:'..key, 0, -1)) do
      local t = waiter(ticket)
      if now - t.enq >= cap.hold then return nil end
      if t.session and not turns[t.session] then turns[t.session] = {ticket, t} end
      if not held_back and t.kv > room then held_back = held_blocker(held, t, hs) == 'held' end
    end
  end
  if not held_back then return nil end
  for i = #hs, 1, -1 do
    local turn = turns[hs[i].session]
    if turn and turn[2].enq >= hs[i].since and key_free(turn[2]) and not held_blocker(held, turn[2], hs) then
      return turn[1], turn[2]
    end
  end
  return nil
end

-- the expired leases and tickets gone, grant while a waiter fits
local function dispatch()
  purge()
  local list, held = holders()
  local hs = live_holds()
  while redis.call('HLEN', T) > 0 and held.seq < cap.slots do
    local ticket, t = resumed(held, hs)
    if not ticket then
      local gticket, gt = guard()
      if gt and key_free(gt) and not held_blocker(held, gt, hs) then ticket, t = gticket, gt
      else ticket, t = pick(list, held, hs, gticket, gt) end
    end
    if not ticket then break end
    list[#list + 1] = grant(ticket, t)
    held = plus(held, t, 1)
    if t.session then drop_hold(t.session) end  -- its turn came: the prefix is this request's now
    evict_holds(held)
    hs = live_holds()
  end
  return list, held, hs
end

-- what a queued ticket waits for, its place (grants before it, 1 = next), and for a held-back one
-- the ms until its hold-back ends
local function describe(ticket, t, list, held, hs)
  local reason
  if not key_free(t) then reason = 'key_concurrency' else reason = held_blocker(held, t, hs) end
  local gticket, gt = guard()
  if not reason and gt and ticket ~= gticket and not spares(list, held, gt, t) then reason = 'reserved' end
  local keys = redis.call('LRANGE', R, 0, -1)
  local turn = 0
  for i, key in ipairs(keys) do if key == t.key then turn = i end end
  local index = redis.call('LPOS', P..'q:'..t.key, ticket) or 0
  local place = index * math.max(1, #keys) + turn
  if reason == 'held' then return {reason, place, t.enq + cap.hold - now} end
  return {reason or 'slot', place}
end

local function answer(result, held)
  local in_flight, queued = {}, {}
  local flat = redis.call('HGETALL', K)
  for i = 1, #flat, 2 do in_flight[flat[i]] = tonumber(flat[i + 1]) end
  for _, key in ipairs(redis.call('LRANGE', R, 0, -1)) do queued[key] = redis.call('LLEN', P..'q:'..key) end
  local holds = {}
  for _, h in ipairs(live_holds()) do  -- most recently used first, each's ms left
    table.insert(holds, 1, {h.session, h.key, h.tokens, h.since + cap.hold - now})
  end
  return cjson.encode({result = result, seq = held.seq, kv = held.kv, long = held.long,
                       waiting = redis.call('HLEN', T), in_flight = in_flight, queued = queued,
                       holds = holds})
end
""".replace("__SCAN_DEPTH__", str(SCAN_DEPTH)).replace("__HOLDS_PER_KEY__", str(HOLDS_PER_KEY))

ENQUEUE = (
    _PRELUDE
    + """
-- ARGV[7] ticket, ARGV[8] waiter JSON (without enq, passes), ARGV[9] queue_max,
-- ARGV[10] queue_max_per_key (-1: none), ARGV[11] reserve
-- result: {"full": "total"|"key"} | {"fence": n} | {"queued": [reason, place(, ms held back)]}
purge()
local ticket, t = ARGV[7], cjson.decode(ARGV[8])
local queue_max, per_key, reserve = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local waits = redis.call('LLEN', P..'q:'..t.key)
local _, held_before = holders()
t.enq = now
local runs_now = redis.call('LLEN', R) == 0 and key_free(t) and not held_blocker(held_before, t, live_holds())
if not runs_now then  -- the queue's bounds hold for a request that would wait (as in-process)
  local bound = queue_max
  if waits > 0 then bound = queue_max - reserve end
  if redis.call('HLEN', T) >= bound then
    return answer({full = waits > 0 and 'key' or 'total'}, held_before)
  end
  if per_key >= 0 and waits >= per_key then return answer({full = 'key'}, held_before) end
end
t.passes, t.order = 0, redis.call('INCR', P..'o')
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
local list, held, hs = dispatch()
local fence = redis.call('HGET', G, ticket)
if fence then return answer({fence = tonumber(fence)}, held) end
return answer({queued = describe(ticket, t, list, held, hs)}, held)
"""
)

RELEASE = (
    _PRELUDE
    + """
-- ARGV[7] fence, ARGV[8] ticket; result: true if it was held (false: released before, or expired).
-- A turn of a session that ran leaves its prompt held (a grant given back unused holds nothing).
local h = drop_holder(ARGV[7], ARGV[8])
if h and h.session and (h.footprint or 0) > 0 and cap.hold > 0 then hold(h) end
local _, held = dispatch()
return answer(h ~= false, held)
"""
)

ABANDON = (
    _PRELUDE
    + """
-- ARGV[7] ticket: out of its queue, or the grant it got back; result: true if anything was given up
local ticket = ARGV[7]
local t = waiter(ticket)
local gave = false
if t then unqueue(ticket, t); gave = true
else
  local fence = redis.call('HGET', G, ticket)
  if fence then gave = drop_holder(fence, ticket) ~= false end
end
local _, held = dispatch()
return answer(gave, held)
"""
)

RENEW = (
    _PRELUDE
    + """
-- ARGV[7] n: then n (fence, ticket) pairs held, then the tickets waiting, all of one replica.
-- Extends each one's expiry; result: {"lost": [fences no longer held], "granted": {ticket: fence},
-- "queued": {ticket: [reason, place]}, "gone": [tickets neither queued nor granted]}
local n = tonumber(ARGV[7])
local lost, granted, gone = {}, {}, {}
for i = 8, 6 + 2 * n, 2 do
  local raw = redis.call('HGET', H, ARGV[i])
  if raw and cjson.decode(raw).ticket == ARGV[i + 1] then redis.call('ZADD', HX, now + cap.ttl, ARGV[i])
  else lost[#lost + 1] = tonumber(ARGV[i]) end
end
for i = 8 + 2 * n, #ARGV do
  if redis.call('HEXISTS', T, ARGV[i]) == 1 then redis.call('ZADD', TX, now + cap.ttl, ARGV[i]) end
end
local list, held, hs = dispatch()
local queued = {}
for i = 8 + 2 * n, #ARGV do
  local ticket = ARGV[i]
  local t = waiter(ticket)
  local fence = redis.call('HGET', G, ticket)
  if t then queued[ticket] = describe(ticket, t, list, held, hs)
  elseif fence then granted[ticket] = tonumber(fence)
  else gone[#gone + 1] = ticket end
end
return answer({lost = lost, granted = granted, queued = queued, gone = gone}, held)
"""
)

MOVE_HOLD = (
    _PRELUDE
    + """
-- ARGV[7] 'take' | 'adopt', ARGV[8] session, ARGV[9] key, ARGV[10] tokens: take the session's hold
-- (its next turn runs on another backend), or adopt one from another backend, held from now.
-- result: the tokens the hold taken kept (0: none; 0 for adopt)
local session, kept = ARGV[8], 0
if ARGV[7] == 'take' then
  for _, h in ipairs(live_holds()) do if h.session == session then kept = h.tokens end end
  drop_hold(session)
elseif cap.hold > 0 and tonumber(ARGV[10]) > 0 then
  hold({session = session, key = ARGV[9], footprint = tonumber(ARGV[10])})
  local _, running = holders()
  evict_holds(running)
end
local _, held = dispatch()
return answer(kept, held)
"""
)
