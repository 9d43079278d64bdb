// A Redis zone's overrides, in Redis: one hash a zone, a field an override
// ("RULE key|range TARGET") holding its line as the overrides file writes
// it, "#v", its version, one more at each change, and "#id", when it was
// made (a hash lost and made again is told apart).  The key API writes
// there (put, del), and each server takes the whole hash into its zone's
// store when its version moves (poll, a page at a time), so that every
// server of the fleet applies the same overrides.  A removed override is
// kept ended (its expiry made the time it was removed): a key's state
// written under it is carried back as at that instant (the request's
// script call, ratelimit.lua's paced_carry); ended ones make room when the
// hash is full.
#include <cstdio>
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

-- the field of a line: its first three words
local function field_of(line)
  local a = string.find(line, ' ', 1, true)
  local b = a and string.find(line, ' ', a + 1, true)
  local c = b and string.find(line, ' ', b + 1, true)
  return c and string.sub(line, 1, c - 1) or line
end

if op == 'poll' then
  -- the hash's version and id (when it was made); when they are not the
  -- ones known, a page of lines (at most budget bytes) after "VERSION ID
  -- CURSOR SKIP" or "VERSION ID end".  A field that is no override's line
  -- (longer than cap, a line break in it, or not its line's field) is a
  -- line "#! WHY BYTES FIELD" instead, its field's first 64 bytes shown,
  -- so that one bad field stops nothing
  local v = redis.call('HGET', h, '#v') or '0'
  local id = redis.call('HGET', h, '#id') or '0'
  local cur, skip, budget = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
  local cap = tonumber(ARGV[7])
  local head = v .. ' ' .. id
  if v == ARGV[2] and id == ARGV[3] and cur == '0' and skip == 0 then return head end
  local parts, size = {}, 0
  while true do
    local r = redis.call('HSCAN', h, cur, 'COUNT', 64)
    local items = r[2]
    for i = skip * 2 + 1, #items, 2 do
      local f, line = items[i], items[i + 1]
      if f ~= '#v' and f ~= '#id' then
        local why = (#line > cap and 'long') or (string.find(line, '[\r\n]') and 'break')
                    or (field_of(line) ~= f and 'field') or nil
        if why then
          line = '#! ' .. why .. ' ' .. #line .. ' ' .. string.gsub(string.sub(f, 1, 64), '%c', '?')
        end
        if size + #line + 1 > budget and size > 0 then
          return head .. ' ' .. cur .. ' ' .. ((i - 1) / 2) .. '\n' .. table.concat(parts)
        end
        parts[#parts + 1] = line .. '\n'
        size = size + #line + 1
      end
    end
    cur, skip = r[1], 0
    if cur == '0' then return head .. ' end\n' .. table.concat(parts) end
  end
end

-- a write: the hash's version after it, and the hash made known by when
-- it was made (#id: a hash lost and made again is another one)
local field, now, room = ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])

local function written()
  redis.call('HSETNX', h, '#id', ARGV[4])
  return redis.call('HINCRBY', h, '#v', 1)
end

if op == 'del' then
  local line = redis.call('HGET', h, field)
  if not line or ended(line, now) then return 0 end
  local w = words(line)
  w[9] = ARGV[4]
  redis.call('HSET', h, field, table.concat(w, ' '))
  return written()
end

-- put: in place of the same target's, or in room (ended ones make it)
local function held()
  return redis.call('HLEN', h) - redis.call('HEXISTS', h, '#v') - redis.call('HEXISTS', h, '#id')
end
if redis.call('HEXISTS', h, field) == 0 and held() >= room then
  local all = redis.call('HGETALL', h)
  for i = 1, #all, 2 do
    if all[i] ~= '#v' and all[i] ~= '#id' and ended(all[i + 1], now) then redis.call('HDEL', h, all[i]) end
  end
  if held() >= room then return -1 end
end
redis.call('HSET', h, field, ARGV[3])
return written()
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

// A number of a poll's reply, at most 19 digits, from q on.
bool reply_number(const char *&q, const char *end, uint64_t *out)
{
    const char *from = q;
    uint64_t v = 0;
    while (q < end && *q >= '0' && *q <= '9' && q - from < 19) {
        v = v * 10 + (uint64_t) (*q++ - '0');
    }
    *out = v;
    return q > from;
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
           (arg + prefix_len + RL_REDIS_TAG_LEN + RL_REDIS_HASH_LEN) + 7 * (arg + RL_OVERRIDE_LINE_MAX);
}

size_t rl_overrides_redis_command(char *buf, const char *script, size_t script_len, int eval, const char *prefix,
                                  size_t prefix_len, int cluster, const char *zone, size_t zone_len,
                                  const rl_overrides_call_t *call)
{
    rl::Writer w{buf};
    w.length_line('*', 3 + 1 + (call->op == RL_OVERRIDES_POLL ? 7 : 5));
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
        w.arg((int64_t) call->id);
        w.arg(call->cursor, std::strlen(call->cursor));
        w.arg((int64_t) call->skip);
        w.arg((int64_t) RL_OVERRIDES_PAGE);
        w.arg((int64_t) RL_OVERRIDE_LINE_MAX - 1);
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
        // put: the version it made, or -1 (full); del: the version, or 0
        if (r->type != RL_RESP_INTEGER || r->integer < -1 || (call->op == RL_OVERRIDES_DEL && r->integer < 0)) {
            rl::fail(why, whylen, "not -1, 0 or a version");
            return RL_REDIS_FAILED;
        }
        call->result = r->integer > 0 ? 1 : (int) r->integer;
        call->written = r->integer > 0 ? (uint64_t) r->integer : 0;
        return RL_REDIS_DECIDED;
    }
    // "VERSION ID", or "VERSION ID CURSOR SKIP\n" or "VERSION ID end\n"
    // and lines
    if (r->type != RL_RESP_BULK || r->integer < 0) {
        rl::fail(why, whylen, "not a string");
        return RL_REDIS_FAILED;
    }
    const char *p = r->str, *end = r->str + r->str_len;
    const char *q = p;
    uint64_t v = 0, id = 0;
    if (!reply_number(q, end, &v) || q == end || *q++ != ' ' || !reply_number(q, end, &id)) {
        rl::fail(why, whylen, "no version and id");
        return RL_REDIS_FAILED;
    }
    call->page_version = v;
    call->page_id = id;
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

extern "C" {

int rl_overrides_redis_read(const char *line, size_t len, const rl_override_rule_t *rules, size_t n, int redis,
                            int64_t now_ms, rl_override_t *ov, char *err, size_t errlen)
{
    if (len < 3 || std::memcmp(line, "#! ", 3) != 0) {
        char why[RL_ERR_MAX];
        const rl_override_rule_t *rule;
        int rc = rl_overrides_file_read(line, len, ov, why, sizeof(why));
        if (rc == RL_OK) {
            rc = rl_override_admit(ov, rules, n, redis, now_ms, &rule, why, sizeof(why));
        }
        if (rc != RL_ERROR) {
            return rc == RL_DECLINED && (len == 0 || line[0] == '#') ? RL_DECLINED : RL_OK;
        }
        char shown[RL_ESCAPED_MAX(64)];
        const size_t f = rl_escape(shown, line, field_of(line, len), 64);
        std::snprintf(err, errlen, "field \"%.*s\": %s", (int) f, shown, why);
        return RL_ERROR;
    }
    // "#! WHY BYTES FIELD", the field's first bytes shown
    static const struct {
        const char *word, *why;
    } kWhy[] = {{"long ", "its value is longer than an override's line"},
                {"break ", "its value holds a line break"},
                {"field ", "it is not the field of its value (an override's field is its line's first three words)"}};
    const char *p = line + 3, *end = line + len;
    const char *why = "it is not an override's line";
    for (const auto &w : kWhy) {
        const size_t n = std::strlen(w.word);
        if ((size_t) (end - p) >= n && std::memcmp(p, w.word, n) == 0) {
            why = w.why;
            p += n;
        }
    }
    uint64_t bytes = 0;
    const bool sized = reply_number(p, end, &bytes) && p < end && *p++ == ' ';
    char shown[RL_ESCAPED_MAX(64)];
    const size_t f = rl_escape(shown, p, sized ? (size_t) (end - p) : 0, 64);
    std::snprintf(err, errlen, "field \"%.*s\" (a value of %llu bytes): %s", (int) f, shown, (unsigned long long) bytes,
                  why);
    return RL_ERROR;
}

}  // extern "C"
