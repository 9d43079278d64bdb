-- ngx-ratelimit: one request checked against all its rules in Redis,
-- atomically (a script runs alone).  The transitions are the C++ core's
-- (core/src/algorithms/), line for line, each algorithm's functions
-- together below its file's name, with the same integer arithmetic: Lua 5.1
-- numbers are doubles, exact for integers below 2^53, and a Redis zone's
-- rules are bounded at configuration time (limit x period <= 2^50 units, see
-- rl_redis_rule_ok) so every quantity here stays exact.  Divisions go
-- through fdiv, which corrects the rounded quotient.
--
-- Redis 7 and later (and Valkey) load it once as a library (FUNCTION
-- LOAD; rl_redis_load_command names it) and call its function run with
-- FCALL: its functions and tables are then set up once, not at each call.
-- Redis 6 runs it as a script (EVALSHA, EVAL), which ends with the call.
--
-- ARGV: now ("" = Redis's TIME), the call, then per rule: its spec (the
-- parameters the same for its every request: algorithm, limit, burst,
-- period_ms, align, buckets, max_delay_ms, reset, utc_offset_min, delay,
-- ban_ms, charge (1: the rule has charge=), lease (concurrency: lease= in
-- ms), in one argument) and its request's: "cost" (a settle: what the
-- admission reserved), or where any of the others is not 0 or empty, "cost
-- share since full lease_name" (share, charge=: what an admission reserves
-- at least, within what the key has left; since, an override's: when the
-- rule's limits as applied began; full, concurrency, a decision: 1 if the
-- request's server holds `limit` of the key's requests in flight already,
-- some of which Redis may not hold: the rule refuses it; lease_name,
-- concurrency: the lease a decision takes, a release, renewal or restore
-- names); a settle adds the units to spend (-1: the reservation stands),
-- and the head's t after its admission and when it was decided (what
-- giving its reservation back needs).  KEYS: each rule's state, then the
-- ban of each rule with ban= (not for a settle), then, for a decision or a
-- settle, the reservations in flight of each rule with charge= (the units
-- its key's admitted requests reserved and did not settle yet).
--
-- The calls:
--   0, 1   decide the request (combine all, any): commit every consuming
--          rule or none, ban the key for each ban= rule that refused it;
--   2, 3   the same for a dry run, which bans nobody.
--          Returns {allowed, now, then per rule: allowed, never, remaining,
--          reset_ms, retry_after_ms, delay_ms, window_ms, available_ms,
--          banned_ms, after, reserved, banning} (after: the head's t once
--          committed, else 0; reserved: the units the decision was made
--          for, its cost or a charge= rule's reservation; banning: 1 if
--          the refusal starts a ban, or would in a dry run, 2 if only the
--          key's reservations in flight refused it (no ban); the policy the
--          headers advertise is the core's: rl_redis_answer checks the
--          reply against each rule and concludes with it).
--   peek   decides every rule on its state as it is and writes nothing (a
--          ban shows in banned_ms, and refuses a cost above 0); each rule's
--          answer has one more item: a concurrency rule's live leases
--          whose names start with its lease_name (a server's "SERVER:"),
--          else 0.
--   reset  deletes each rule's state and ban: {1, then per rule: 1 if it
--          had a state, plus 2 if a ban was lifted}.
--   settle a request ends (charge=): each rule gives back the cost its
--          admission reserved and spends the charge instead, even into debt
--          (settle.cpp), and takes it off the key's reservations in flight:
--          {1, then per rule: units charged, 1 if the key is in debt after
--          it, 1 if the debt's bound capped it}.
--   release, renew, restore  concurrency: each rule's lease removed, or
--          its deadline moved to lease= from now (renew: one expired
--          already is not taken again; restore: it is written whatever,
--          its request runs): {1, leases that were live, leases found
--          expired (or written again)}.
--
-- State: gcra, token_bucket, leaky_bucket keep a string "t n l p" (the
-- instant t + n/l ms, l and p the limit and period it was written in: a
-- request under others keeps the units the key owes, exact_time.h); fixed_window and quota
-- "t n" (the core's head, n with CARRIED when a charge's excess is counted
-- in the window ending t); sliding_window a string "tick c0 ... cS" (its
-- block), and with charge= the instant the key owes until; sliding_log a
-- list of the admitted units' times, oldest first; concurrency a sorted
-- set of leases (their names scored by their deadlines); a ban the
-- instant it ends.  Every write sets the key to expire 1 ms after the state is back to
-- full budget (a ban when it ends), so Redis holds active keys only.


-- the libraries' functions the script calls most, bound when it first runs:
-- a library's code, as Redis Functions load it, sees none of them
local floor, format

local KMAX = 4611686018427387904   -- 2^62, exact_time.h's kUnitsMax
local DAY = 86400000
local CARRIED = 2147483648         -- 2^31, algorithms.h's kCarried


local function fdiv(a, b)   -- floor(a / b), exact; b > 0
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end

local function cdiv(a, b) return fdiv(a + b - 1, b) end   -- a >= 0

local function tdiv(a, b)   -- C's truncating division; b > 0
  if a >= 0 then return fdiv(a, b) end
  return -fdiv(-a, b)
end

-- an integer's digits (below 2^63), those below 1024 made once (a ring's
-- counts, short expiries): Lua's own (%.14g) and Redis's for a number
-- argument (%.17g) cost a float's formatting
local nums = {}
local function num(x)
  local v = nums[x]
  if v then return v end
  v = format('%d', x)
  if x >= 0 and x < 1024 then nums[x] = v end
  return v
end

local function decision(window)
  return {allowed = 0, never = 0, remaining = 0, reset = 0, retry = 0, delay = 0, window = window, available = 0,
          banned = 0}
end

local function never(window, remaining, reset)
  local d = decision(window)
  d.never = 1
  d.remaining = remaining
  d.reset = reset
  d.retry = reset > 1000 and reset or 1000
  d.available = reset
  return d
end

-- ---- storing: a state expires 1 ms after it is back to full budget ----------

local function expire_in(at, now, testing)
  local ttl = at + 1 - now
  if ttl < 1 then ttl = 1 end
  -- a test's clock runs apart from Redis's: keep its keys a day longer so
  -- that none expires early on the trace's clock
  if testing then ttl = ttl + DAY end
  return num(ttl)
end

-- a key's string: v as the call's MGET read it (false: no key), or, nil,
-- read now
local function string_at(key, v)
  if v == nil then return redis.call('GET', key) end
  return v
end

-- a head from its string (v: string_at's)
local function load_head(key, v)
  v = string_at(key, v)
  if not v then return {t = 0, n = 0} end
  local t, n, l, p = string.match(v, '^(%-?%d+) (%d+) ?(%d*) ?(%d*)$')
  if not t then return {t = 0, n = 0} end
  l = l ~= '' and l + 0 or nil   -- (a number from its digits, as tonumber)
  p = p ~= '' and p + 0 or nil
  if l == 0 then l = nil end
  if p == 0 then p = nil end
  return {t = t + 0, n = n + 0, l = l, p = p}
end

local function store_head(key, h, now, testing)
  local v
  if h.l and h.p then
    v = format('%d %d %d %d', h.t, h.n, h.l, h.p)
  elseif h.l or h.p then
    v = format('%d %d %d', h.t, h.n, h.l or h.p)
  else
    v = format('%d %d', h.t, h.n)
  end
  redis.call('SET', key, v, 'PX', expire_in(h.t, now, testing))
end

local function push_times(key, v, n)
  while n > 0 do   -- unpack has a stack limit: push in chunks
    local chunk = {}
    for i = 1, (n < 1000 and n or 1000) do chunk[i] = v end
    redis.call('RPUSH', key, unpack(chunk))
    n = n - #chunk
  end
end

-- ---- the algorithms: r is the rule, h a head {t, n, l} ------------------------
--
-- A head's transition returns the decision, and the head to store if the
-- request is admitted; its charge the units charged, capped, and the head;
-- its refund the head.  A block's (sliding_window's ring, sliding_log's
-- list) are given the block, and change it in place.

-- exact_time.h, paced.cpp: an instant t + n/limit ms, in units of 1/limit
-- ms (gcra, token_bucket, leaky_bucket)

local function units_ahead(h, now, limit)
  if h.t < now then return 0 end
  local ms = h.t - now
  if ms >= floor(KMAX / limit) then return KMAX end
  return ms * limit + h.n
end

local function instant_after(now, u, limit)
  local q = fdiv(u, limit)
  return {t = now + q, n = u - q * limit, l = limit}
end

-- a paced head written under the rule's limit and period as applied
local function paced_after(now, u, r)
  local h = instant_after(now, u, r.limit)
  h.p = r.period
  return h
end

-- overrides (paced.cpp's paced_carry): a head written under another limit
-- or period than the rule's as applied was written before they changed, at
-- r.since (the override's writing, or its end; 0: not known, now): the units
-- it owed then, U x period units of 1/limit ms, written again under the
-- rule's (scaled by the periods, rounded up: a change forgives nothing)
local function paced_carry(r, h, now)
  local l, p = h.l or r.limit, h.p or r.period
  if h.t == 0 or (l == r.limit and p == r.period) then return h end
  local at = r.since > 0 and r.since or now
  local u = units_ahead(h, at, l)
  if p ~= r.period and u > 0 then
    if u * r.period < 9007199254740992 then u = cdiv(u * r.period, p) else u = math.ceil(u / p * r.period) end
  end
  return paced_after(at, u, r)
end

-- the instant moves by the charge's time, at most to (burst + limit) x T
-- ahead
local function paced_charge(r, h, now, units)
  local T = r.period
  local most = (r.burst + r.limit) * T
  local ahead = units_ahead(h, now, h.l or r.limit)
  local room = ahead < most and fdiv(most - ahead, T) or 0
  local add = units < room and units or room
  if add > 0 then h = paced_after(now, ahead + add * T, r) end
  return add, add < units, h
end

-- the cost an admission reserved, given back: the instant moves back, never
-- to before now
local function paced_refund(r, h, now, cost)
  local ahead = units_ahead(h, now, h.l or r.limit)
  local back = cost * r.period
  return paced_after(now, ahead > back and ahead - back or 0, r)
end

-- gcra.h, gcra.cpp: gcra, and token_bucket (a bucket of burst tokens
-- refilled at limit per period is GCRA with tau = burst * T, the same
-- admissions)

local function gcra(r, h, now, cost)
  local T = r.period
  local tau = r.burst * T
  local ahead = units_ahead(h, now, h.l or r.limit)
  local room = ahead < tau and tau - ahead or 0
  if cost > r.burst then return never(r.period, fdiv(room, T), cdiv(ahead, r.limit)) end
  local need = ahead + cost * T
  local d = decision(r.period)
  if need <= tau or cost == 0 then
    d.allowed = 1
    d.remaining = fdiv(need <= tau and tau - need or 0, T)
    d.reset = cdiv(need, r.limit)
    d.available = need > 0 and cdiv(need + (d.remaining + 1) * T - tau, r.limit) or 0
    if cost > 0 then return d, paced_after(now, need, r) end
  else
    d.remaining = fdiv(room, T)
    d.reset = cdiv(ahead, r.limit)
    d.retry = cdiv(need - tau, r.limit)
    d.available = d.retry
  end
  return d
end

-- leaky_bucket.cpp: the shaper

local function headroom(queued, most, T, limit, d)
  d.remaining = queued <= most and fdiv(most - queued, T) + 1 or 0
  local more = queued + d.remaining * T - most
  d.available = cdiv(more < queued and more or queued, limit)
end

local function leaky_bucket(r, h, now, cost)
  local T = r.period
  local served = r.delay * T
  local most = served + r.max_delay * r.limit
  local wait = units_ahead(h, now, h.l or r.limit)
  if cost > r.limit then return never(r.period, 0, cdiv(wait, r.limit)) end
  local d = decision(r.period)
  if cost == 0 then
    d.allowed = 1
    d.reset = cdiv(wait, r.limit)
    headroom(wait, most, T, r.limit, d)
    return d
  end
  if wait > most then
    d.reset = cdiv(wait, r.limit)
    d.retry = cdiv(wait - most, r.limit)
    d.available = d.retry
    return d
  end
  local drain = wait + cost * T
  d.allowed = 1
  d.delay = wait > served and cdiv(wait - served, r.limit) or 0
  local released = d.delay * r.limit
  local queued = drain > released and drain - released or 0
  d.reset = cdiv(queued, r.limit)
  headroom(queued, most, T, r.limit, d)
  return d, paced_after(now, drain, r)
end

-- fixed_window.cpp: a count in a window (fixed_window, quota)

-- units spent in the window ending wend; a head whose n
-- has CARRIED and whose window lies ahead counts a charge's excess there,
-- and the window before it (this one) is full
local function windowed_count(r, h, now, cost, wend, window)
  if h.n >= CARRIED and h.t > wend then
    local owed = h.n - CARRIED
    local back = h.t - now
    if cost > r.limit then return never(window, 0, back) end
    local d = decision(window)
    d.reset = back
    d.available = owed < r.limit and wend - now or back
    if cost == 0 then
      d.allowed = 1
    else
      d.retry = owed + cost <= r.limit and wend - now or back
      d.available = d.retry
    end
    return d
  end
  if h.t > wend then wend = h.t end
  -- a head whose window has not ended and ends before this one's was
  -- counted under another period (an override's): owed in this window
  local counted = h.t == wend or (h.t > now and h.t < wend)
  local spent = counted and (h.n >= CARRIED and h.n - CARRIED or h.n) or 0
  local left = spent < r.limit and r.limit - spent or 0
  local to_end = wend - now
  if cost > r.limit then return never(window, left, spent > 0 and to_end or 0) end
  local d = decision(window)
  if cost <= left then
    d.allowed = 1
    d.remaining = left - cost
    d.reset = spent + cost > 0 and to_end or 0
    d.available = d.reset
    if cost > 0 then return d, {t = wend, n = spent + cost} end
  else
    d.remaining = left
    d.reset = to_end
    d.retry = to_end
    d.available = to_end
  end
  return d
end

-- fixed_window, quota: what the window cannot hold is counted in the next,
-- at most a limit
local function windowed_charge(r, h, units, wend, nxt)
  local limit = r.limit
  if h.n >= CARRIED and h.t > wend then
    local owed = h.n - CARRIED
    local add = owed < limit and (units < limit - owed and units or limit - owed) or 0
    return add, add < units, {t = h.t, n = owed + add + CARRIED}
  end
  if h.t > wend then   -- the clock stepped back: the later window
    nxt = h.t + (nxt - wend)
    wend = h.t
  end
  local spent = h.t == wend and (h.n >= CARRIED and h.n - CARRIED or h.n) or 0
  local room = spent < limit and limit - spent or 0
  if units <= room then return units, false, {t = wend, n = spent + units} end
  local excess = units - room
  local carry = excess < limit and excess or limit
  return room + carry, excess > limit, {t = nxt, n = carry + CARRIED}
end

-- the cost an admission reserved, given back: uncounted if the head is
-- still that window's, or taken off what a charge carried past it
local function window_refund(r, h, now, cost, after)
  if h.t == after then
    return {t = h.t, n = h.n - (cost < h.n and cost or h.n)}
  elseif h.n >= CARRIED and h.t > after then
    local carried = h.n - CARRIED
    return {t = h.t, n = carried - (cost < carried and cost or carried) + CARRIED}
  end
  return h
end

-- the window a unit spent now is counted in: its end, length, and the end
-- of the window after it
local function fixed_window_span(r, h, now)
  local wend
  if r.align == 1 then
    wend = h.t > now and h.t or now + r.period
    if h.n >= CARRIED and h.t - r.period > now then wend = h.t - r.period end
  else
    wend = fdiv(now, r.period) * r.period + r.period
  end
  return wend, r.period, wend + r.period
end

local function fixed_window(r, h, now, cost)
  local wend, window = fixed_window_span(r, h, now)
  return windowed_count(r, h, now, cost, wend, window)
end

local function fixed_window_charge(r, h, now, units)
  local wend, _, nxt = fixed_window_span(r, h, now)
  return windowed_charge(r, h, units, wend, nxt)
end

-- quota.cpp, calendar.cpp (Howard Hinnant's algorithms): the calendar's
-- periods

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = tdiv(y >= 0 and y or y - 399, 400)
  local yoe = y - era * 400
  local doy = fdiv(153 * (m > 2 and m - 3 or m + 9) + 2, 5) + d - 1
  local doe = yoe * 365 + fdiv(yoe, 4) - fdiv(yoe, 100) + doy
  return era * 146097 + doe - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = tdiv(z >= 0 and z or z - 146096, 146097)
  local doe = z - era * 146097
  local yoe = fdiv(doe - fdiv(doe, 1460) + fdiv(doe, 36524) - fdiv(doe, 146096), 365)
  local doy = doe - (365 * yoe + fdiv(yoe, 4) - fdiv(yoe, 100))
  local mp = fdiv(5 * doy + 2, 153)
  local m = mp < 10 and mp + 3 or mp - 9
  return yoe + era * 400 + (m <= 2 and 1 or 0), m
end

-- the calendar period holding now: its end and length
local function quota_period(r, now)
  local offset = r.utc_offset * 60000
  local day = fdiv(now + offset, DAY)
  local first, nxt
  if r.reset == 1 then
    first = day - (day + 3) % 7
    nxt = first + 7
  elseif r.reset == 2 then
    local y, m = civil_from_days(day)
    first = days_from_civil(y, m, 1)
    if m == 12 then nxt = days_from_civil(y + 1, 1, 1) else nxt = days_from_civil(y, m + 1, 1) end
  else
    first = day
    nxt = day + 1
  end
  local start, wend = first * DAY - offset, nxt * DAY - offset
  return wend, wend - start
end

local function quota_span(r, now)
  local wend, window = quota_period(r, now)
  return wend, window, (quota_period(r, wend))
end

local function quota(r, h, now, cost)
  local wend, window = quota_period(r, now)
  return windowed_count(r, h, now, cost, wend, window)
end

local function quota_charge(r, h, now, units)
  local wend, _, nxt = quota_span(r, now)
  return windowed_charge(r, h, units, wend, nxt)
end

-- sliding_window.cpp

-- sliding_window: b = {tick, c = {[0..S]}, owed}, tick j counted at
-- j % (S + 1); owed (charge=): until when the key owes what a charge put
-- beyond the limit.  The ring's arithmetic takes the ring, S (r.buckets)
-- and W (r.period).

-- tick j's count, and xc more if j is xk (a cost counted ahead)
local function ring_count(b, S, j, xk, xc)
  local x = j == xk and xc or 0
  if j > b.tick or j <= b.tick - (S + 1) then return x end
  return x + b.c[j % (S + 1)]
end

-- the S ticks to k, summed
local function ring_newest(b, S, k)
  local c, t, n, sum = b.c, b.tick, S + 1, 0
  for j = k - S + 1, k do
    if j <= t and j > t - n then sum = sum + c[j % n] end
  end
  return sum
end

local function ring_used(b, S, W, k, e, sum)
  return sum * W + ring_count(b, S, k - S, 0, 0) * (W - e)
end

local function ring_full_at(S, W, j) return cdiv((j + 1 + S) * W, S) end

local function ring_admissible_at(r, b, S, W, k, newer, from, want, xk, xc)
  local cap = r.limit * W
  local j = k
  while true do
    local fixed = (newer + want) * W
    if fixed <= cap then
      local room = cap - fixed
      local old = ring_count(b, S, j - S, xk, xc)
      local e = 0
      if old > 0 and fdiv(room, old) < W then e = W - fdiv(room, old) end
      local at = cdiv(j * W + e, S)
      if at * S < (j + 1) * W then return at > from and at or from end
    end
    newer = newer - ring_count(b, S, j - S + 1, xk, xc)
    j = j + 1
  end
end

-- the ring moved on to tick k, the ticks it skips zeroed
local function ring_advance(b, S, k)
  if b.tick < k then
    local j = b.tick + 1
    while j <= k and j <= b.tick + S + 1 do b.c[j % (S + 1)] = 0; j = j + 1 end
    b.tick = k
  end
end

-- an admission of cost at tick k counted in the ring
local function ring_add(b, S, W, k, cost)
  ring_advance(b, S, k)
  b.c[k % (S + 1)] = b.c[k % (S + 1)] + cost
  b.expire = ring_full_at(S, W, k)
end

local function sliding_window_counted(r, b, now, cost, apply)
  local S, W = r.buckets, r.period
  local k = fdiv(now * S, W)
  local e = now * S - k * W
  if b.tick > k then k = b.tick; e = 0 end
  local cap = r.limit * W
  local sum = ring_newest(b, S, k)
  local u = ring_used(b, S, W, k, e, sum)
  local reset = 0
  if b.tick > k - (S + 1) and u ~= 0 then reset = ring_full_at(S, W, b.tick) - now end
  if cost > r.limit then
    return never(r.period, fdiv(cap - (u < cap and u or cap), W), reset)
  end
  local d = decision(r.period)
  local spend = cost * W
  if u + spend <= cap then
    d.allowed = 1
    d.remaining = fdiv(cap - u - spend, W)
    d.reset = cost > 0 and ring_full_at(S, W, k) - now or reset
    d.available = u + spend > 0 and ring_admissible_at(r, b, S, W, k, sum + cost, now + 1, d.remaining + 1, k, cost) - now
                  or 0
    -- the tick an admission counts in (sliding_window_commit)
    b.admit_at = cost > 0 and k
    if apply and cost > 0 then ring_add(b, S, W, k, cost) end
  else
    b.admit_at = false
    d.remaining = u < cap and fdiv(cap - u, W) or 0
    d.reset = reset
    d.retry = ring_admissible_at(r, b, S, W, k, sum, now + 1, cost, 0, 0) - now
    d.available = d.retry
  end
  return d
end

-- a key that owes what a charge put beyond the limit is refused until it
-- has paid, then decided on its window as it is then
local function sliding_window(r, b, now, cost, apply)
  local owed = b.owed
  if owed <= now or cost == 0 then
    local d = sliding_window_counted(r, b, now, cost, apply)
    if owed > now then
      d.remaining = 0
      if owed - now > d.reset then d.reset = owed - now end
      d.available = owed - now
    end
    return d
  end
  local th = sliding_window_counted(r, b, owed, cost, false)
  b.admit_at = false   -- (a refusal)
  if cost > r.limit then return never(r.period, 0, owed - now + th.reset) end
  local d = decision(r.period)
  d.reset = owed - now + th.reset
  d.retry = owed - now + (th.allowed == 1 and 0 or th.retry)
  d.available = d.retry
  return d
end

-- sliding_window: the charge counts in the window (the ring at most twice
-- the limit); what it counts beyond the limit is owed once the window has
-- slid past it, at limit per period, at most a period
local function sliding_window_charge(r, b, now, units)
  local S, W = r.buckets, r.period
  local k = fdiv(now * S, W)
  local e = now * S - k * W
  if b.tick > k then k = b.tick; e = 0 end
  ring_advance(b, S, k)
  local sum = ring_newest(b, S, k)
  local total = 0
  for j = 0, S do total = total + b.c[j] end
  local most = 2 * r.limit
  local add = total < most and (units < most - total and units or most - total) or 0
  b.c[k % (S + 1)] = b.c[k % (S + 1)] + add
  local counted = fdiv(ring_used(b, S, W, k, e, sum) + add * W + W - 1, W)
  local full = ring_full_at(S, W, k)
  if counted > r.limit then
    local owed = (b.owed > full and b.owed or full) + cdiv((counted - r.limit) * W, r.limit)
    b.owed = owed < full + W and owed or full + W
  end
  return add, add < units or counted - r.limit > r.limit, b
end

local function sliding_window_refund(r, b, now, cost, after, at)
  local S, W = r.buckets, r.period
  local k = fdiv(at * S, W)
  if k > b.tick or k <= b.tick - (S + 1) then return b end
  local i = k % (S + 1)
  b.c[i] = b.c[i] - (cost < b.c[i] and cost or b.c[i])
  return b
end

local function load_ring(key, r, now, look, v)
  -- (room for 15 buckets at once: the default is 10)
  local b = {tick = 0, c = {[0] = 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, owed = 0, admit_at = false,
             expire = false}
  v = string_at(key, v)
  local i = -1
  if v then
    local c = b.c
    for x in string.gmatch(v, '%-?%d+') do
      if i < 0 then b.tick = x + 0 else c[i] = x + 0 end
      i = i + 1
    end
  end
  if r.charge == 1 then b.owed = b.c[r.buckets + 1] or 0 end
  b.c[r.buckets + 1] = nil
  for j = 0, r.buckets do b.c[j] = b.c[j] or 0 end
  return b
end

-- a ring and its expiry, in one SET: its S + 2 numbers (S + 3 with
-- charge=), joined (their digits num's, in a list kept between calls)
local ring_parts = {}

local function store_ring(key, r, b, ttl)
  local c, parts, last = b.c, ring_parts, r.buckets
  parts[1] = num(b.tick)
  for j = 0, last do parts[j + 2] = num(c[j]) end
  if r.charge == 1 then
    last = last + 1
    parts[last + 2] = num(b.owed)
  end
  redis.call('SET', key, table.concat(parts, ' ', 1, last + 2), 'PX', ttl)
end

-- an admission: the ring counted, written with its expiry; the head's t.
-- b: the ring as the decision read it, counted where it admitted (nil:
-- read again and decided, as when another rule of the call wrote the key
-- since)
local function sliding_window_commit(key, r, now, testing, b)
  local S, W = r.buckets, r.period
  if b and b.admit_at then
    ring_add(b, S, W, b.admit_at, r.cost)
  else
    b = b or load_ring(key, r)
    sliding_window(r, b, now, r.cost, true)
  end
  if not b.expire then
    -- refused as committed: an earlier rule of the call, of the same name,
    -- filled the ring it was decided on (check.cpp's commit_block does the
    -- same): nothing to write; the instant the ring is back to full budget
    local full = ring_full_at(S, W, b.tick)
    return full > now and full or now
  end
  store_ring(key, r, b, expire_in(b.expire, now, testing))
  return b.expire
end

-- a settled ring, written whole
local function sliding_window_settled(key, r, b, now, testing)
  local full = ring_full_at(r.buckets, r.period, b.tick)
  store_ring(key, r, b, expire_in(b.owed > full and b.owed or full, now, testing))
end

-- sliding_log.cpp: b = {times, oldest first}

-- the log as a request at now finds it: its newest time, the time a unit
-- is logged at (never before the newest), the times that have left the
-- window and those still in it
local function log_window(r, b, now)
  local count = #b.times
  local newest = b.times[count]
  local t = (newest ~= nil and newest > now) and newest or now
  local expired = 0
  while expired < count and b.times[expired + 1] <= t - r.period do expired = expired + 1 end
  return newest, t, expired, count - expired
end

local function sliding_log(r, b, now, cost, apply)
  local W = r.period
  local newest, t, expired, live = log_window(r, b, now)
  local reset = live > 0 and newest + W - now or 0
  local left = live < r.limit and r.limit - live or 0   -- a lowered limit
  if cost > r.limit then return never(W, left, reset) end
  local d = decision(W)
  if live + cost <= r.limit then
    d.allowed = 1
    d.remaining = r.limit - live - cost
    d.reset = cost > 0 and t + W - now or reset
    local oldest = (live > 0 and b.times[expired + 1] or t) + W - now
    d.available = oldest < d.reset and oldest or d.reset
    if apply and cost > 0 then
      b.expired = expired
      b.logged = t
      b.expire = t + W
    end
  else
    d.remaining = left
    d.reset = reset
    d.retry = b.times[expired + live + cost - r.limit] + W - now
    d.available = d.retry
  end
  return d
end

-- an admission of n units (sliding_log(..., true)), made in the list
local function log_commit(b, n)
  local times = {}
  for i = b.expired + 1, #b.times do times[#times + 1] = b.times[i] end
  for _ = 1, n do times[#times + 1] = b.logged end
  b.times = times
end

-- sliding_log: the log holds a limit of units; those beyond it move the
-- whole log later by the time they take to come back, at most a period
local function sliding_log_charge(r, b, now, units)
  local W, L = r.period, r.limit
  local newest, t, _, live = log_window(r, b, now)
  local owed = 0
  if newest ~= nil and newest > now then   -- a log later than now owes already
    owed = cdiv((newest - now) * L, W)
    if owed > L then owed = L end
  end
  local room = (live < L and L - live or 0) + (L - owed)
  local add = units < room and units or room
  if live + add <= L then
    if add > 0 then
      sliding_log(r, b, now, add, true)
      log_commit(b, add)
    end
    return add, add < units, b
  end
  local debt = owed + (live + add - L) - (live > L and live - L or 0)
  if debt > L then debt = L end
  local at = now + cdiv(debt * W, L)
  if at < t then at = t end   -- times never go backwards
  local times = {}
  for i = 1, L do times[i] = at end
  b.times = times
  return add, add < units, b
end

-- removes `cost` of the times logged when the admission was (a period
-- before its head's t), the later ones closing the gap
local function sliding_log_refund(r, b, now, cost, after)
  local at = after - r.period
  local t = b.times
  local e = #t
  while e > 0 and t[e] > at do e = e - 1 end
  local f = e
  while f > 0 and e - f < cost and t[f] == at do f = f - 1 end
  local gone = e - f
  if gone > 0 then
    local n = #t
    for i = e + 1, n do t[i - gone] = t[i] end
    for i = n - gone + 1, n do t[i] = nil end
  end
  return b
end

local function load_log(key)
  local times = redis.call('LRANGE', key, 0, -1)
  for i = 1, #times do times[i] = tonumber(times[i]) end
  return {times = times}
end

-- an admission: the log trimmed and appended to; the head's t
local function sliding_log_commit(key, r, now, testing)
  local b = load_log(key)
  sliding_log(r, b, now, r.cost, true)
  if not b.expire then
    -- refused as committed, as sliding_window_commit's: nothing to write
    local n = #b.times
    return n > 0 and b.times[n] + r.period > now and b.times[n] + r.period or now
  end
  if b.expired == #b.times then
    redis.call('DEL', key)
  elseif b.expired > 0 then
    redis.call('LTRIM', key, b.expired, -1)
  end
  push_times(key, num(b.logged), r.cost)
  redis.call('PEXPIRE', key, expire_in(b.expire, now, testing))
  return b.expire
end

-- a settled log, written whole
local function sliding_log_settled(key, r, b, now, testing)
  redis.call('DEL', key)
  local n = #b.times
  local i = 1
  while i <= n do   -- runs of one time
    local j = i
    while j < n and b.times[j + 1] == b.times[i] do j = j + 1 end
    push_times(key, num(b.times[i]), j - i + 1)
    i = j + 1
  end
  if n > 0 then redis.call('PEXPIRE', key, expire_in(b.times[n] + r.period, now, testing)) end
end

-- concurrency.cpp: a key's slots in flight across the fleet, leases: a
-- sorted set of lease names (a server's worker and its request) scored by
-- their deadlines, Redis's clock plus lease=; the expired ones are dropped
-- before a count (a look drops nothing: it writes nothing), so that a dead
-- server's slots come back within lease= with no one's action

local function load_leases(key, r, now, look)
  if not look then redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now)) end
  return redis.call('ZCOUNT', key, '(' .. num(now), '+inf')
end

local function concurrency(r, held, now, cost)
  -- none free where the request's server holds the limit already (full)
  if r.full == 1 then held = r.limit end
  local d = decision(0)
  d.remaining = held < r.limit and r.limit - held or 0
  if cost == 0 or d.remaining > 0 then
    d.allowed = 1
    if cost > 0 then d.remaining = d.remaining - 1 end
  end
  return d
end

-- the set lives as long as its latest lease
local function lease_expiry(key, deadline, now, testing)
  local want = tonumber(expire_in(deadline, now, testing))
  if redis.call('PTTL', key) < want then redis.call('PEXPIRE', key, num(want)) end
end

-- an admission: the request's lease taken; its deadline
local function lease_commit(key, r, now, testing)
  local deadline = now + r.lease
  local name = r.lease_name ~= '' and r.lease_name or ('unnamed:' .. num(now))
  redis.call('ZADD', key, num(deadline), name)
  lease_expiry(key, deadline, now, testing)
  return deadline
end

-- a look (peek): the live leases of one server, those whose names start
-- with its part (prefix)
local function leases_here(key, prefix, now)
  local n = 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '(' .. num(now), '+inf')) do
    if string.sub(m, 1, #prefix) == prefix then n = n + 1 end
  end
  return n
end

-- a lease released, renewed or restored: 1 if it was live, 0 if it had
-- expired (a renewal does not take it again: its slot may be another's
-- now; a restore writes it, as its request runs)
local function lease_end(key, r, now, testing, call)
  local at = tonumber(redis.call('ZSCORE', key, r.lease_name) or '')
  local live = at and at > now
  if call == 'release' or (call == 'renew' and not live) then
    redis.call('ZREM', key, r.lease_name)
    return live and 1 or 0
  end
  local deadline = now + r.lease
  redis.call('ZADD', key, num(deadline), r.lease_name)
  lease_expiry(key, deadline, now, testing)
  return live and 1 or 0
end

-- ---- the table of the algorithms (registry.cpp), by name -----------------
--
-- head: the state is a head (load_head, store_head); else the algorithm
-- loads its block, commits an admission (the head's t after it) and
-- writes a settled block.

local algorithms = {
  gcra = {head = true, decide = gcra, charge = paced_charge, refund = paced_refund, carry = paced_carry},
  token_bucket = {head = true, decide = gcra, charge = paced_charge, refund = paced_refund, carry = paced_carry},
  fixed_window = {head = true, decide = fixed_window, charge = fixed_window_charge, refund = window_refund},
  sliding_window = {load = load_ring, string = true, decide = sliding_window, charge = sliding_window_charge,
                    refund = sliding_window_refund, commit = sliding_window_commit, settled = sliding_window_settled},
  sliding_log = {load = load_log, decide = sliding_log, charge = sliding_log_charge, refund = sliding_log_refund,
                 commit = sliding_log_commit, settled = sliding_log_settled},
  leaky_bucket = {head = true, decide = leaky_bucket, refund = paced_refund, carry = paced_carry},
  quota = {head = true, decide = quota, charge = quota_charge, refund = window_refund},
  concurrency = {load = load_leases, decide = concurrency, commit = lease_commit, here = leases_here},
}

-- A spec names its algorithm by its number in enum rl_algorithm
-- (ratelimit_rule.h): its name is the constant's, RL_ taken off, in lower
-- case, as embed.sh writes the list below from the header.
local ALGORITHM_NAMES = {}   -- embed.sh: enum rl_algorithm

-- ---- bans (check.cpp) ------------------------------------------------------

local function banned_until(key, now, v)
  v = string_at(key, v)
  v = tonumber(v or '')
  if v and v > now then return v end
  return 0
end

-- ---- reservations in flight (settle.cpp) ------------------------------------

-- how long a key's reservations in flight are kept after its last
-- admission or end (settle.cpp's kFlightHoldMs)
local FLIGHT_HOLD = 3600000

-- the units a key's requests in flight reserved: "units until", none once
-- until has passed (as this call left them, when it wrote them: two rules
-- of one name share them)
local flight_now = {}
local function flight_held(key, now, v)
  if flight_now[key] then return flight_now[key] end
  v = string_at(key, v)
  local held, untl = string.match(v or '', '^(%d+) (%d+)$')
  if held and tonumber(untl) > now then return tonumber(held) end
  return 0
end

local function flight_set(key, held, now, testing)
  flight_now[key] = held > 0 and held or 0
  if held <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, num(held) .. ' ' .. num(now + FLIGHT_HOLD), 'PX',
               num(testing and FLIGHT_HOLD + DAY or FLIGHT_HOLD))
  end
end

-- a refusal while banned, or the one that starts a ban: the key may try
-- again when the ban ends, not before
local function refuse_until(d, ends, now)
  local wait = ends - now
  d.allowed = 0
  d.remaining = 0
  d.delay = 0
  d.banned = wait
  if wait > d.retry then d.retry = wait end
  d.available = d.retry
  if wait > d.reset then d.reset = wait end
end

-- ---- the call --------------------------------------------------------------

-- A rule's parameters, the same for its every request, arrive as one
-- argument (its "spec", rl_redis_command), read into the rule's table
-- once: a library loaded with FUNCTION LOAD keeps the tables between calls
-- (by the rule's place in the call and its spec: 512 at most, then read
-- again), a script (EVAL) reads each call's.  What a request sends and
-- what the call works out is set in the table anew at each call.
local SPEC = {'algorithm', 'limit', 'burst', 'period', 'align', 'buckets', 'max_delay', 'reset', 'utc_offset', 'delay',
              'ban', 'charge', 'lease'}
local kept, nkept = {}, 0

-- ARGV from a: the rule's spec; its request's "cost" (a settle: what the
-- admission reserved), or "cost share since full" and a lease's name where
-- any is not 0 or empty; a settle's units (-1: the reservation stands),
-- after, at
local function rule_at(ARGV, a, i, settle)
  local text = ARGV[a + 1]
  local place = kept[i]
  if not place then
    place = {}
    kept[i] = place
  end
  local r = place[text]
  if not r then
    if nkept == 512 then
      kept, nkept, place = {}, 0, {}
      kept[i] = place
    end
    r = {}
    local j = 0
    for x in string.gmatch(text, '%-?%d+') do
      j = j + 1
      r[SPEC[j]] = x + 0
    end
    r.algorithm = ALGORITHM_NAMES[r.algorithm]
    place[text], nkept = r, nkept + 1
  end
  local req = ARGV[a + 2]
  if string.find(req, ' ', 1, true) then
    local cost, share, since, full, lease = string.match(req, '^(%d+) (%d+) (%-?%d+) (%d) ?(%S*)$')
    r.cost, r.share, r.since, r.full, r.lease_name = cost + 0, share + 0, since + 0, full + 0, lease
  else
    r.cost, r.share, r.since, r.full, r.lease_name = req + 0, 0, 0, 0, ''
  end
  r.bankey, r.flightkey, r.state, r.d, r.committed, r.banned, r.here, r.banning = false, false, false, false, false,
                                                                                   false, false, false
  if settle then
    r.units, r.after, r.at = ARGV[a + 3] + 0, ARGV[a + 4] + 0, ARGV[a + 5] + 0
  else
    r.after = false
  end
  return r
end

local NONE = {}   -- read_strings' answer when it reads nothing (never written)
local ZEROS = {}   -- decide's answer is made at its size from these
local rules_kept = {}   -- a call's rules, 1 to its n

-- every string a call reads (heads, rings, bans: the first `count` KEYS)
-- in one MGET, by the key's place in KEYS; a list's or a sorted set's key
-- is read by its own algorithm.  An ACL user not allowed MGET has each read
-- by GET instead (string_at).
local function read_strings(KEYS, rules, n, count)
  if count < 2 then return NONE end
  local strings = 0
  for i = 1, n do
    local a = algorithms[rules[i].algorithm]
    if a.head or a.string then strings = strings + 1 end
  end
  local v
  if strings == n then   -- every key's, in order
    v = redis.pcall('MGET', unpack(KEYS, 1, count))
    return v.err == nil and v or NONE
  end
  local wanted, at = {}, {}
  for i = 1, count do
    local a = i <= n and algorithms[rules[i].algorithm]
    if not a or a.head or a.string then
      wanted[#wanted + 1] = KEYS[i]
      at[#at + 1] = i
    end
  end
  if #wanted < 2 then return NONE end
  v = redis.pcall('MGET', unpack(wanted))
  if v.err ~= nil then return NONE end
  local got = {}
  for j = 1, #wanted do got[at[j]] = v[j] end
  return got
end

-- charge=: what an admission reserves, from a look at the key (check.cpp's
-- reserve): the larger of its cost and the rule's share, at most what the
-- key has left
local function reserve(r, look)
  if r.share < look.remaining then return r.share end
  return look.remaining > r.cost and look.remaining or r.cost
end

local function reset(KEYS, rules, n, now)
  local out = {1}
  for i = 1, n do
    local r = rules[i]
    local found = redis.call('DEL', KEYS[i])
    if r.bankey and banned_until(r.bankey, now) > 0 then found = found + 2 end
    if r.bankey then redis.call('DEL', r.bankey) end
    out[i + 1] = found
  end
  return out
end

local function settle(KEYS, rules, n, flights, now, testing)
  local out = {1}
  local got, written = read_strings(KEYS, rules, n, n + flights), {}
  for i = 1, n do
    local r = rules[i]
    local a = algorithms[r.algorithm]
    -- as the MGET read it, unless an earlier rule of the call wrote it
    local v
    if not written[KEYS[i]] then v = got[i] end
    local s = a.head and load_head(KEYS[i], v) or a.load(KEYS[i], r, nil, nil, v)
    if a.carry then s = a.carry(r, s, now) end
    local charged, capped, before = 0, false, 0
    if r.units >= 0 then
      if r.cost > 0 then s = a.refund(r, s, now, r.cost, r.after, r.at) end
      before = a.decide(r, s, now, 0, false).remaining
      if r.units > 0 then charged, capped, s = a.charge(r, s, now, r.units) end
      if a.head then store_head(KEYS[i], s, now, testing) else a.settled(KEYS[i], r, s, now, testing) end
      written[KEYS[i]] = true
    end
    if r.flightkey then
      flight_set(r.flightkey, flight_held(r.flightkey, now, got[r.flightat]) - r.cost, now, testing)
    end
    out[#out + 1] = charged
    out[#out + 1] = charged > before and 1 or 0
    out[#out + 1] = capped and 1 or 0
  end
  return out
end

-- a decision (call 0 to 3) or a peek; each rule's outcome is kept in it:
-- r.d its decision, r.state its state as read, r.after its head after it,
-- r.banned, r.here, r.committed, r.banning
local function decide(KEYS, rules, n, bans, flights, now, testing, call, got)
  local any = call == '1' or call == '3'
  local dry = call == '2' or call == '3'
  local peek = call == 'peek'
  got = got or read_strings(KEYS, rules, n, n + bans + flights)
  local heads = n > 1 and {} or NONE
  local allowing = 0
  for i = 1, n do
    local r = rules[i]
    local a = algorithms[r.algorithm]
    -- a rule sharing its key with an earlier one decides on the head that
    -- one would leave (check.cpp's current())
    local s = a.head and (heads[KEYS[i]] or load_head(KEYS[i], got[i]))
              or a.load(KEYS[i], r, now, peek, got[i])
    r.state = s
    if a.carry then s = a.carry(r, s, now) end
    r.asked = r.cost
    if r.charge == 1 and r.share > r.cost then r.cost = reserve(r, a.decide(r, s, now, 0, false)) end
    local d, nh = a.decide(r, s, now, r.cost, false)
    if r.bankey then
      local ends = banned_until(r.bankey, now, got[r.banat])
      if ends > 0 and r.cost > 0 then
        r.banned = true
        nh = nil   -- nothing spent
        refuse_until(d, ends, now)
      elseif ends > 0 and peek then
        d.banned = ends - now
      end
    end
    if a.head then
      r.after = nh or s
      if not peek and n > 1 then heads[KEYS[i]] = r.after end
    end
    if peek then r.here = (a.here and r.lease_name ~= '') and a.here(KEYS[i], r.lease_name, now) or 0 end
    r.d = d
    allowing = allowing + d.allowed
  end

  local allowed
  if any then allowed = allowing > 0 or n == 0 else allowed = allowing == n end

  -- commit: every consuming rule or none (with any, the allowing ones); a
  -- block is committed on its state as decided, unless an earlier rule of
  -- the call wrote its key
  local written = n > 1 and {} or NONE
  for i = 1, n do
    local r = rules[i]
    if allowed and not peek and r.d.allowed == 1 and r.cost > 0 then
      local a = algorithms[r.algorithm]
      if a.head then
        store_head(KEYS[i], r.after, now, testing)
        r.committed = r.after.t
      else
        r.committed = a.commit(KEYS[i], r, now, testing, not written[KEYS[i]] and r.state or nil)
      end
      if n > 1 then written[KEYS[i]] = true end
    end
  end

  -- charge=: an admission adds what it reserved to the key's reservations
  -- in flight; a refusal that they alone caused (what the key has left and
  -- they hold would admit it) is told apart, and starts no ban
  if flights > 0 then
    for i = 1, n do
      local r = rules[i]
      local d = r.d
      if r.flightkey and r.committed then
        flight_set(r.flightkey, flight_held(r.flightkey, now, got[r.flightat]) + r.cost, now, testing)
      elseif r.flightkey and d.allowed == 0 and d.never == 0 and not r.banned then
        local held = flight_held(r.flightkey, now, got[r.flightat])
        if held > 0 and d.remaining + held >= r.asked then r.banning = 2 end
      end
    end
  end

  -- a refused request bans its key for each ban= rule that refused it (not
  -- for a cost the rule can never admit, nor only for what the key's
  -- requests in flight hold), unless banned already; a dry run's refusal
  -- says what the ban would be, and stores none
  if not allowed and not peek then
    for i = 1, n do
      local r = rules[i]
      local d = r.d
      if r.bankey and not r.banned and not r.banning and d.allowed == 0 and d.never == 0 then
        local ends = now + r.ban
        if not dry then redis.call('SET', r.bankey, num(ends), 'PX', num(testing and r.ban + DAY or r.ban)) end
        refuse_until(d, ends, now)
        r.banning = 1
      end
    end
  end

  if n == 1 and not peek then
    local r = rules[1]
    local d = r.d
    return {allowed and 1 or 0, now, d.allowed, d.never, d.remaining, d.reset, d.retry, d.delay, d.window, d.available,
            d.banned, r.committed or 0, r.cost, r.banning or 0}
  end
  -- (the answer's table made at its size at once)
  local size = 2 + n * (peek and 13 or 12)
  for i = #ZEROS + 1, size do ZEROS[i] = 0 end
  local out, o = {unpack(ZEROS, 1, size)}, 2
  out[1], out[2] = allowed and 1 or 0, now
  for i = 1, n do
    local r = rules[i]
    local d = r.d
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = d.allowed, d.never, d.remaining, d.reset
    out[o + 5], out[o + 6], out[o + 7] = d.retry, d.delay, d.window
    out[o + 8], out[o + 9], out[o + 10] = d.available, d.banned, r.committed or 0
    out[o + 11], out[o + 12] = r.cost, r.banning or 0
    o = o + 12
    if peek then
      out[o + 1] = r.here
      o = o + 1
    end
  end
  return out
end

-- one request's call (a decision, or another call) of n rules whose
-- arguments start at ARGV[a + 1] (rule_at), its keys KEYS; got: the strings
-- its decision reads, read already (a batch's), or nil
local function call_one(KEYS, ARGV, a, n, call, now, testing, got)
  local settling = call == 'settle'
  local leases = call == 'release' or call == 'renew' or call == 'restore'
  local per = settling and 5 or 2

  local rules = rules_kept
  local bans = 0
  for i = 1, n do
    local r = rule_at(ARGV, a + (i - 1) * per, i, settling)
    if not settling and r.ban > 0 and not leases then
      bans = bans + 1
      r.bankey, r.banat = KEYS[n + bans], n + bans
    end
    rules[i] = r
  end
  -- charge=: the key's reservations in flight, after the bans (what this
  -- call wrote of them read again as it left them)
  local flights = 0
  if settling or call == '0' or call == '1' or call == '2' or call == '3' then
    for i = 1, n do
      local r = rules[i]
      if r.charge == 1 then
        flights = flights + 1
        r.flightkey, r.flightat = KEYS[n + bans + flights], n + bans + flights
      end
    end
    if flights > 0 then flight_now = {} end
  end

  if call == 'reset' then return reset(KEYS, rules, n, now) end
  if leases then
    local done = 0
    for i = 1, n do done = done + lease_end(KEYS[i], rules[i], now, testing, call) end
    return {1, done, n - done}
  end
  if settling then return settle(KEYS, rules, n, flights, now, testing) end
  return decide(KEYS, rules, n, bans, flights, now, testing, call, got)
end

-- the keys a request's call names: each rule's state, then each ban= rule's
-- ban, then each charge= rule's reservations in flight (rule_at's specs:
-- the 11th number is ban=, the 12th charge)
local function keys_of(ARGV, a, n)
  local k = n
  for i = 1, n do
    local text = ARGV[a + 2 * i - 1]
    local r = kept[i] and kept[i][text]
    local ban, charge
    if r then
      ban, charge = r.ban, r.charge
    else
      ban, charge = string.match(text, '^%S+ %S+ %S+ %S+ %S+ %S+ %S+ %S+ %S+ %S+ (%d+) (%d)')
      ban, charge = ban + 0, charge + 0
    end
    if ban > 0 then k = k + 1 end
    if charge == 1 then k = k + 1 end
  end
  return k
end

-- ---- the lean path: a decision of one gcra, token_bucket, fixed_window or
-- quota rule -------------------------------------------------------------------
--
-- A request of one such rule, with no ban=, no charge=, no override's
-- instant and a plain cost, on a state written under the rule's own
-- parameters (or none), is decided here as its algorithm and decide()
-- would, and answered with what the core cannot know: "ALLOWED NOW" and
-- the state as read, if any ("1 1796687107030 1796687107030 5 100 1000");
-- the core works the figures out from them with its own transition
-- (rl_redis_answer), and finds the same admission or refuses the answer.
-- Nothing is made but the answer's string and the state's: the spec read
-- once (by its text, 512 at most, then read again), the state without the
-- rule's table, the transition inline.  Any other request goes the whole
-- way (call_one).

-- the decision of cost on the state v (false: none) of key, its admission
-- written: the answer's string; nil if the state was written under other
-- parameters (the whole way decides it).  now_s: now's digits.
local function lean_gcra(key, v, g, cost, now, now_s, testing)
  local t, n = 0, 0
  if v then
    local ts, ns, tail = string.match(v, '^(%-?%d+) (%d+) (.*)$')
    if tail ~= g.tail then return nil end
    t, n = ts + 0, ns + 0
  end
  local limit = g.limit
  local ahead = 0   -- units_ahead
  if t >= now then
    local ms = t - now
    if ms >= g.far then ahead = KMAX else ahead = ms * limit + n end
  end
  local need = ahead + cost * g.period
  if cost > g.burst or (need > g.tau and cost > 0) then
    return v and '0 ' .. now_s .. ' ' .. v or '0 ' .. now_s
  end
  if cost > 0 then   -- paced_after, store_head
    local q = fdiv(need, limit)
    local ttl = q + 1
    if testing then ttl = ttl + DAY end
    redis.call('SET', key, (q == 0 and now_s or format('%d', now + q)) .. ' ' .. num(need - q * limit) .. ' ' ..
               g.tail, 'PX', num(ttl))
  end
  return v and '1 ' .. now_s .. ' ' .. v or '1 ' .. now_s
end

-- fixed_window, quota: the same, on a state "T N" (the window ending T
-- holds N units; one a charge carried past its window goes the whole way)
local function lean_window(key, v, g, cost, now, now_s, testing)
  local t, n = 0, 0
  if v then
    local ts, ns = string.match(v, '^(%-?%d+) (%d+)$')
    if not ts then return nil end
    t, n = ts + 0, ns + 0
    if n >= CARRIED then return nil end
  end
  local wend   -- fixed_window_span, quota_period, windowed_count
  if g.quota then
    wend = quota_period(g, now)
  elseif g.align == 1 then
    wend = t > now and t or now + g.period
  else
    wend = fdiv(now, g.period) * g.period + g.period
  end
  if t > wend then wend = t end
  local spent = (t == wend or (t > now and t < wend)) and n or 0
  local left = spent < g.limit and g.limit - spent or 0
  if cost > g.limit or cost > left then
    return v and '0 ' .. now_s .. ' ' .. v or '0 ' .. now_s
  end
  if cost > 0 then
    local ttl = wend + 1 - now
    if ttl < 1 then ttl = 1 end
    if testing then ttl = ttl + DAY end
    redis.call('SET', key, num(wend) .. ' ' .. num(spent + cost), 'PX', num(ttl))
  end
  return v and '1 ' .. now_s .. ' ' .. v or '1 ' .. now_s
end

local lean_specs, nlean = {}, 0

-- the spec's figures the lean path needs, or false: its rule goes the
-- whole way (spec: rule_at's)
local function lean_of(text)
  local g = lean_specs[text]
  if g ~= nil then return g end
  if nlean == 512 then lean_specs, nlean = {}, 0 end
  local f, j = {}, 0
  for x in string.gmatch(text, '%-?%d+') do
    j = j + 1
    f[j] = x + 0
  end
  local name = ALGORITHM_NAMES[f[1]]
  -- limit, burst, period, align, reset, utc_offset; ban (11th), charge
  -- (12th)
  g = false
  if f[11] == 0 and f[12] == 0 and f[2] > 0 then
    local limit, period = f[2], f[4]
    if (name == 'gcra' or name == 'token_bucket') and period > 0 then
      g = {decide = lean_gcra, limit = limit, burst = f[3], period = period, tau = f[3] * period,
           far = floor(KMAX / limit), tail = format('%d %d', limit, period)}
    elseif name == 'fixed_window' or name == 'quota' then
      g = {decide = lean_window, quota = name == 'quota', limit = limit, period = period, align = f[5],
           reset = f[8], utc_offset = f[9]}
    end
  end
  lean_specs[text], nlean = g, nlean + 1
  return g
end

-- a batch: the decisions of several requests in one call, each answered
-- as its own call would be, in order, as if called one after the other
-- (the clock read once).  ARGV from 3: each request's call (0 to 3), its
-- number of rules n and its rules' arguments (2 a rule); KEYS: each
-- request's keys in turn.  Every string the batch names is read in one
-- MGET; a request naming a key an earlier one of the batch named reads
-- its own (what the earlier one wrote).
local function batch(KEYS, ARGV, now, testing)
  local all = redis.pcall('MGET', unpack(KEYS))
  if all.err ~= nil then all = nil end
  local answers, named = {}, {}
  local a, k = 2, 0
  local now_s = format('%d', now)
  while a < #ARGV do
    local call, n = ARGV[a + 1], ARGV[a + 2] + 0
    local answer
    if n == 1 and (call == '0' or call == '1') then
      local g, cost = lean_of(ARGV[a + 3]), tonumber(ARGV[a + 4])
      if g and cost then
        local key = KEYS[k + 1]
        local v
        if all and not named[key] then v = all[k + 1] else v = redis.call('GET', key) end
        answer = g.decide(key, v, g, cost, now, now_s, testing)
        if answer then
          named[key] = true
          answers[#answers + 1] = answer
          a, k = a + 4, k + 1
        end
      end
    end
    if not answer then
    local count = keys_of(ARGV, a + 2, n)
    local keys, got = {}, all and {}
    for j = 1, count do
      local key = KEYS[k + j]
      keys[j] = key
      if named[key] then got = nil end
      named[key] = true
      if got then got[j] = all[k + j] end
    end
    answers[#answers + 1] = call_one(keys, ARGV, a + 2, n, call, now, testing, got)
    a, k = a + 2 + 2 * n, k + count
    end
  end
  return answers
end

-- ARGV: now ("" = Redis's TIME), the call ("batch": several), then each
-- rule's (rule_at)
local function run(KEYS, ARGV)
  if not floor then floor, format = math.floor, string.format end
  local testing = ARGV[1] ~= ''
  local now
  if testing then
    now = ARGV[1] + 0
  else
    local tm = redis.call('TIME')
    now = tm[1] * 1000 + floor(tm[2] / 1000)
  end
  local call = ARGV[2]
  if call == 'batch' then return batch(KEYS, ARGV, now, testing) end
  if (call == '0' or call == '1') and #ARGV == 4 then
    local g, cost = lean_of(ARGV[3]), tonumber(ARGV[4])
    if g and cost then
      local answer = g.decide(KEYS[1], redis.call('GET', KEYS[1]), g, cost, now, format('%d', now), testing)
      if answer then return answer end
    end
  end
  return call_one(KEYS, ARGV, 2, (#ARGV - 2) / (call == 'settle' and 5 or 2), call, now, testing)
end

-- ---- as a script (EVAL, EVALSHA); a library (FUNCTION LOAD, FCALL) ends
-- here instead with redis.register_function (rl_redis_library) ---------------

if redis.replicate_commands then redis.replicate_commands() end   -- Redis < 5: TIME, then writes
return run(KEYS, ARGV)
