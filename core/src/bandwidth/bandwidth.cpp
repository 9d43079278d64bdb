// Bandwidth: a byte rate per key, shared by the key's connections
// (ratelimit_bandwidth.h).  The rule's parameters, the grant of a slice
// (pure), and the key's entry in the zone's table.
//
// The key's entry is a slot of the table as any key's: its t is the key's
// TAT in milliseconds (so that the table's eviction sees a key back to
// full budget once its TAT is past, as for a request rule's key), and its
// n the TAT's microseconds within that millisecond (10 bits) and the
// key's connections in flight (the other 22).  An entry evicted loses at
// most its burst: its key starts again as an idle one.
#include <cstring>

#include "ratelimit_bandwidth.h"
#include "table/table.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/siphash.h"

namespace rl {

namespace {

constexpr uint32_t kFracBits = 10;
constexpr uint32_t kFracMask = (1u << kFracBits) - 1;
constexpr uint32_t kConnectionsMax = (1u << (32 - kFracBits)) - 1;

// the parameters, a bit each, for "each may be given once"
constexpr uint32_t kRate = 1, kBurst = 2, kDirection = 4, kName = RL_BANDWIDTH_NAMED, kAfter = 16;

struct Entry {
    int64_t tat_us;
    uint32_t connections;
};

Entry unpack(const rl_state_t &head)
{
    return Entry{head.t * 1000 + (int64_t) (head.n & kFracMask), head.n >> kFracBits};
}

rl_state_t pack(const Entry &e)
{
    // floor division: a TAT before the epoch never occurs (now_us is
    // wall-clock time), but stays exact if it did
    int64_t ms = e.tat_us / 1000;
    int64_t us = e.tat_us % 1000;
    if (us < 0) {
        ms--;
        us += 1000;
    }
    const uint32_t c = e.connections < kConnectionsMax ? e.connections : kConnectionsMax;
    return rl_state_t{ms, (uint32_t) us | c << kFracBits};
}

// Microseconds that `bytes` take at `rate`, rounded up (a slice never
// costs less than it sends); bytes and rate at most RL_BANDWIDTH_MAX
// (2^37), so bytes * 10^6 fits in 64 bits.
int64_t cost_us(uint64_t bytes, uint64_t rate)
{
    return (int64_t) ((bytes * 1000000 + rate - 1) / rate);
}

// The furthest ahead of now a key's slices can put its TAT: its burst,
// and a slice (or a whole datagram, up to 64 KB) for each of its
// connections and one more.  A TAT beyond it is the wall clock stepped
// back (or a state written by a clock ahead of this one): read as that
// far, so that a step back of an hour stalls the key for no more than
// its own slices' time.
int64_t tat_within_reach(const Entry &e, int64_t now_us, uint64_t rate, uint64_t burst)
{
    const uint64_t slice = rl_bandwidth_slice(rate);
    const int64_t each = cost_us(slice > 65536 ? slice : 65536, rate);
    const int64_t reach = now_us + cost_us(burst, rate) + ((int64_t) e.connections + 1) * each;
    return e.tat_us > reach ? reach : e.tat_us;
}

bool starts_with(const char *p, size_t len, const char *prefix, size_t *value)
{
    const size_t n = std::strlen(prefix);
    if (len < n || std::memcmp(p, prefix, n) != 0) {
        return false;
    }
    *value = n;
    return true;
}

void add(uint64_t &n, uint64_t v)
{
    __atomic_store_n(&n, __atomic_load_n(&n, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

}  // namespace

}  // namespace rl

extern "C" {

int rl_bandwidth_size(const char *text, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20) {
        return RL_ERROR;
    }
    uint64_t scale = 1;
    switch (text[len - 1]) {
    case 'k':
    case 'K':
        scale = 1024;
        len--;
        break;
    case 'm':
    case 'M':
        scale = 1024 * 1024;
        len--;
        break;
    case 'g':
    case 'G':
        scale = 1024 * 1024 * 1024;
        len--;
        break;
    default:
        break;
    }
    uint64_t v = 0;
    if (!rl::decimal(text, len, RL_BANDWIDTH_MAX / scale, &v) || v == 0) {
        return RL_ERROR;
    }
    *out = v * scale;
    return RL_OK;
}

void rl_bandwidth_init(rl_bandwidth_rule_t *rule)
{
    std::memset(rule, 0, sizeof(*rule));
    std::memcpy(rule->name, "bandwidth", sizeof("bandwidth"));
}

int rl_bandwidth_param(rl_bandwidth_rule_t *rule, const char *p, size_t len, char *err, size_t errlen)
{
    size_t at = 0;
    uint32_t bit = 0;
    if (rl::starts_with(p, len, "rate=", &at)) {
        bit = rl::kRate;
    } else if (rl::starts_with(p, len, "burst=", &at)) {
        bit = rl::kBurst;
    } else if (rl::starts_with(p, len, "after=", &at)) {
        bit = rl::kAfter;
    } else if (rl::starts_with(p, len, "direction=", &at)) {
        bit = rl::kDirection;
    } else if (rl::starts_with(p, len, "name=", &at)) {
        bit = rl::kName;
    } else {
        return rl::fail(
            err, errlen,
            "unknown parameter \"%.*s\": expected rate=, burst=, after=, direction=, name= (and zone=, key=)",
            (int) (len < 64 ? len : 64), p);
    }
    if (rule->seen & bit) {
        return rl::fail(err, errlen, "duplicate parameter \"%.*s\": each parameter may be given once",
                        (int) (len < 64 ? len : 64), p);
    }
    rule->seen |= bit;
    const char *v = p + at;
    const size_t vlen = len - at;

    switch (bit) {
    case rl::kRate:
        if (vlen > 1 && v[0] == '$') {
            rule->rate_varies = 1;
            rule->rate = 0;
            return RL_OK;
        }
        if (rl_bandwidth_size(v, vlen, &rule->rate) != RL_OK) {
            return rl::fail(err, errlen,
                            "invalid rate \"%.*s\": expected bytes a second from 1 to 100g, in nginx's units "
                            "(512k, 1m, 2g), or a variable ($plan_rate)",
                            (int) (vlen < 64 ? vlen : 64), v);
        }
        return RL_OK;
    case rl::kBurst:
    case rl::kAfter: {
        uint64_t *size = bit == rl::kBurst ? &rule->burst : &rule->after;
        if (vlen == 1 && v[0] == '0') {
            *size = 0;
            return RL_OK;
        }
        if (rl_bandwidth_size(v, vlen, size) != RL_OK) {
            return rl::fail(err, errlen,
                            "invalid %s \"%.*s\": expected bytes from 0 to 100g, in nginx's units (512k, 4m)",
                            bit == rl::kBurst ? "burst" : "after", (int) (vlen < 64 ? vlen : 64), v);
        }
        return RL_OK;
    }
    case rl::kDirection:
        if (vlen == 3 && std::memcmp(v, "out", 3) == 0) {
            rule->direction = RL_BANDWIDTH_OUT;
        } else if (vlen == 2 && std::memcmp(v, "in", 2) == 0) {
            rule->direction = RL_BANDWIDTH_IN;
        } else if (vlen == 4 && std::memcmp(v, "both", 4) == 0) {
            rule->direction = RL_BANDWIDTH_BOTH;
        } else {
            return rl::fail(err, errlen,
                            "invalid direction \"%.*s\": expected \"out\" (toward the client), \"in\" (from it) "
                            "or \"both\"",
                            (int) (vlen < 64 ? vlen : 64), v);
        }
        return RL_OK;
    default:
        if (!rl_name_valid(v, vlen)) {
            return rl::fail(err, errlen, "invalid name \"%.*s\": expected " RL_NAME_EXPECTED,
                            (int) (vlen < 64 ? vlen : 64), v);
        }
        std::memcpy(rule->name, v, vlen);
        rule->name[vlen] = '\0';
        return RL_OK;
    }
}

int rl_bandwidth_finish(rl_bandwidth_rule_t *rule, char *err, size_t errlen)
{
    if (!(rule->seen & rl::kRate)) {
        return rl::fail(err, errlen,
                        "rate= is missing: expected bytes a second (rate=1m) or a variable (rate=$plan_rate)");
    }
    return RL_OK;
}

uint64_t rl_bandwidth_slice(uint64_t rate)
{
    const uint64_t s = rate / 10;
    return s < RL_BANDWIDTH_SLICE_MIN   ? RL_BANDWIDTH_SLICE_MIN
           : s > RL_BANDWIDTH_SLICE_MAX ? RL_BANDWIDTH_SLICE_MAX
                                        : s;
}

uint64_t rl_bandwidth_ask(uint64_t rate, uint64_t held, uint64_t avail, int whole)
{
    const uint64_t slice = rl_bandwidth_slice(rate);
    const uint64_t least = slice / 10;
    const uint64_t need = held > avail ? held - avail : 0;
    if (whole) {
        return need > least ? need : least;
    }
    return need < least ? least : need > slice ? slice : need;
}

rl_bandwidth_grant_t rl_bandwidth_grant(int64_t tat_us, int64_t now_us, uint64_t bytes, uint64_t rate, uint64_t burst)
{
    // A slice waits while the key's slices granted before it end more
    // than burst / rate from now; it then takes its own time after them
    // (or after now, for a key idle since).
    const int64_t tau = rl::cost_us(burst, rate);
    const int64_t due = tat_us - tau;
    const int64_t start = tat_us > now_us ? tat_us : now_us;
    return rl_bandwidth_grant_t{start + rl::cost_us(bytes, rate), due > now_us ? due - now_us : 0};
}

int64_t rl_bandwidth_give_back(int64_t tat_us, int64_t now_us, uint64_t bytes, uint64_t rate)
{
    if (tat_us <= now_us) {
        return tat_us;
    }
    const int64_t back = tat_us - rl::cost_us(bytes, rate);
    return back > now_us ? back : now_us;
}

uint64_t rl_bandwidth_identity(const char *name, const char *key, size_t key_len)
{
    static const uint8_t k[16] = {'n', 'g', 'x', '-', 'r', 'l', '-', 'b', 'a', 'n', 'd', 'w', 'i', 'd', 't', 'h'};
    rl::SipHash h(k);
    h.update(name, std::strlen(name) + 1);
    h.update(key, key_len);
    return h.finish();
}

void rl_bandwidth_open(void *table, int slot, uint64_t tag, int64_t now_us)
{
    rl::Table *t = rl::Table::at(table);
    t->recover();
    rl::State s{};
    rl::Entry e{now_us, 0};
    if (t->find(tag, &s)) {
        e = rl::unpack(s.head);
    }
    e.connections++;
    t->store(tag, rl::pack(e), rl::Debt{0, false}, now_us / 1000);
    if (slot >= 0 && (uint32_t) slot < t->layout().rules_max) {
        __atomic_add_fetch(&t->counters()[slot].connections, 1, __ATOMIC_RELAXED);
    }
}

int64_t rl_bandwidth_take(void *table, int slot, uint64_t tag, int64_t now_us, uint64_t bytes, uint64_t rate,
                          uint64_t burst)
{
    rl::Table *t = rl::Table::at(table);
    t->recover();
    rl::State s{};
    rl::Table::Ref ref{};
    rl::Entry e{now_us, 0};
    const bool found = t->find(tag, &s, &ref);
    if (found) {
        e = rl::unpack(s.head);
        e.tat_us = rl::tat_within_reach(e, now_us, rate, burst);
    }
    const rl_bandwidth_grant_t g = rl_bandwidth_grant(e.tat_us, now_us, bytes, rate, burst);
    e.tat_us = g.tat_us;
    if (found) {
        rl::Table::update(ref, rl::pack(e), rl::Debt{0, false});
    } else {
        t->store(tag, rl::pack(e), rl::Debt{0, false}, now_us / 1000);
    }
    if (slot >= 0 && (uint32_t) slot < t->layout().rules_max) {
        // the bytes of the second they are granted in
        rl::RuleCounters &r = t->counters()[slot];
        const int64_t second = now_us / 1000000;
        if (second > r.second) {
            __atomic_store_n(&r.previous_bytes, second == r.second + 1 ? r.second_bytes : 0, __ATOMIC_RELAXED);
            __atomic_store_n(&r.second_bytes, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&r.second, second, __ATOMIC_RELAXED);
        }
        if (second == r.second) {
            rl::add(r.second_bytes, bytes);
        }
        rl::add(r.bytes, bytes);
        // the top keys by bytes: KiB, rounded up, a grant's weight
        if (rl::TopList *l = t->top_list(slot, true, false)) {
            l->kib = 1;
            const uint64_t kib = (bytes + 1023) / 1024;
            l->note(tag, nullptr, 0, now_us / 1000, kib < UINT32_MAX ? (uint32_t) kib : UINT32_MAX);
        }
    }
    return g.wait_us;
}

void rl_bandwidth_close(void *table, int slot, uint64_t tag, int64_t now_us, uint64_t unsent, uint64_t rate)
{
    rl::Table *t = rl::Table::at(table);
    t->recover();
    rl::State s{};
    rl::Table::Ref ref{};
    if (t->find(tag, &s, &ref)) {
        rl::Entry e = rl::unpack(s.head);
        if (unsent > 0 && rate > 0) {
            e.tat_us = rl_bandwidth_give_back(e.tat_us, now_us, unsent, rate);
        }
        e.connections -= e.connections > 0;
        rl::Table::update(ref, rl::pack(e), rl::Debt{0, false});
    }
    if (slot >= 0 && (uint32_t) slot < t->layout().rules_max) {
        __atomic_sub_fetch(&t->counters()[slot].connections, 1, __ATOMIC_RELAXED);
    }
}

void rl_bandwidth_count_delayed(void *table, int slot, int delta)
{
    rl::Table *t = rl::Table::at(table);
    if (slot >= 0 && (uint32_t) slot < t->layout().rules_max) {
        __atomic_add_fetch(&t->counters()[slot].delayed, delta, __ATOMIC_RELAXED);
    }
}

void rl_bandwidth_peek(const void *table, uint64_t tag, int64_t now_us, rl_bandwidth_peek_t *out)
{
    const rl::Table *t = rl::Table::at(table);
    rl::State s{};
    std::memset(out, 0, sizeof(*out));
    if (!t->find(tag, &s)) {
        return;
    }
    const rl::Entry e = rl::unpack(s.head);
    out->held = 1;
    out->connections = e.connections;
    out->ahead_us = e.tat_us > now_us ? e.tat_us - now_us : 0;
}

void rl_bandwidth_rates(rl_rule_stats_t *stats, size_t n, int64_t now_ms)
{
    const uint64_t second = (uint64_t) (now_ms / 1000);
    for (size_t i = 0; i < n; i++) {
        rl_rule_stats_t &r = stats[i];
        // the last whole second: the one before now's
        r.bytes_per_second = r.second + 1 == second ? r.second_bytes : r.second == second ? r.previous_bytes : 0;
    }
}

}  // extern "C"
