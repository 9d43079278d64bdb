// redis_sync: the journal of units spent since the last exchange, the
// exchange's script call and reply, and folding the fleet's totals into the
// table (ratelimit_sync.h says how the pieces fit).
//
// The journal: its SyncJournal (counts, the calls' nonce, figures), `keys` items, then an index of 2 x keys (a power
// of two) chain heads, each an item's number plus 1 (0: none), by the
// key's tag and tick.  An item is a key's (a tick's) units of one call, or
// those not yet sent (call 0).  Items are appended and never removed until
// an exchange takes them: all of them, or the calls in doubt, and then the
// items left are moved up and the index made again.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <cstdio>

#include "algorithms/algorithm.h"
#include "ratelimit_sync.h"
#include "redis/resp.h"
#include "table/table.h"
#include "util/error.h"
#include "util/random_id.h"

namespace {

// The integers a reply carries for an item: a tick's count each, the
// total of a window named by its end, or a window's end and total.
size_t reply_ints(const rl_sync_item_t &it)
{
    return it.ticks > 0 ? it.ticks + 1u : it.aligned ? 1 : 2;
}

constexpr uint32_t kMagic = 0x346e7973;  // "syn4": items of numbered calls

// A call's marker and its counters expire a second after its last window:
// a copy Redis runs later adds nothing.
constexpr int64_t kAfterMs = 1000;

// a call's reply (what it did, then its totals) is parsed whole, and one
// item always fits in a call
static_assert(RL_SYNC_REPLY_MAX + 1 <= RL_RESP_ITEMS_MAX && RL_BUCKETS_MAX + 1 <= RL_SYNC_REPLY_MAX,
              "a sync call's reply fits rl_resp_t");
static_assert(RL_BUCKETS_MAX <= UINT8_MAX, "an item's ticks fit a byte");

struct alignas(64) SyncJournal {
    uint32_t magic;
    uint32_t keys;
    uint32_t nindex;
    uint32_t used;
    uint32_t failing;  // a call's units came back: Redis is away
    int64_t next_ms;   // the next exchange is due then
    uint64_t nonce;    // random, made with the journal: the calls' ids
    uint64_t calls;    // the last call's number
    rl_sync_figures_t figures;
};

// The script: KEYS[1] the call's marker, then its items' keys; ARGV now
// (the sender's clock), the call's deadline, then four an item (units,
// window end, tick, kind).  The call adds its units once: the first copy
// that runs before the deadline (Redis's clock) sets the marker, which
// expires at the deadline; a copy that finds it, or runs later, adds
// nothing and answers the totals (the reply's first integer says which:
// 1 added, 0 the marker found, -1 too late).  Then a key at a time by its
// kind.  A window the same on every server (kind -1: fixed_window
// align=epoch, quota) has a Redis key of its own, named by its end: the
// units are added with INCRBY, which answers the fleet's total, and the
// key expires a second after the window (set when the INCRBY made it);
// nothing to add, it is only read (GET), so that no key is made without
// its expiry.  A window chosen by a key's first request (kind 0:
// align=first) is a key "END TOTAL", the fleet's window and its units.
// A sender's units go to the stored window while it is not over (at the
// sender's clock), whichever window the sender counted them in (with
// align=first servers may start a key's window at different instants: the
// first one stored is the fleet's, and the servers take it); a stored
// window that is over (or none) is replaced by the sender's.  The key
// expires a second after its window.  A key counted by ticks (kind: its
// ticks a window; sliding_window's) is a hash of tick -> the fleet's units in it: the sender's
// units go to their tick, the answer is the counts of the S + 1 ticks of
// the window ending with it, the ticks that have left are deleted once the
// hash holds twice the window's, and the key expires a second after its
// newest tick leaves the window (an older tick's units, sent late, never
// bring that sooner).
const char kScript[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local now, deadline = tonumber(ARGV[1]), tonumber(ARGV[2])\n"
    "local tm = redis.call('TIME')\n"
    "local clock = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n"
    "local did = -1\n"
    "if clock < deadline then\n"
    "  did = 0\n"
    "  if redis.call('SET', KEYS[1], '1', 'NX') then\n"
    "    redis.call('PEXPIREAT', KEYS[1], ARGV[2])\n"
    "    did = 1\n"
    "  end\n"
    "end\n"
    "local out = {did}\n"
    "for i = 2, #KEYS do\n"
    "  local b = 4 * i - 6\n"
    "  local units = did == 1 and ARGV[b + 1] + 0 or 0\n"
    "  local s = ARGV[b + 4]\n"
    "  if s == '-1' then\n"
    "    local t\n"
    "    if units > 0 then\n"
    "      t = redis.call('INCRBY', KEYS[i], units)\n"
    "      if t == units then redis.call('PEXPIREAT', KEYS[i], string.format('%d', ARGV[b + 2] + 1000)) end\n"
    "    else\n"
    "      t = tonumber(redis.call('GET', KEYS[i])) or 0\n"
    "    end\n"
    "    out[#out + 1] = t\n"
    "  else\n"
    "    local wend\n"
    "    wend, s = ARGV[b + 2] + 0, s + 0\n"
    "    if s > 0 then\n"
    "      local k = tonumber(ARGV[b + 3])\n"
    "      if units > 0 then\n"
    "        redis.call('HINCRBY', KEYS[i], ARGV[b + 3], units)\n"
    "        local left = redis.call('PTTL', KEYS[i])\n"
    "        if left < 0 or clock + left < wend + 1000 then\n"
    "          redis.call('PEXPIREAT', KEYS[i], string.format('%d', wend + 1000))\n"
    "        end\n"
    "        if redis.call('HLEN', KEYS[i]) > 2 * (s + 1) then\n"
    "          for _, j in ipairs(redis.call('HKEYS', KEYS[i])) do\n"
    "            if (tonumber(j) or 0) < k - s then redis.call('HDEL', KEYS[i], j) end\n"
    "          end\n"
    "        end\n"
    "      end\n"
    "      local f = {}\n"
    "      for j = k - s, k do f[#f + 1] = string.format('%d', j) end\n"
    "      local v = redis.call('HMGET', KEYS[i], unpack(f))\n"
    "      for j = 1, #v do out[#out + 1] = tonumber(v[j]) or 0 end\n"
    "    else\n"
    "      local e, t = 0, 0\n"
    "      local v = redis.call('GET', KEYS[i])\n"
    "      if v then\n"
    "        local sp = string.find(v, ' ', 1, true)\n"
    "        if sp then e, t = tonumber(string.sub(v, 1, sp - 1)) or 0, tonumber(string.sub(v, sp + 1)) or 0 end\n"
    "      end\n"
    "      if e <= now then e, t = wend, 0 end\n"
    "      if units > 0 then\n"
    "        t = t + units\n"
    "        local ttl = string.format('%d', e - now + 1000)\n"
    "        redis.call('SET', KEYS[i], string.format('%d %d', e, t), 'PX', ttl)\n"
    "      end\n"
    "      out[#out + 1] = e\n"
    "      out[#out + 1] = t\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return out\n";

SyncJournal *journal_of(void *mem)
{
    return static_cast<SyncJournal *>(mem);
}

// A journal half full (a flood of distinct keys) is taken before its
// interval, so that it has room for the keys still to come; not while
// Redis is away (a call's units came back and no exchange ended since:
// they wait for the exchange of the interval, not a take a request).
bool urgent(const SyncJournal *h)
{
    return __atomic_load_n(&h->used, __ATOMIC_RELAXED) * 2 >= h->keys &&
           __atomic_load_n(&h->failing, __ATOMIC_RELAXED) == 0;
}

rl_sync_item_t *items_of(SyncJournal *h)
{
    return reinterpret_cast<rl_sync_item_t *>(h + 1);
}

uint32_t *index_of(SyncJournal *h)
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

// A journal's item is a key's, or a key's tick's (a count by ticks).
uint32_t bucket(const SyncJournal *h, uint64_t tag, int64_t tick)
{
    tag ^= (uint64_t) tick * 0x9e3779b97f4a7c15ull;
    return (uint32_t) ((tag ^ tag >> 29) & (h->nindex - 1));
}

rl_sync_item_t *find(SyncJournal *h, uint64_t tag, int64_t tick, uint64_t call)
{
    rl_sync_item_t *items = items_of(h);
    for (uint32_t i = index_of(h)[bucket(h, tag, tick)]; i != 0; i = items[i - 1].next) {
        if (items[i - 1].tag == tag && items[i - 1].tick == tick && items[i - 1].call == call) {
            return &items[i - 1];
        }
    }
    return nullptr;
}

// What this server spent in a key's window (or tick) and has not sent yet;
// false if some of its units are in a call in doubt: Redis may hold them
// or not.
bool unsent(SyncJournal *h, uint64_t tag, int64_t tick, uint64_t *units)
{
    const rl_sync_item_t *items = items_of(h);
    *units = 0;
    for (uint32_t i = index_of(h)[bucket(h, tag, tick)]; i != 0; i = items[i - 1].next) {
        const rl_sync_item_t &it = items[i - 1];
        if (it.tag == tag && it.tick == tick) {
            if (it.call != 0) {
                return false;
            }
            *units += it.units;
        }
    }
    return true;
}

// The index made again for the journal's items (after some were taken).
void reindex(SyncJournal *h)
{
    rl_sync_item_t *items = items_of(h);
    uint32_t *index = index_of(h);
    std::memset(index, 0, (size_t) h->nindex * 4);
    for (uint32_t i = 0; i < h->used; i++) {
        uint32_t &head = index[bucket(h, items[i].tag, items[i].tick)];
        items[i].next = head;
        head = i + 1;
    }
}

// Adds like's units to the item of its key (and tick) and call, made if
// need be (name: its Redis key, made by the caller only then); false if
// the journal is full.  Units not sent go to the key's item of call 0, so
// that a call in doubt is sent again as it was.
template <typename Name> bool add(SyncJournal *h, const rl_sync_item_t &like, Name name)
{
    const uint64_t tag = like.tag, units = like.units;
    const int64_t end = like.end;
    rl_sync_item_t *it = find(h, tag, like.tick, like.call);
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
    return sizeof(SyncJournal) + (size_t) keys * sizeof(rl_sync_item_t) + (size_t) index_size(keys) * 4;
}

int rl_sync_init(void *mem, size_t size, uint32_t keys)
{
    SyncJournal *h = journal_of(mem);
    if (h->magic == kMagic && h->keys == keys && size >= rl_sync_size(keys)) {
        return 1;
    }
    std::memset(mem, 0, rl_sync_size(keys));
    h->magic = kMagic;
    h->keys = keys;
    h->nindex = index_size(keys);
    h->nonce = rl::random_id();  // ids unique across servers and restarts
    return 0;
}

uint64_t rl_sync_nonce(const void *sync)
{
    return static_cast<const SyncJournal *>(sync)->nonce;
}

int rl_sync_rule_ok(const rl_rule_t *rule, char *err, size_t errlen)
{
    const rl::Algorithm &a = rl::algorithm_of(*rule);
    if (a.no_sync != nullptr) {
        // the algorithms whose state merges: "fixed_window, sliding_window or quota"
        char merging[128] = "";
        size_t len = 0, n = 0, total = 0;
        for (uint32_t i = 0; i < RL_ALGORITHM_COUNT; i++) {
            total += rl::algorithm_of(i).no_sync == nullptr;
        }
        for (uint32_t i = 0; i < RL_ALGORITHM_COUNT && len < sizeof(merging); i++) {
            if (rl::algorithm_of(i).no_sync == nullptr) {
                n++;
                len += (size_t) std::snprintf(merging + len, sizeof(merging) - len, "%s%s",
                                              n == 1       ? ""
                                              : n == total ? " or "
                                                           : ", ",
                                              rl::algorithm_of(i).name);
            }
        }
        rl::fail(err, errlen, "redis_sync merges counts: algorithm=%s %s; use %s, or exact Redis mode (no redis_sync)",
                 a.name, a.no_sync, merging);
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
    SyncJournal *h = journal_of(sync);
    for (size_t i = 0; i < rq->n; i++) {
        const rl_check_t &c = rq->checks[i];
        if (c.table != table || c.outcome != RL_OUTCOME_ALLOWED) {
            continue;
        }
        rl_sync_item_t like{};
        like.tag = c.tag;
        like.tick = -1;
        if (rl::has(*c.rule, rl::kTicks)) {
            // the units of the tick it was decided in
            rl::algorithm_of(*c.rule).sync_tick(*c.rule, c.at, like);
            like.algorithm = (uint8_t) c.rule->algorithm;
            like.block = (uint16_t) c.rule->block;
            like.units = (uint32_t) (c.cost < UINT32_MAX ? c.cost : UINT32_MAX);
        } else {
            const uint64_t units = spent(c);
            like.end = c.after.t;
            const rl::Algorithm &a = rl::algorithm_of(*c.rule);
            like.aligned = a.windows_keyed == nullptr || !a.windows_keyed(*c.rule);  // (a quota's calendar too)
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
    return urgent(static_cast<const SyncJournal *>(sync));
}

namespace {

// An item taken: its window not over, its call (if any) not given up.
bool live(const rl_sync_item_t &it, int64_t now_ms)
{
    return it.end > now_ms && it.units > 0 && (it.call == 0 || now_ms < it.deadline - kAfterMs);
}

// The calls in doubt, each as it was sent (its items in their order, an
// item whose window is over left out), by number, into out; the units not
// sent stay in the journal.
size_t take_doubt(SyncJournal *h, int64_t now_ms, rl_sync_item_t *out)
{
    rl_sync_item_t *items = items_of(h);
    size_t n = 0;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < h->used; i++) {
        const rl_sync_item_t &it = items[i];
        if (it.call == 0) {
            if (it.end > now_ms && it.units > 0) {
                items[kept++] = it;
            }
            continue;
        }
        if (live(it, now_ms)) {
            out[n] = it;
            out[n].next = i;  // its place, to keep the order within its call
            n++;
        } else if (it.end > now_ms) {
            bump(h->figures.dropped, it.units);  // given up: in doubt too long
        }
    }
    h->used = kept;
    reindex(h);
    std::sort(out, out + n, [](const rl_sync_item_t &a, const rl_sync_item_t &b) {
        return a.call != b.call ? a.call < b.call : a.next < b.next;
    });
    return n;
}

// The units not sent, all of them, numbered by call as rl_sync_batch cuts
// them; the journal emptied.
size_t take_fresh(SyncJournal *h, int64_t now_ms, rl_sync_item_t *out)
{
    const rl_sync_item_t *items = items_of(h);
    size_t n = 0;
    for (uint32_t i = 0; i < h->used; i++) {
        if (items[i].call == 0 && live(items[i], now_ms)) {  // a window over counts for nothing
            out[n++] = items[i];
        }
    }
    h->used = 0;
    std::memset(index_of(h), 0, (size_t) h->nindex * 4);
    for (size_t i = 0; i < n;) {
        const size_t m = rl_sync_batch(out + i, n - i);
        int64_t last = out[i].end;
        for (size_t j = i; j < i + m; j++) {
            last = out[j].end > last ? out[j].end : last;
        }
        const uint64_t call = ++h->calls;
        const int64_t deadline = (last < now_ms + RL_SYNC_DOUBT_MS ? last : now_ms + RL_SYNC_DOUBT_MS) + kAfterMs;
        for (size_t j = i; j < i + m; j++) {
            out[j].call = call;
            out[j].deadline = deadline;
        }
        i += m;
    }
    return n;
}

}  // namespace

size_t rl_sync_take(void *sync, int64_t now_ms, int64_t interval_ms, rl_sync_item_t *out, int *due)
{
    SyncJournal *h = journal_of(sync);
    *due = 0;
    // a clock that stepped back more than an interval: due now
    if (!urgent(h) && now_ms < h->next_ms && h->next_ms - now_ms <= interval_ms) {
        return 0;
    }
    *due = 1;
    h->next_ms = now_ms + interval_ms;
    const rl_sync_item_t *items = items_of(h);
    bool doubt = false;
    for (uint32_t i = 0; i < h->used && !doubt; i++) {
        doubt = items[i].call != 0;
    }
    size_t n = doubt ? take_doubt(h, now_ms, out) : 0;
    if (n == 0) {
        n = take_fresh(h, now_ms, out);
    }
    __atomic_store_n(&h->figures.pending, (uint64_t) h->used, __ATOMIC_RELAXED);
    return n;
}

void rl_sync_requeue(void *sync, const rl_sync_item_t *items, size_t n)
{
    SyncJournal *h = journal_of(sync);
    __atomic_store_n(&h->failing, 1u, __ATOMIC_RELAXED);
    for (size_t i = 0; i < n; i++) {
        const rl_sync_item_t &it = items[i];
        if (!add(h, it, [&it](char *name) { std::memcpy(name, it.name, RL_REDIS_HASH_LEN); })) {
            bump(h->figures.dropped, it.units);
        }
    }
    __atomic_store_n(&h->figures.pending, (uint64_t) h->used, __ATOMIC_RELAXED);
}

void rl_sync_record(void *sync, size_t keys, uint64_t units, uint64_t failures, uint64_t dropped, int64_t lag_ms,
                    int64_t now_ms)
{
    if (failures == 0 && lag_ms >= 0) {
        __atomic_store_n(&journal_of(sync)->failing, 0u, __ATOMIC_RELAXED);
    }
    rl_sync_figures_t &f = journal_of(sync)->figures;
    bump(f.keys, keys);
    bump(f.units, units);
    bump(f.failures, failures);
    bump(f.dropped, dropped);
    if (lag_ms >= 0) {
        bump(f.exchanges, 1);
        __atomic_store_n(&f.lag_ms, lag_ms, __ATOMIC_RELAXED);
        __atomic_store_n(&f.last_ms, now_ms, __ATOMIC_RELAXED);
    }
}

void rl_sync_get_figures(const void *sync, rl_sync_figures_t *out)
{
    const rl_sync_figures_t &f = static_cast<const SyncJournal *>(sync)->figures;
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
    // per part: '$', up to 20 digits, 2 CRLFs, the bytes; the marker, now
    // and the deadline
    return 64 + script_len + n * (5 * 24 + prefix_len + 2 + RL_REDIS_HASH_LEN + 24 + 4 * 20) +
           (24 + prefix_len + 2 + 32) + 24 * 4;
}

size_t rl_sync_command(char *buf, const char *script, size_t script_len, int eval, const char *prefix,
                       size_t prefix_len, uint64_t nonce, const rl_sync_item_t *items, size_t n, int64_t now_ms)
{
    rl::Writer w{buf};
    w.length_line('*', 3 + 1 + n + 2 + 4 * n);
    if (eval) {
        w.arg("EVAL", 4);
    } else {
        w.arg("EVALSHA", 7);
    }
    w.arg(script, script_len);
    w.arg((int64_t) n + 1);
    // the call's marker: its id, the nonce and the call's number in hex
    char id[32];
    for (int i = 0; i < 16; i++) {
        id[i] = "0123456789abcdef"[(nonce >> (60 - 4 * i)) & 15];
        id[16 + i] = "0123456789abcdef"[(items[0].call >> (60 - 4 * i)) & 15];
    }
    w.length_line('$', prefix_len + 2 + sizeof(id));
    w.raw(prefix, prefix_len);
    w.raw("c:", 2);
    w.raw(id, sizeof(id));
    w.raw("\r\n", 2);
    for (size_t i = 0; i < n; i++) {
        // a window the same everywhere: its key's, named by its end
        char end[24];
        rl::Writer e{end};
        if (items[i].aligned) {
            *e.p++ = ':';
            e.number(items[i].end);
        }
        w.length_line('$', prefix_len + 2 + RL_REDIS_HASH_LEN + (size_t) (e.p - end));
        w.raw(prefix, prefix_len);
        w.raw("s:", 2);
        w.raw(items[i].name, RL_REDIS_HASH_LEN);
        w.raw(end, (size_t) (e.p - end));
        w.raw("\r\n", 2);
    }
    w.arg(now_ms);
    w.arg(items[0].deadline);
    for (size_t i = 0; i < n; i++) {
        w.arg((int64_t) items[i].units);
        w.arg(items[i].end);
        w.arg(items[i].ticks > 0 ? items[i].tick : (int64_t) 0);
        w.arg(items[i].ticks > 0 ? (int64_t) items[i].ticks : items[i].aligned ? -1 : 0);
    }
    return (size_t) (w.p - buf);
}

size_t rl_sync_batch(const rl_sync_item_t *items, size_t n)
{
    size_t i = 0, ints = 0;
    for (; i < n && i < RL_SYNC_BATCH; i++) {
        if (items[i].call != items[0].call) {
            break;  // a call is sent as it was made, alone
        }
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
        m += items[i].ticks > 0 ? items[i].ticks + 1 : 1;
    }
    return m;
}

int rl_sync_answer(const rl_resp_t *r, const rl_sync_item_t *items, size_t n, int64_t now_ms, rl_sync_total_t *totals,
                   int *status, char *why, size_t whylen)
{
    if (r->type == RL_RESP_ERROR) {
        if (r->str_len >= 8 && std::memcmp(r->str, "NOSCRIPT", 8) == 0) {
            return RL_REDIS_NOSCRIPT;
        }
        rl::fail(why, whylen, "an error reply to the exchange");
        return rl::is_readonly(*r) ? RL_REDIS_READONLY : RL_REDIS_FAILED;
    }
    // what the call did, then a count item's window's end and total, a
    // tick item's window's counts
    size_t want = 1;
    for (size_t i = 0; i < n; i++) {
        want += reply_ints(items[i]);
    }
    if (r->type != RL_RESP_ARRAY || !r->integers || r->integer != (int64_t) want || r->nitems != want) {
        rl::fail(why, whylen, "not an array of %zu integers", want);
        return RL_REDIS_FAILED;
    }
    if (r->items[0] != RL_SYNC_ADDED && r->items[0] != RL_SYNC_SEEN && r->items[0] != RL_SYNC_LATE) {
        rl::fail(why, whylen, "a call that did %lld", (long long) r->items[0]);
        return RL_REDIS_FAILED;
    }
    *status = (int) r->items[0];
    const int64_t most = 4ll * RL_LIMIT_MAX;
    const int64_t *v = r->items + 1;
    for (size_t i = 0; i < n; i++) {
        if (items[i].ticks > 0) {
            for (int64_t j = items[i].tick - items[i].ticks; j <= items[i].tick; j++, v++) {
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

// A count by ticks: an item's ticks folded into its key's block by its
// algorithm's record, each tick counting the fleet's units plus what this
// server spent in it since.
void apply_ticks(SyncJournal *h, rl::Table *t, const rl_sync_item_t &it, const rl_sync_total_t *ticks, int64_t now_ms)
{
    uint64_t at[RL_BUCKETS_MAX + 1];
    const uint64_t most = UINT32_MAX;
    for (uint32_t j = 0; j <= it.ticks; j++) {
        uint64_t since = 0;
        // a tick in doubt keeps its own count (0: the largest is its own)
        const uint64_t c = unsent(h, it.tag, ticks[j].end, &since) ? ticks[j].total + since : 0;
        at[j] = c < most ? c : most;
    }
    const int pool = t->pool_for(it.block);
    if (pool < 0) {
        return;  // no pool for the rule's blocks: its keys are decided as cold
    }
    rl::State found{};
    rl::Table::Ref ref{};
    const rl::Debt debt = t->find(it.tag, &found, &ref) ? rl::Table::debt(ref) : rl::Debt{0, false};
    rl::State s = t->acquire(it.tag, pool, now_ms);
    rl::algorithm_of(it.algorithm).merge(it, s, at);
    t->set_t(it.tag, s.head.t, debt);
}

}  // namespace

void rl_sync_apply(void *sync, void *table, const rl_sync_item_t *items, const rl_sync_total_t *totals, size_t n,
                   int64_t now_ms)
{
    SyncJournal *h = journal_of(sync);
    rl::Table *t = rl::Table::at(table);
    t->recover();
    for (size_t i = 0; i < n; i++) {
        if (items[i].ticks > 0) {
            if (items[i].end > now_ms) {
                apply_ticks(h, t, items[i], totals, now_ms);
            }
            totals += items[i].ticks + 1;
            continue;
        }
        const rl_sync_total_t &fleet = *totals++;
        if (fleet.end <= now_ms) {
            continue;  // that window is over here
        }
        uint64_t since = 0;
        if (!unsent(h, items[i].tag, -1, &since)) {
            continue;  // its units in a call in doubt: folded once it is answered
        }
        uint64_t count = fleet.total + since;
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
