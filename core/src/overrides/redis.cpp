// A Redis zone's overrides, in Redis: one hash a zone, a field an override
// ("RULE key|range TARGET") holding its line as the overrides file writes
// it, and "#v", its version, one more at each change.  The key API writes
// there (put, del), and each server takes the whole hash into its zone's
// store when its version moves (poll, a page at a time), so that every
// server of the fleet applies the same overrides.  A removed override is
// kept ended (its expiry made the time it was removed): a key's state
// written under it is carried back as at that instant (the request's
// script call, ratelimit.lua's paced_carry); ended ones make room when the
// hash is full.
#include <cstring>

#include "overrides/store.h"
#include "redis/resp.h"
#include "table/table.h"
#include "util/error.h"

namespace {

const char kScript[] = R"lua(
-- ngx-ratelimit: a zone's overrides in Redis (core/src/overrides/redis.cpp)
local h, op = KEYS[1], ARGV[1]

-- a line's words: RULE key|range TARGET ACTION GIVEN LIMIT BURST PERIOD
-- EXPIRES CREATED
local function words(line)
  local w = {}
  for x in string.gmatch(line, '%S+') do w[#w + 1] = x end
  return w
end

local function ended(line, now)
  local e = tonumber(words(line)[9]) or 0
  return e ~= 0 and e <= now
end

if op == 'poll' then
  -- the hash's version; when it is not the one known, a page of lines
  -- (at most budget bytes) after "VERSION CURSOR SKIP" or "VERSION end"
  local v = redis.call('HGET', h, '#v') or '0'
  local cur, skip, budget = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  if v == ARGV[2] and cur == '0' and skip == 0 then return v end
  local parts, size = {}, 0
  while true do
    local r = redis.call('HSCAN', h, cur, 'COUNT', 64)
    local items = r[2]
    for i = skip * 2 + 1, #items, 2 do
      local line = items[i + 1]
      if items[i] ~= '#v' then
        if size + #line + 1 > budget and size > 0 then
          return v .. ' ' .. cur .. ' ' .. ((i - 1) / 2) .. '\n' .. table.concat(parts)
        end
        parts[#parts + 1] = line .. '\n'
        size = size + #line + 1
      end
    end
    cur, skip = r[1], 0
    if cur == '0' then return v .. ' end\n' .. table.concat(parts) end
  end
end

local field, now, room = ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])

if op == 'del' then
  local line = redis.call('HGET', h, field)
  if not line or ended(line, now) then return 0 end
  local w = words(line)
  w[9] = ARGV[4]
  redis.call('HSET', h, field, table.concat(w, ' '))
  redis.call('HINCRBY', h, '#v', 1)
  return 1
end

-- put: in place of the same target's, or in room (ended ones make it)
if redis.call('HEXISTS', h, field) == 0 and redis.call('HLEN', h) > room then
  local all = redis.call('HGETALL', h)
  for i = 1, #all, 2 do
    if all[i] ~= '#v' and ended(all[i + 1], now) then redis.call('HDEL', h, all[i]) end
  end
  if redis.call('HLEN', h) > room then return -1 end
end
redis.call('HSET', h, field, ARGV[3])
redis.call('HINCRBY', h, '#v', 1)
return 1
)lua";

// The hash's name: as a rule's state is named (rl_redis_key), under the
// identity of every rule, for the key "overrides ZONE": a zone's own (zones
// may share a prefix), in that key's slot in a Cluster.
size_t hash_key(char *out, const char *prefix, size_t prefix_len, int cluster, const char *zone, size_t zone_len)
{
    char key[RL_OVERRIDES_TARGET_MAX];
    const size_t len = rl_overrides_redis_target(zone, zone_len, key);
    return rl_redis_key(out, prefix, prefix_len, cluster, rl::kEveryRule, key, len);
}

// A field: the line's first three words.
size_t field_of(const char *line, size_t len)
{
    size_t words = 0, i = 0;
    for (; i < len && words < 3; i++) {
        words += line[i] == ' ';
    }
    return words == 3 ? i - 1 : len;
}

}  // namespace

extern "C" {

const char *rl_overrides_redis_script(size_t *len)
{
    *len = sizeof(kScript) - 1;
    return kScript;
}

size_t rl_overrides_redis_target(const char *zone, size_t zone_len, char *out)
{
    const size_t n = zone_len < RL_NAME_MAX ? zone_len : RL_NAME_MAX - 1;
    std::memcpy(out, "overrides ", 10);
    std::memcpy(out + 10, zone, n);
    return 10 + n;
}

size_t rl_overrides_redis_command_size(size_t prefix_len, size_t script_len)
{
    const size_t arg = 1 + 20 + 2 + 2;
    return 1 + 20 + 2 + (arg + 7) + (arg + script_len) + (arg + 1) +
           (arg + prefix_len + RL_REDIS_TAG_LEN + RL_REDIS_HASH_LEN) + 5 * (arg + RL_OVERRIDE_LINE_MAX);
}

size_t rl_overrides_redis_command(char *buf, const char *script, size_t script_len, int eval, const char *prefix,
                                  size_t prefix_len, int cluster, const char *zone, size_t zone_len,
                                  const rl_overrides_call_t *call)
{
    rl::Writer w{buf};
    w.header('*', 3 + 1 + 5);
    if (eval) {
        w.arg("EVAL", 4);
    } else {
        w.arg("EVALSHA", 7);
    }
    w.arg(script, script_len);
    w.arg((int64_t) 1);
    char key[256 + RL_REDIS_TAG_LEN + RL_REDIS_HASH_LEN];
    w.arg(key, hash_key(key, prefix, prefix_len < 256 ? prefix_len : 256, cluster, zone, zone_len));
    if (call->op == RL_OVERRIDES_POLL) {
        w.arg("poll", 4);
        w.arg((int64_t) call->version);
        w.arg(call->cursor, std::strlen(call->cursor));
        w.arg((int64_t) call->skip);
        w.arg((int64_t) RL_OVERRIDES_PAGE);
        return (size_t) (w.p - buf);
    }
    char line[RL_OVERRIDE_LINE_MAX];
    size_t len = rl_overrides_file_line(&call->ov, line);
    len -= len > 0 && line[len - 1] == '\n';
    w.arg(call->op == RL_OVERRIDES_PUT ? "put" : "del", 3);
    w.arg(line, field_of(line, len));
    w.arg(line, len);
    w.arg(call->now_ms);
    w.arg((int64_t) call->room);
    return (size_t) (w.p - buf);
}

int rl_overrides_redis_answer(const rl_resp_t *r, rl_overrides_call_t *call, char *why, size_t whylen)
{
    if (r->type == RL_RESP_ERROR) {
        if (r->str_len >= 8 && std::memcmp(r->str, "NOSCRIPT", 8) == 0) {
            return RL_REDIS_NOSCRIPT;
        }
        rl::fail(why, whylen, "an error reply to an overrides call");
        return rl::is_readonly(*r) ? RL_REDIS_READONLY : RL_REDIS_FAILED;
    }
    if (call->op != RL_OVERRIDES_POLL) {
        if (r->type != RL_RESP_INTEGER || r->integer < -1 || r->integer > 1) {
            rl::fail(why, whylen, "not -1, 0 or 1");
            return RL_REDIS_FAILED;
        }
        call->result = (int) r->integer;
        return RL_REDIS_DECIDED;
    }
    // "VERSION", or "VERSION CURSOR SKIP\n" or "VERSION end\n" and lines
    if (r->type != RL_RESP_BULK || r->integer < 0) {
        rl::fail(why, whylen, "not a string");
        return RL_REDIS_FAILED;
    }
    const char *p = r->str, *end = r->str + r->str_len;
    uint64_t v = 0;
    const char *q = p;
    while (q < end && *q >= '0' && *q <= '9' && q - p < 19) {
        v = v * 10 + (uint64_t) (*q++ - '0');
    }
    if (q == p) {
        rl::fail(why, whylen, "no version");
        return RL_REDIS_FAILED;
    }
    call->page_version = v;
    call->lines = nullptr;
    call->lines_len = 0;
    call->more = 0;
    if (q == end) {
        call->unchanged = 1;
        return RL_REDIS_DECIDED;
    }
    call->unchanged = 0;
    const char *nl = static_cast<const char *>(std::memchr(q, '\n', (size_t) (end - q)));
    if (*q != ' ' || nl == nullptr) {
        rl::fail(why, whylen, "a page without its header");
        return RL_REDIS_FAILED;
    }
    const size_t hlen = (size_t) (nl - q - 1);
    if (hlen == 3 && std::memcmp(q + 1, "end", 3) == 0) {
        call->more = 0;
    } else {
        // CURSOR SKIP: the next page's place
        const char *sp = static_cast<const char *>(std::memchr(q + 1, ' ', hlen));
        const size_t clen = sp ? (size_t) (sp - q - 1) : 0;
        if (sp == nullptr || clen == 0 || clen >= sizeof(call->next_cursor)) {
            rl::fail(why, whylen, "a page's place not understood");
            return RL_REDIS_FAILED;
        }
        std::memcpy(call->next_cursor, q + 1, clen);
        call->next_cursor[clen] = '\0';
        uint64_t skip = 0;
        for (const char *s = sp + 1; s < nl; s++) {
            if (*s < '0' || *s > '9' || skip > 1000000) {
                rl::fail(why, whylen, "a page's place not understood");
                return RL_REDIS_FAILED;
            }
            skip = skip * 10 + (uint64_t) (*s - '0');
        }
        call->next_skip = skip;
        call->more = 1;
    }
    call->lines = nl + 1;
    call->lines_len = (size_t) (end - nl - 1);
    return RL_REDIS_DECIDED;
}

}  // extern "C"
