// A zone's overrides: the store's layout, its index and its prefix lengths
// (store.h says how an override is found).
#include "overrides/store.h"

#include <arpa/inet.h>

#include <cstring>

#include "algorithms/algorithm.h"
#include "table/table.h"
#include "util/address.h"
#include "util/mix.h"

namespace rl {

namespace {

const char kMagic[8] = {'r', 'l', 'o', 'v', 'e', 'r', 'r', '1'};
const uint32_t kVersion = 5;

uint32_t index_size_for(uint32_t capacity)
{
    uint32_t n = 16;
    while (n < 4 * (uint64_t) capacity) {
        n <<= 1;
    }
    return n;
}

int family_slot(int family)
{
    return family == 6 ? 1 : 0;
}

// The bits of an address above a prefix length, the rest zero.
void mask_address(const uint8_t *addr, int family, uint32_t prefix, uint8_t out[16])
{
    const uint32_t bytes = family == 6 ? 16 : 4;
    std::memset(out, 0, 16);
    for (uint32_t i = 0; i < bytes; i++) {
        const uint32_t bits = prefix > 8 * i ? prefix - 8 * i : 0;
        out[i] = bits >= 8 ? addr[i] : (uint8_t) (addr[i] & (uint8_t) (0xff00u >> bits));
    }
}

uint64_t word(const uint8_t *p)
{
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
}

}  // namespace

size_t Store::bytes(uint32_t capacity)
{
    return sizeof(StoreBooks) + (size_t) index_size_for(capacity) * sizeof(IndexSlot) +
           (size_t) capacity * sizeof(OverrideEntry);
}

Store *Store::of(Table *table)
{
    const uint64_t off = table->layout().overrides;
    return off ? reinterpret_cast<Store *>(reinterpret_cast<char *>(table) + off) : nullptr;
}

const Store *Store::of(const Table *table)
{
    return of(const_cast<Table *>(table));
}

void Store::init(uint32_t capacity)
{
    std::memset(&h_, 0, sizeof(h_));
    std::memcpy(h_.magic, kMagic, sizeof(kMagic));
    h_.version = kVersion;
    h_.capacity = capacity;
    h_.index_size = index_size_for(capacity);
    h_.entries_at = entries_offset(h_.index_size);
    h_.change = 1;
}

bool Store::valid(uint32_t capacity) const
{
    return std::memcmp(h_.magic, kMagic, sizeof(kMagic)) == 0 && h_.version == kVersion && h_.capacity == capacity &&
           h_.index_size == index_size_for(capacity) && h_.entries_at == entries_offset(h_.index_size);
}

uint64_t Store::range_hash(const Table &table, int family, uint32_t prefix, const uint8_t *addr)
{
    // a cheap hash under the table's secret: ranges are few and the
    // operator's, and an entry found is compared with the target
    const uint8_t *k = table.layout().secret;
    uint64_t h = splitmix64_mix(word(k) ^ ((uint64_t) family << 8 | prefix));
    h = splitmix64_mix(h ^ word(addr));
    if (family == 6) {
        h = splitmix64_mix(h ^ word(addr + 8) ^ word(k + 8));
    }
    return h;
}

uint64_t Store::tag_of(const Table &table, const rl_override_target_t &t, uint64_t identity)
{
    if (t.family == 0) {
        return table.hash(t.key, t.key_len);  // whatever the rule
    }
    return Table::of_hash(range_hash(table, t.family, t.prefix, t.key), identity);
}

uint64_t Store::key_tag(const OverrideEntry &e)
{
    return Table::of_hash(e.tag, e.identity);
}

void Store::index_put(uint64_t tag, uint32_t entry)
{
    IndexSlot *ix = index();
    const uint32_t mask = h_.index_size - 1;
    for (uint32_t i = (uint32_t) tag & mask;; i = (i + 1) & mask) {
        if (ix[i].entry == 0 || ix[i].entry == kTomb) {
            h_.tombs -= ix[i].entry == kTomb;
            ix[i].tag = tag;
            ix[i].entry = entry + 1;
            return;
        }
    }
}

void Store::index_drop(uint64_t tag, uint32_t entry)
{
    IndexSlot *ix = index();
    const uint32_t mask = h_.index_size - 1;
    for (uint32_t i = (uint32_t) tag & mask; ix[i].entry != 0; i = (i + 1) & mask) {
        if (ix[i].entry == entry + 1) {
            ix[i].entry = kTomb;
            h_.tombs++;
            break;
        }
    }
    // the index at most a quarter full of entries, and probes short: once
    // removals have left as many marks as there are entries, made anew
    if (h_.tombs > h_.capacity) {
        rebuild();
    }
}

void Store::rebuild()
{
    std::memset(index(), 0, (size_t) h_.index_size * sizeof(IndexSlot));
    h_.tombs = 0;
    const OverrideEntry *e = entries();
    for (uint32_t i = 0; i < h_.fresh; i++) {
        if (e[i].tag != 0) {
            index_put(e[i].tag, i);
        }
    }
}

uint64_t every_identity(const rl_override_target_t &t)
{
    return t.family != 0 ? kEveryRule : rl_rule_keyed(t.keyed, std::strlen(t.keyed));
}

void Store::count_kind(const OverrideEntry &e, int delta)
{
    uint32_t &n = e.ov.target.family ? h_.ranges : every_rule(e.ov.target) ? h_.keys_every : h_.keys_rule;
    n = (uint32_t) ((int64_t) n + delta);
}

void Store::note_length(const OverrideEntry &e, int delta)
{
    if (e.ov.target.family == 0) {
        return;
    }
    PrefixLengths &l = h_.lengths[family_slot(e.ov.target.family)];
    const int every = e.identity == kEveryRule ? 1 : 0;
    const uint32_t p = e.ov.target.prefix;
    l.count[every][p] = (uint32_t) ((int64_t) l.count[every][p] + delta);
    if (l.count[every][p] != 0) {
        l.mask[every][p / 64] |= 1ull << (p % 64);
    } else {
        l.mask[every][p / 64] &= ~(1ull << (p % 64));
    }
}

namespace {

}  // namespace

uint32_t Store::v6_bit(const uint8_t *addr)
{
    uint32_t top;
    std::memcpy(&top, addr, 4);
    return (uint32_t) (splitmix64_mix(top) % kFilterBits);
}

namespace {

void set_bit(uint64_t *bits, uint32_t i)
{
    bits[i / 64] |= 1ull << (i % 64);
}

}  // namespace

void Store::filter_add(const OverrideEntry &e)
{
    const rl_override_target_t &t = e.ov.target;
    Filters &f = h_.filters;
    if (t.family == 4) {
        // every /16 the range covers
        const uint32_t first = (uint32_t) t.key[0] << 8 | t.key[1];
        const uint32_t count = t.prefix >= 16 ? 1u : 1u << (16 - t.prefix);
        for (uint32_t i = 0; i < count; i++) {
            set_bit(f.v4, first + i);
        }
    } else if (t.family == 6) {
        if (t.prefix < 32) {
            f.v6_short++;
        } else {
            set_bit(f.v6, v6_bit(t.key));
        }
    }
}

void Store::filters_rebuild()
{
    std::memset(&h_.filters, 0, sizeof(h_.filters));
    const OverrideEntry *e = entries();
    for (uint32_t i = 0; i < h_.fresh; i++) {
        if (e[i].tag != 0) {
            filter_add(e[i]);
        }
    }
}

bool Store::has_ranges(int family) const
{
    const PrefixLengths &l = h_.lengths[family_slot(family)];
    for (int w = 0; w < 3; w++) {
        if (l.mask[0][w] | l.mask[1][w]) {
            return true;
        }
    }
    return false;
}

const OverrideEntry *Store::find_range(const Table &table, int family, const uint8_t *addr, uint64_t identity,
                                       int64_t now) const
{
    const PrefixLengths &l = h_.lengths[family_slot(family)];
    const int top = family == 6 ? 128 : 32;
    uint8_t net[16];
    for (int w = top / 64; w >= 0; w--) {
        uint64_t m = l.mask[0][w] | l.mask[1][w];
        while (m != 0) {
            const int bit = 63 - __builtin_clzll(m);
            m &= ~(1ull << bit);
            const uint32_t prefix = (uint32_t) (w * 64 + bit);
            mask_address(addr, family, prefix, net);
            const uint64_t h = range_hash(table, family, prefix, net);
            // this rule's range first, then every rule's, at each length
            for (int every = 0; every < 2; every++) {
                if (!(l.mask[every][w] >> bit & 1)) {
                    continue;
                }
                const uint64_t id = every ? kEveryRule : identity;
                const OverrideEntry *e = find(Table::of_hash(h, id), id);
                if (e != nullptr && e->ov.target.family == family && e->ov.target.prefix == prefix &&
                    std::memcmp(e->ov.target.key, net, family == 6 ? 16 : 4) == 0 &&
                    (e->ov.expires_ms == 0 || e->ov.expires_ms > now)) {
                    return e;
                }
            }
        }
    }
    return nullptr;
}

OverrideEntry *Store::lookup(const Table &table, const rl_override_target_t &t, uint64_t identity)
{
    const OverrideEntry *e = find(tag_of(table, t, identity), identity);
    if (e == nullptr || !same_target(e->ov.target, t)) {
        return nullptr;
    }
    return const_cast<OverrideEntry *>(e);
}

OverrideEntry *Store::add(const Table &table, const rl_override_target_t &t, uint64_t identity)
{
    uint32_t i;
    OverrideEntry *e = entries();
    if (h_.free_head != 0) {
        i = h_.free_head - 1;
        h_.free_head = (uint32_t) e[i].identity;  // a free entry's link
    } else if (h_.fresh < h_.capacity) {
        i = h_.fresh++;
    } else {
        return nullptr;
    }
    std::memset(&e[i], 0, sizeof(e[i]));
    e[i].identity = identity;
    e[i].ov.target = t;
    e[i].tag = tag_of(table, t, identity);
    index_put(e[i].tag, i);
    note_length(e[i], +1);
    count_kind(e[i], +1);
    filter_add(e[i]);
    h_.held++;
    return &e[i];
}

void Store::remove(OverrideEntry *e)
{
    const uint32_t i = (uint32_t) (e - entries());
    const bool range = e->ov.target.family != 0;
    index_drop(e->tag, i);
    note_length(*e, -1);
    count_kind(*e, -1);
    std::memset(e, 0, sizeof(*e));
    e->identity = h_.free_head;  // the free list's link
    h_.free_head = i + 1;
    h_.held--;
    if (range) {
        filters_rebuild();
    }
}

int64_t Store::next_expiry(int64_t after)
{
    // the soonest after next_after is the soonest after any later instant
    // it has not reached
    if (h_.next_valid && h_.next_after <= after && (h_.next_expiry == 0 || h_.next_expiry > after)) {
        return h_.next_expiry;
    }
    int64_t next = 0;
    const OverrideEntry *e = entries();
    for (uint32_t i = 0; i < h_.fresh; i++) {
        if (e[i].tag != 0 && e[i].ov.expires_ms > after && (next == 0 || e[i].ov.expires_ms < next)) {
            next = e[i].ov.expires_ms;
        }
    }
    h_.next_after = after;
    h_.next_expiry = next;
    h_.next_valid = 1;
    return next;
}

void Store::clear()
{
    std::memset(index(), 0, (size_t) h_.index_size * sizeof(IndexSlot));
    std::memset(entries(), 0, (size_t) h_.fresh * sizeof(OverrideEntry));
    std::memset(h_.lengths, 0, sizeof(h_.lengths));
    std::memset(&h_.filters, 0, sizeof(h_.filters));
    h_.held = h_.tombs = h_.free_head = h_.fresh = 0;
    h_.keys_rule = h_.keys_every = h_.ranges = 0;
}

void Store::retag(const Table &table, const rl_override_rule_t *rules, size_t n)
{
    OverrideEntry *e = entries();
    std::memset(h_.lengths, 0, sizeof(h_.lengths));
    h_.keys_rule = h_.keys_every = h_.ranges = 0;
    for (uint32_t i = 0; i < h_.fresh; i++) {
        if (e[i].tag == 0) {
            continue;
        }
        count_kind(e[i], +1);
        uint64_t identity = every_rule(e[i].ov.target) ? every_identity(e[i].ov.target) : 0;
        for (size_t r = 0; r < n && identity == 0; r++) {
            if (std::strcmp(rules[r].rule->name, e[i].ov.target.rule) == 0) {
                identity = rules[r].identity;
            }
        }
        e[i].identity = identity;
        e[i].tag = tag_of(table, e[i].ov.target, identity);
        note_length(e[i], +1);
    }
    rebuild();
    filters_rebuild();
}

void apply_override(const rl_rule_t &rule, const rl_override_t &ov, rl_rule_t &out)
{
    out = rule;
    if (ov.given & RL_OVERRIDE_GIVE_LIMIT) {
        out.limit = ov.limit;
        if (!(rule.given & P_BURST) || rule.burst_var) {
            out.burst = ov.limit;  // a burst not given follows the limit
        }
    }
    if (ov.given & RL_OVERRIDE_GIVE_BURST) {
        out.burst = ov.burst;
    }
    if (ov.given & RL_OVERRIDE_GIVE_PERIOD) {
        out.period_ms = ov.period_ms;
        const Algorithm &a = algorithm_of(out);
        if (a.follow != nullptr) {
            a.follow(out);  // a max_delay not given follows the period
        }
    }
    derive(out);
    if (out.block != rule.block) {
        // a state whose size follows the limit (a log of times) keeps its
        // size as configured: the override's limit applies within it, as
        // a variable limit's does within limit_max
        out.limit_var = 1;
        out.limit_max = rule.limit_var ? rule.limit_max : rule.limit;
        out.given |= P_LIMIT_MAX;
        derive(out);
    }
}

void carry_key(Table &table, uint64_t tag, const rl_rule_t &from, const rl_rule_t &to, int64_t at)
{
    const Algorithm &a = algorithm_of(to);
    State s{};
    Table::Ref ref;
    if (a.carry == nullptr || !table.find(tag, &s, &ref)) {
        return;
    }
    a.carry(from, to, s, at);
    if (s.blob != nullptr) {
        Table::update_t(ref, s.head.t, Table::debt(ref));
    } else {
        Table::update(ref, s.head, Table::debt(ref));
    }
}

bool same_target(const rl_override_target_t &a, const rl_override_target_t &b)
{
    return a.family == b.family && a.prefix == b.prefix && a.key_len == b.key_len &&
           std::memcmp(a.key, b.key, a.key_len) == 0 && std::strcmp(a.rule, b.rule) == 0 &&
           std::strcmp(a.keyed, b.keyed) == 0;
}

int client_address(const rl_rule_t &rule, const void *key, size_t len, uint8_t out[16])
{
    const size_t skip = mapped_prefix(rule.key_addr, key, len);
    key = static_cast<const char *>(key) + skip;
    len -= skip;
    if (rule.key_addr == RL_KEY_ADDR_BINARY) {
        if (len == 4 || len == 16) {
            std::memcpy(out, key, len);
            return len == 4 ? 4 : 6;
        }
        return 0;
    }
    char text[64];
    if (len == 0 || len >= sizeof(text)) {
        return 0;
    }
    std::memcpy(text, key, len);
    text[len] = '\0';
    if (inet_pton(AF_INET, text, out) == 1) {
        return 4;
    }
    return inet_pton(AF_INET6, text, out) == 1 ? 6 : 0;
}

}  // namespace rl
