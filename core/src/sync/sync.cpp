// redis_sync: the journal of units spent since the last exchange, the
// exchange's script call and reply, and folding the fleet's totals into the
// table (ratelimit_sync.h says how the pieces fit).
//
// The journal: a header, `keys` items, then an index of 2 x keys (a power
// of two) chain heads, each an item's number plus 1 (0: none), by the
// key's tag.  Items are appended and never removed until the exchange takes
// them all, so the chains need no deletion.
#include <cstring>

#include "algorithms/algorithms.h"
#include "ratelimit_sync.h"
#include "redis/resp.h"
#include "table/table.h"
#include "util/error.h"

namespace {

// The integers a reply carries for an item: a tick's count each, the
// total of a window named by its end, or a window's end and total.
size_t reply_ints(const rl_sync_item_t &it)
{
    return it.buckets > 0 ? it.buckets + 1u : it.aligned ? 1 : 2;
}

constexpr uint32_t kMagic = 0x336e7973;  // "syn3": items with their ticks, taken early

// a call's reply is parsed whole, and one item always fits in a call
static_assert(RL_SYNC_REPLY_MAX <= RL_RESP_ITEMS_MAX && RL_BUCKETS_MAX + 1 <= RL_SYNC_REPLY_MAX,
              "a sync call's reply fits rl_resp_t");
static_assert(RL_BUCKETS_MAX <= UINT8_MAX, "an item's buckets fit a byte");

struct alignas(64) SyncHeader {
    uint32_t magic;
    uint32_t keys;
    uint32_t nindex;
    uint32_t used;
    uint32_t failing;  // a call's units came back: Redis is away
    int64_t next_ms;   // the next exchange is due then
    rl_sync_figures_t figures;
};

// The script, a key at a time by its kind (the last of its four
// arguments: units, window end, tick, kind).  A window the same on every
// server (kind -1: fixed_window align=epoch, quota) has a Redis key of its
// own, named by its end: the units are added with INCRBY, which answers the
// fleet's total, and the key expires a second after the window (set when
// the INCRBY made it).  A window chosen by a key's first request (kind 0:
// align=first) is a key "END TOTAL", the fleet's window and its units.
// A sender's units go to the stored window while it is not over (at the
// sender's clock), whichever window the sender counted them in (with
// align=first servers may start a key's window at different instants: the
// first one stored is the fleet's, and the servers take it); a stored
// window that is over (or none) is replaced by the sender's.  The key
// expires a second after its window.  A sliding_window key (kind: its
// buckets) is a hash of
// tick -> the fleet's units in it: the sender's units go to their tick,
// the answer is the counts of the S + 1 ticks of the window ending with
// it, the ticks that have left are deleted once the hash holds twice the
// window's, and the key expires a second after the tick leaves the window.
const char kScript[] =
    "local now = tonumber(ARGV[1])\n"
    "local out = {}\n"
    "for i = 1, #KEYS do\n"
    "  local units, wend = tonumber(ARGV[4 * i - 2]), tonumber(ARGV[4 * i - 1])\n"
    "  local s = tonumber(ARGV[4 * i + 1])\n"
    "  if s < 0 then\n"
    "    local t = redis.call('INCRBY', KEYS[i], units)\n"
    "    if t == units then redis.call('PEXPIREAT', KEYS[i], string.format('%.0f', wend + 1000)) end\n"
    "    out[#out + 1] = t\n"
    "  elseif s > 0 then\n"
    "    local k = tonumber(ARGV[4 * i])\n"
    "    redis.call('HINCRBY', KEYS[i], ARGV[4 * i], units)\n"
    "    redis.call('PEXPIREAT', KEYS[i], string.format('%.0f', wend + 1000))\n"
    "    local f = {}\n"
    "    for j = k - s, k do f[#f + 1] = string.format('%.0f', j) end\n"
    "    local v = redis.call('HMGET', KEYS[i], unpack(f))\n"
    "    for j = 1, #v do out[#out + 1] = tonumber(v[j]) or 0 end\n"
    "    if redis.call('HLEN', KEYS[i]) > 2 * (s + 1) then\n"
    "      for _, j in ipairs(redis.call('HKEYS', KEYS[i])) do\n"
    "        if (tonumber(j) or 0) < k - s then redis.call('HDEL', KEYS[i], j) end\n"
    "      end\n"
    "    end\n"
    "  else\n"
    "  local e, t = 0, 0\n"
    "  local v = redis.call('GET', KEYS[i])\n"
    "  if v then\n"
    "    local s = string.find(v, ' ', 1, true)\n"
    "    if s then e, t = tonumber(string.sub(v, 1, s - 1)) or 0, tonumber(string.sub(v, s + 1)) or 0 end\n"
    "  end\n"
    "  if e <= now then e, t = wend, 0 end\n"
    "  t = t + units\n"
    "  redis.call('SET', KEYS[i], string.format('%.0f %.0f', e, t), 'PX', string.format('%.0f', e - now + 1000))\n"
    "  out[#out + 1] = e\n"
    "  out[#out + 1] = t\n"
    "  end\n"
    "end\n"
    "return out\n";

SyncHeader *header(void *mem)
{
    return static_cast<SyncHeader *>(mem);
}

// A journal half full (a flood of distinct keys) is taken before its
// interval, so that it has room for the keys still to come; not while
// Redis is away (a call's units came back and no exchange ended since:
// they wait for the exchange of the interval, not a take a request).
bool urgent(const SyncHeader *h)
{
    return __atomic_load_n(&h->used, __ATOMIC_RELAXED) * 2 >= h->keys &&
           __atomic_load_n(&h->failing, __ATOMIC_RELAXED) == 0;
}

rl_sync_item_t *items_of(SyncHeader *h)
{
    return reinterpret_cast<rl_sync_item_t *>(h + 1);
}

uint32_t *index_of(SyncHeader *h)
{
    return reinterpret_cast<uint32_t *>(items_of(h) + h->keys);
}

uint32_t index_size(uint32_t keys)
{
    uint32_t n = 1;
    while (n < 2 * keys) {
        n <<= 1;
    }
    return n;
}

// A journal's item is a key's, or a key's tick's (sliding_window).
uint32_t bucket(const SyncHeader *h, uint64_t tag, int64_t tick)
{
    tag ^= (uint64_t) tick * 0x9e3779b97f4a7c15ull;
    return (uint32_t) ((tag ^ tag >> 29) & (h->nindex - 1));
}

rl_sync_item_t *find(SyncHeader *h, uint64_t tag, int64_t tick)
{
    rl_sync_item_t *items = items_of(h);
    for (uint32_t i = index_of(h)[bucket(h, tag, tick)]; i != 0; i = items[i - 1].next) {
        if (items[i - 1].tag == tag && items[i - 1].tick == tick) {
            return &items[i - 1];
        }
    }
    return nullptr;
}

// Adds like's units to its key's (and tick's) item, made if need be
// (name: its Redis key, made by the caller only then); false if the
// journal is full.
template <typename Name> bool add(SyncHeader *h, const rl_sync_item_t &like, Name name)
{
    const uint64_t tag = like.tag, units = like.units;
    const int64_t end = like.end;
    rl_sync_item_t *it = find(h, tag, like.tick);
    if (it == nullptr) {
        if (h->used == h->keys) {
            return false;
        }
        it = &items_of(h)[h->used++];
        uint32_t &head = index_of(h)[bucket(h, tag, like.tick)];
        *it = like;
        it->units = 0;
        it->next = head;
        name(it->name);
        head = h->used;
    }
    it->end = end;  // the latest window the key spent in
    const uint64_t sum = (uint64_t) it->units + units;
    it->units = sum < UINT32_MAX ? (uint32_t) sum : UINT32_MAX;
    return true;
}

void bump(uint64_t &counter, uint64_t by)
{
    __atomic_store_n(&counter, __atomic_load_n(&counter, __ATOMIC_RELAXED) + by, __ATOMIC_RELAXED);
}

// The units a committed check spent: its count grew in its window, or a
// new window began with them.
uint64_t spent(const rl_check_t &c)
{
    const uint32_t before = c.before.n & ~rl::kCarried, after = c.after.n & ~rl::kCarried;
    if (c.after.t == c.before.t) {
        return after > before ? after - before : 0;
    }
    return c.after.t > c.before.t ? after : 0;
}

}  // namespace

size_t rl_sync_size(uint32_t keys)
{
    return sizeof(SyncHeader) + (size_t) keys * sizeof(rl_sync_item_t) + (size_t) index_size(keys) * 4;
}

int rl_sync_init(void *mem, size_t size, uint32_t keys)
{
    SyncHeader *h = header(mem);
    if (h->magic == kMagic && h->keys == keys && size >= rl_sync_size(keys)) {
        return 1;
    }
    std::memset(mem, 0, rl_sync_size(keys));
    h->magic = kMagic;
    h->keys = keys;
    h->nindex = index_size(keys);
    return 0;
}

int rl_sync_rule_ok(const rl_rule_t *rule, char *err, size_t errlen)
{
    const char *why = nullptr;
    switch (rule->algorithm) {
    case RL_FIXED_WINDOW:
    case RL_QUOTA:
    case RL_SLIDING_WINDOW:
        break;
    case RL_GCRA:
    case RL_TOKEN_BUCKET:
    case RL_LEAKY_BUCKET:
        why = "keeps a time, not a count";
        break;
    case RL_SLIDING_LOG:
        why = "keeps the time of every unit, not a count";
        break;
    default:
        why = "counts requests in flight on this server, not units spent";
        break;
    }
    if (why != nullptr) {
        rl::fail(err, errlen,
                 "redis_sync merges counts: algorithm=%s %s; use fixed_window, sliding_window or quota, "
                 "or exact Redis mode (no redis_sync)",
                 rl_algorithm_name(rule->algorithm), why);
        return RL_ERROR;
    }
    if (rule->charge) {
        rl::fail(err, errlen, "redis_sync merges counts spent as requests are decided: charge= is not supported");
        return RL_ERROR;
    }
    return RL_OK;
}

int rl_sync_note(void *sync, const void *table, const rl_request_t *rq, int64_t now_ms)
{
    (void) now_ms;
    SyncHeader *h = header(sync);
    for (size_t i = 0; i < rq->n; i++) {
        const rl_check_t &c = rq->checks[i];
        if (c.table != table || c.outcome != RL_OUTCOME_ALLOWED) {
            continue;
        }
        rl_sync_item_t like{};
        like.tag = c.tag;
        like.tick = -1;
        if (c.rule->algorithm == RL_SLIDING_WINDOW) {
            // the units of the tick it was decided in
            const int64_t S = c.rule->buckets, W = c.rule->period_ms;
            like.tick = rl::floor_div(c.at * S, W);
            like.end = rl::ceil_div((uint64_t) ((like.tick + 1 + S) * W), (uint64_t) S);
            like.period_ms = W;
            like.buckets = (uint8_t) S;
            like.block = (uint16_t) c.rule->block;
            like.units = (uint32_t) (c.cost < UINT32_MAX ? c.cost : UINT32_MAX);
        } else {
            const uint64_t units = spent(c);
            like.end = c.after.t;
            like.aligned = c.rule->algorithm == RL_QUOTA || c.rule->align == RL_ALIGN_EPOCH;
            like.units = (uint32_t) (units < UINT32_MAX ? units : UINT32_MAX);
        }
        const uint64_t units = like.units;
        if (units == 0) {
            continue;
        }
        const bool kept = add(h, like, [&c](char *name) {
            char key[RL_REDIS_HASH_LEN];
            rl_redis_key(key, "", 0, 0, c.identity, c.key, c.key_len);
            std::memcpy(name, key, RL_REDIS_HASH_LEN);
        });
        if (!kept) {
            bump(h->figures.dropped, units);
        }
    }
    __atomic_store_n(&h->figures.pending, (uint64_t) h->used, __ATOMIC_RELAXED);
    return urgent(h);
}

int rl_sync_urgent(const void *sync)
{
    return urgent(static_cast<const SyncHeader *>(sync));
}

size_t rl_sync_take(void *sync, int64_t now_ms, int64_t interval_ms, rl_sync_item_t *out, int *due)
{
    SyncHeader *h = header(sync);
    *due = 0;
    // a clock that stepped back more than an interval: due now
    if (!urgent(h) && now_ms < h->next_ms && h->next_ms - now_ms <= interval_ms) {
        return 0;
    }
    *due = 1;
    h->next_ms = now_ms + interval_ms;
    size_t n = 0;
    const rl_sync_item_t *items = items_of(h);
    for (uint32_t i = 0; i < h->used; i++) {
        if (items[i].end > now_ms && items[i].units > 0) {  // a window over counts for nothing
            out[n++] = items[i];
        }
    }
    h->used = 0;
    std::memset(index_of(h), 0, (size_t) h->nindex * 4);
    __atomic_store_n(&h->figures.pending, (uint64_t) 0, __ATOMIC_RELAXED);
    return n;
}

void rl_sync_requeue(void *sync, const rl_sync_item_t *items, size_t n)
{
    SyncHeader *h = header(sync);
    __atomic_store_n(&h->failing, 1u, __ATOMIC_RELAXED);
    for (size_t i = 0; i < n; i++) {
        const rl_sync_item_t &it = items[i];
        if (!add(h, it, [&it](char *name) { std::memcpy(name, it.name, RL_REDIS_HASH_LEN); })) {
            bump(h->figures.dropped, it.units);
        }
    }
    __atomic_store_n(&h->figures.pending, (uint64_t) h->used, __ATOMIC_RELAXED);
}

void rl_sync_record(void *sync, size_t keys, uint64_t units, uint64_t failures, int64_t lag_ms, int64_t now_ms)
{
    if (failures == 0 && lag_ms >= 0) {
        __atomic_store_n(&header(sync)->failing, 0u, __ATOMIC_RELAXED);
    }
    rl_sync_figures_t &f = header(sync)->figures;
    bump(f.keys, keys);
    bump(f.units, units);
    bump(f.failures, failures);
    if (lag_ms >= 0) {
        bump(f.exchanges, 1);
        __atomic_store_n(&f.lag_ms, lag_ms, __ATOMIC_RELAXED);
        __atomic_store_n(&f.last_ms, now_ms, __ATOMIC_RELAXED);
    }
}

void rl_sync_get_figures(const void *sync, rl_sync_figures_t *out)
{
    const rl_sync_figures_t &f = static_cast<const SyncHeader *>(sync)->figures;
    out->exchanges = __atomic_load_n(&f.exchanges, __ATOMIC_RELAXED);
    out->keys = __atomic_load_n(&f.keys, __ATOMIC_RELAXED);
    out->units = __atomic_load_n(&f.units, __ATOMIC_RELAXED);
    out->failures = __atomic_load_n(&f.failures, __ATOMIC_RELAXED);
    out->dropped = __atomic_load_n(&f.dropped, __ATOMIC_RELAXED);
    out->pending = __atomic_load_n(&f.pending, __ATOMIC_RELAXED);
    out->lag_ms = __atomic_load_n(&f.lag_ms, __ATOMIC_RELAXED);
    out->last_ms = __atomic_load_n(&f.last_ms, __ATOMIC_RELAXED);
}

const char *rl_sync_script(size_t *len)
{
    *len = sizeof(kScript) - 1;
    return kScript;
}

size_t rl_sync_command_size(size_t n, size_t prefix_len, size_t script_len)
{
    // per part: '$', up to 20 digits, 2 CRLFs, the bytes
    return 64 + script_len + n * (5 * 24 + prefix_len + 2 + RL_REDIS_HASH_LEN + 24 + 4 * 20) + 24 * 3;
}

size_t rl_sync_command(char *buf, const char *script, size_t script_len, int eval, const char *prefix,
                       size_t prefix_len, const rl_sync_item_t *items, size_t n, int64_t now_ms)
{
    rl::Writer w{buf};
    w.header('*', 3 + n + 1 + 4 * n);
    if (eval) {
        w.arg("EVAL", 4);
    } else {
        w.arg("EVALSHA", 7);
    }
    w.arg(script, script_len);
    w.arg((int64_t) n);
    for (size_t i = 0; i < n; i++) {
        // a window the same everywhere: its key's, named by its end
        char end[24];
        rl::Writer e{end};
        if (items[i].aligned) {
            *e.p++ = ':';
            e.number(items[i].end);
        }
        w.header('$', prefix_len + 2 + RL_REDIS_HASH_LEN + (size_t) (e.p - end));
        w.raw(prefix, prefix_len);
        w.raw("s:", 2);
        w.raw(items[i].name, RL_REDIS_HASH_LEN);
        w.raw(end, (size_t) (e.p - end));
        w.raw("\r\n", 2);
    }
    w.arg(now_ms);
    for (size_t i = 0; i < n; i++) {
        w.arg((int64_t) items[i].units);
        w.arg(items[i].end);
        w.arg(items[i].buckets > 0 ? items[i].tick : (int64_t) 0);
        w.arg(items[i].buckets > 0 ? (int64_t) items[i].buckets : items[i].aligned ? -1 : 0);
    }
    return (size_t) (w.p - buf);
}

size_t rl_sync_batch(const rl_sync_item_t *items, size_t n)
{
    size_t i = 0, ints = 0;
    for (; i < n && i < RL_SYNC_BATCH; i++) {
        ints += reply_ints(items[i]);
        if (ints > RL_SYNC_REPLY_MAX && i > 0) {
            break;
        }
    }
    return i;
}

size_t rl_sync_totals(const rl_sync_item_t *items, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        m += items[i].buckets > 0 ? items[i].buckets + 1 : 1;
    }
    return m;
}

int rl_sync_answer(const rl_resp_t *r, const rl_sync_item_t *items, size_t n, int64_t now_ms, rl_sync_total_t *totals,
                   char *why, size_t whylen)
{
    if (r->type == RL_RESP_ERROR) {
        if (r->str_len >= 8 && std::memcmp(r->str, "NOSCRIPT", 8) == 0) {
            return RL_REDIS_NOSCRIPT;
        }
        rl::fail(why, whylen, "an error reply to the exchange");
        return rl::is_readonly(*r) ? RL_REDIS_READONLY : RL_REDIS_FAILED;
    }
    // a count item answers its window's end and total, a tick item its
    // window's counts
    size_t want = 0;
    for (size_t i = 0; i < n; i++) {
        want += reply_ints(items[i]);
    }
    if (r->type != RL_RESP_ARRAY || !r->integers || r->integer != (int64_t) want || r->nitems != want) {
        rl::fail(why, whylen, "not an array of %zu integers", want);
        return RL_REDIS_FAILED;
    }
    const int64_t most = 4ll * RL_LIMIT_MAX;
    const int64_t *v = r->items;
    for (size_t i = 0; i < n; i++) {
        if (items[i].buckets > 0) {
            for (int64_t j = items[i].tick - items[i].buckets; j <= items[i].tick; j++, v++) {
                if (*v < 0 || *v > most) {
                    rl::fail(why, whylen, "key %zu: a tick's count of %lld units", i, (long long) *v);
                    return RL_REDIS_FAILED;
                }
                *totals++ = rl_sync_total_t{j, (uint64_t) *v};
            }
            continue;
        }
        const int64_t end = items[i].aligned ? items[i].end : v[0], total = items[i].aligned ? v[0] : v[1];
        v += reply_ints(items[i]);
        if (end < now_ms - RL_PERIOD_MAX_MS || end > now_ms + RL_PERIOD_MAX_MS + RL_REDIS_CLOCK_SLACK_MS) {
            rl::fail(why, whylen, "key %zu: a window's end %lld ms from now", i, (long long) (end - now_ms));
            return RL_REDIS_FAILED;
        }
        if (total < 0 || total > most) {
            rl::fail(why, whylen, "key %zu: a total of %lld units", i, (long long) total);
            return RL_REDIS_FAILED;
        }
        *totals++ = rl_sync_total_t{end, (uint64_t) total};
    }
    return RL_REDIS_DECIDED;
}

namespace {

// A sliding_window item's ticks folded into its key's ring: each tick
// counts the fleet's units plus what this server spent in it since.
void apply_ticks(SyncHeader *h, rl::Table *t, const rl_sync_item_t &it, const rl_sync_total_t *ticks, int64_t now_ms)
{
    uint64_t at[RL_BUCKETS_MAX + 1];
    const uint64_t most = UINT32_MAX;
    for (uint32_t j = 0; j <= it.buckets; j++) {
        const rl_sync_item_t *since = find(h, it.tag, ticks[j].end);
        const uint64_t c = ticks[j].total + (since != nullptr ? since->units : 0);
        at[j] = c < most ? c : most;
    }
    const int pool = t->pool_for(it.block);
    if (pool < 0) {
        return;  // no pool for the rule's blocks: its keys are decided as cold
    }
    rl_rule_t rule{};
    rule.algorithm = RL_SLIDING_WINDOW;
    rule.buckets = it.buckets;
    rule.period_ms = it.period_ms;
    rl::State found{};
    rl::Table::Ref ref{};
    const rl::Debt debt = t->find(it.tag, &found, &ref) ? rl::Table::debt(ref) : rl::Debt{0, false};
    rl::State s = t->acquire(it.tag, pool, now_ms);
    rl::sliding_window_merge(rule, s, it.tick, at);
    t->set_t(it.tag, s.head.t, debt);
}

}  // namespace

void rl_sync_apply(void *sync, void *table, const rl_sync_item_t *items, const rl_sync_total_t *totals, size_t n,
                   int64_t now_ms)
{
    SyncHeader *h = header(sync);
    rl::Table *t = rl::Table::at(table);
    t->recover();
    for (size_t i = 0; i < n; i++) {
        if (items[i].buckets > 0) {
            if (items[i].end > now_ms) {
                apply_ticks(h, t, items[i], totals, now_ms);
            }
            totals += items[i].buckets + 1;
            continue;
        }
        const rl_sync_total_t &fleet = *totals++;
        if (fleet.end <= now_ms) {
            continue;  // that window is over here
        }
        const rl_sync_item_t *since = find(h, items[i].tag, -1);
        uint64_t count = fleet.total + (since != nullptr ? since->units : 0);
        const uint64_t most = ~rl::kCarried - 1;
        count = count < most ? count : most;

        rl::State s{};
        rl::Table::Ref ref{};
        const bool found = t->find(items[i].tag, &s, &ref);
        if (found && s.head.t == fleet.end && (s.head.n & ~rl::kCarried) >= count) {
            continue;  // this server counts as much already
        }
        // the fleet's window holds this server's units too: it is the key's
        const rl_state_t head{fleet.end, (uint32_t) count};
        if (found) {
            rl::Table::update(ref, head, rl::Table::debt(ref));
        } else {
            t->store(items[i].tag, head, rl::Debt{0, false}, now_ms);
        }
    }
}
