-- ngx-ratelimit: one request checked against all its rules in Redis,
-- atomically (a script runs alone).  The transitions are the C++ core's
-- (core/src/*.cpp), line for line, with the same integer arithmetic: Lua 5.1
-- numbers are doubles, exact for integers below 2^53, and a Redis zone's
-- rules are bounded at configuration time (limit x period <= 2^50 units, see
-- rl_redis_rule_ok) so every quantity here stays exact.  Divisions go
-- through fdiv, which corrects the rounded quotient.
--
-- KEYS[i]: rule i's state.  ARGV: now ("" = Redis's TIME), the call (0:
-- decide with combine all, 1: with any; peek, reset: the key API's), then 11
-- numbers per rule: algorithm, limit, burst, period_ms, align, buckets,
-- max_delay_ms, reset, utc_offset_min, cost, delay.  Returns {allowed, then
-- per rule: allowed, never, remaining, reset_ms, retry_after_ms, delay_ms,
-- window_ms, available_ms} (the policy the headers advertise is the core's:
-- rl_redis_answer checks the reply against each rule and concludes with
-- it).  peek decides every rule on its state as it is and writes nothing;
-- reset deletes each rule's state and returns {1, then per rule: 1 if it
-- had one, else 0}.
--
-- State: gcra, token_bucket, leaky_bucket keep a string "t n l" (the
-- instant t + n/l ms, l the limit it was written in: a request under another
-- limit keeps the units the key owes, exact_time.h); fixed_window and quota
-- "t n" (the core's head); sliding_window a string "tick c0 ... cS" (its
-- block); sliding_log a list of the admitted units' times, oldest first.
-- Every write sets the key to expire 1 ms after the state is back to full
-- budget, so Redis holds active keys only.

local floor = math.floor
local KMAX = 4611686018427387904   -- 2^62, exact_time.h's kUnitsMax
local DAY = 86400000

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

local function num(x) return string.format('%.0f', x) end

local function decision(window)
  return {allowed = 0, never = 0, remaining = 0, reset = 0, retry = 0, delay = 0, window = window, available = 0}
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


-- exact_time.h: an instant t + n/limit ms, in units of 1/limit ms
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

-- the transitions: r is the rule, h the head {t, n}; they return the
-- decision and the head to store if the request is admitted

-- gcra, and token_bucket: a bucket of burst tokens refilled at limit per
-- period is GCRA with tau = burst * T, the same admissions (gcra.cpp)
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
    if cost > 0 then return d, instant_after(now, need, r.limit) end
  else
    d.remaining = fdiv(room, T)
    d.reset = cdiv(ahead, r.limit)
    d.retry = cdiv(need - tau, r.limit)
    d.available = d.retry
  end
  return d
end

local function windowed_count(r, h, now, cost, wend, window)
  if h.t > wend then wend = h.t end
  local spent = h.t == wend and h.n or 0
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

local function fixed_window(r, h, now, cost)
  local wend
  if r.align == 1 then
    wend = h.t > now and h.t or now + r.period
  else
    wend = fdiv(now, r.period) * r.period + r.period
  end
  return windowed_count(r, h, now, cost, wend, r.period)
end

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
  return d, instant_after(now, drain, r.limit)
end

-- calendar.cpp (Howard Hinnant's algorithms)
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

local function quota(r, h, now, cost)
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
  return windowed_count(r, h, now, cost, wend, wend - start)
end

-- sliding_window: b = {tick, c = {[0..S]}}, tick j counted at j % (S + 1)
local function sliding_window(r, b, now, cost, apply)
  local S, W = r.buckets, r.period
  local xk, xc = 0, 0   -- a tick counted xc more than the block says
  local function count(j)
    local x = j == xk and xc or 0
    if j > b.tick or j <= b.tick - (S + 1) then return x end
    return x + b.c[j % (S + 1)]
  end
  local function newest(k)
    local sum = 0
    for j = k - S + 1, k do sum = sum + count(j) end
    return sum
  end
  local function used(k, e, sum)
    return sum * W + count(k - S) * (W - e)
  end
  local cap = r.limit * W
  local function admissible_at(k, newer, from, want)
    local j = k
    while true do
      local fixed = (newer + want) * W
      if fixed <= cap then
        local room = cap - fixed
        local old = count(j - S)
        local e = 0
        if old > 0 and fdiv(room, old) < W then e = W - fdiv(room, old) end
        local at = cdiv(j * W + e, S)
        if at * S < (j + 1) * W then return at > from and at or from end
      end
      newer = newer - count(j - S + 1)
      j = j + 1
    end
  end
  local function full_at(j) return cdiv((j + 1 + S) * W, S) end

  local k = fdiv(now * S, W)
  local e = now * S - k * W
  if b.tick > k then k = b.tick; e = 0 end
  local sum = newest(k)
  local u = used(k, e, sum)
  local reset = 0
  if b.tick > k - (S + 1) and u ~= 0 then reset = full_at(b.tick) - now end
  if cost > r.limit then
    return never(r.period, fdiv(cap - (u < cap and u or cap), W), reset)
  end
  local d = decision(r.period)
  local spend = cost * W
  if u + spend <= cap then
    d.allowed = 1
    d.remaining = fdiv(cap - u - spend, W)
    d.reset = cost > 0 and full_at(k) - now or reset
    xk, xc = k, cost
    d.available = u + spend > 0 and admissible_at(k, sum + cost, now + 1, d.remaining + 1) - now or 0
    xk, xc = 0, 0
    if apply and cost > 0 then
      if b.tick < k then
        local j = b.tick + 1
        while j <= k and j <= b.tick + S + 1 do b.c[j % (S + 1)] = 0; j = j + 1 end
        b.tick = k
      end
      b.c[k % (S + 1)] = b.c[k % (S + 1)] + cost
      b.expire = full_at(k)
    end
  else
    d.remaining = u < cap and fdiv(cap - u, W) or 0
    d.reset = reset
    d.retry = admissible_at(k, sum, now + 1, cost) - now
    d.available = d.retry
  end
  return d
end

-- sliding_log: b = {times, oldest first}
local function sliding_log(r, b, now, cost, apply)
  local W = r.period
  local count = #b.times
  local newest = b.times[count]
  local t = (newest ~= nil and newest > now) and newest or now
  local expired = 0
  while expired < count and b.times[expired + 1] <= t - W do expired = expired + 1 end
  local live = count - expired
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

local by_head = {[0] = gcra, [1] = gcra, [2] = fixed_window, [5] = leaky_bucket, [6] = quota}
local SLIDING_WINDOW, SLIDING_LOG = 3, 4

-- loading and storing states

local function load_head(key)
  local v = redis.call('GET', key)
  if not v then return {t = 0, n = 0} end
  local t, n, l = string.match(v, '^(%-?%d+) (%d+) ?(%d*)$')
  if not t then return {t = 0, n = 0} end
  l = tonumber(l)
  if l == 0 then l = nil end
  return {t = tonumber(t), n = tonumber(n), l = l}
end

local function load_block(key, r)
  if r.algorithm == SLIDING_LOG then
    local times = redis.call('LRANGE', key, 0, -1)
    for i = 1, #times do times[i] = tonumber(times[i]) end
    return {times = times}
  end
  local b = {tick = 0, c = {}}
  local v = redis.call('GET', key)
  local i = -1
  if v then
    for x in string.gmatch(v, '%-?%d+') do
      if i < 0 then b.tick = tonumber(x) else b.c[i] = tonumber(x) end
      i = i + 1
    end
  end
  for j = 0, r.buckets do b.c[j] = b.c[j] or 0 end
  return b
end

local function expire_in(at, now, testing)
  local ttl = at + 1 - now
  if ttl < 1 then ttl = 1 end
  -- a test's clock runs apart from Redis's: keep its keys a day longer so
  -- that none expires early on the trace's clock
  if testing then ttl = ttl + DAY end
  return num(ttl)
end

local function store_head(key, h, now, testing)
  local v = num(h.t) .. ' ' .. num(h.n)
  if h.l then v = v .. ' ' .. num(h.l) end
  redis.call('SET', key, v, 'PX', expire_in(h.t, now, testing))
end

local function store_block(key, r, b, now, testing)
  if r.algorithm == SLIDING_LOG then
    if b.expired == #b.times then
      redis.call('DEL', key)
    elseif b.expired > 0 then
      redis.call('LTRIM', key, b.expired, -1)
    end
    local v = num(b.logged)
    local left = b.cost
    while left > 0 do   -- unpack has a stack limit: push in chunks
      local chunk = {}
      for i = 1, (left < 1000 and left or 1000) do chunk[i] = v end
      redis.call('RPUSH', key, unpack(chunk))
      left = left - #chunk
    end
  else
    local parts = {num(b.tick)}
    for j = 0, r.buckets do parts[j + 2] = num(b.c[j]) end
    redis.call('SET', key, table.concat(parts, ' '))
  end
  redis.call('PEXPIRE', key, expire_in(b.expire, now, testing))
end

-- the request

if redis.replicate_commands then redis.replicate_commands() end   -- Redis < 5: TIME, then writes

local testing = ARGV[1] ~= ''
local now
if testing then
  now = tonumber(ARGV[1])
else
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000 + floor(tonumber(tm[2]) / 1000)
end
if ARGV[2] == 'reset' then
  local out = {1}
  for i = 1, #KEYS do out[i + 1] = redis.call('DEL', KEYS[i]) end
  return out
end
local any = ARGV[2] == '1'
local peek = ARGV[2] == 'peek'

local rules, decisions, heads, after = {}, {}, {}, {}
local allowing = 0
for i = 1, #KEYS do
  local a = 2 + (i - 1) * 11
  local r = {algorithm = tonumber(ARGV[a + 1]), limit = tonumber(ARGV[a + 2]), burst = tonumber(ARGV[a + 3]),
             period = tonumber(ARGV[a + 4]), align = tonumber(ARGV[a + 5]), buckets = tonumber(ARGV[a + 6]),
             max_delay = tonumber(ARGV[a + 7]), reset = tonumber(ARGV[a + 8]),
             utc_offset = tonumber(ARGV[a + 9]), cost = tonumber(ARGV[a + 10]), delay = tonumber(ARGV[a + 11])}
  rules[i] = r
  local f = by_head[r.algorithm]
  if f then
    -- a rule sharing its key with an earlier one decides on the head that
    -- one would leave (check.cpp's current())
    local h = heads[KEYS[i]] or load_head(KEYS[i])
    local d, nh = f(r, h, now, r.cost)
    after[i] = nh or h
    if not peek then heads[KEYS[i]] = after[i] end
    decisions[i] = d
  elseif r.algorithm == SLIDING_WINDOW then
    decisions[i] = sliding_window(r, load_block(KEYS[i], r), now, r.cost, false)
  else
    decisions[i] = sliding_log(r, load_block(KEYS[i], r), now, r.cost, false)
  end
  allowing = allowing + decisions[i].allowed
end

local allowed
if any then allowed = allowing > 0 or #KEYS == 0 else allowed = allowing == #KEYS end

-- commit: every consuming rule or none (with any, the allowing ones)
for i = 1, #KEYS do
  local r = rules[i]
  if allowed and not peek and decisions[i].allowed == 1 and r.cost > 0 then
    if by_head[r.algorithm] then
      store_head(KEYS[i], after[i], now, testing)
    else
      local b = load_block(KEYS[i], r)
      if r.algorithm == SLIDING_WINDOW then
        sliding_window(r, b, now, r.cost, true)
      else
        sliding_log(r, b, now, r.cost, true)
        b.cost = r.cost
      end
      store_block(KEYS[i], r, b, now, testing)
    end
  end
end

local out = {allowed and 1 or 0}
for i = 1, #KEYS do
  local d = decisions[i]
  local o = #out
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = d.allowed, d.never, d.remaining, d.reset
  out[o + 5], out[o + 6], out[o + 7] = d.retry, d.delay, d.window
  out[o + 8] = d.available
end
return out
