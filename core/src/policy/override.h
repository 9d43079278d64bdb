// The overrides a request meets (override.cpp), for rl_decide and for a
// Redis zone's request before it is sent.
#pragma once

#include "overrides/store.h"
#include "policy/request.h"
#include "ratelimit.h"
#include "table/table.h"

namespace rl {

// Whether any table of the request holds overrides, or a check met one
// when it was decided before (a request decided again).
bool any_overrides(const rl_request_t &rq);

// Each check's override found and applied (rl_check_t's override fields):
// a limit override's rule in rq.room's memory, an allow override's check
// exempt, a deny override's noted.  True if a check is denied.  The caller
// holds the locks.
bool resolve_overrides(rl_request_t &rq, int64_t now);

// The check's override found and applied (inline: a request of one rule
// meets it without a call, and most meet none).  True if it denies.
inline bool resolve_check(rl_request_t &rq, rl_check_t &c, int64_t now);

// A decision refused by a deny override that ends at until (0: never):
// Retry-After its end, or none.
void deny_decision(rl_decision_t &d, int64_t until, int64_t now);

// The parts of resolve_check most requests never reach (override.cpp).
void unmeet(rl_check_t &c);
void ended(Table &table, Store &st, rl_check_t &c, const OverrideEntry *e);
const OverrideEntry *find_text_address(const Table &table, const Store &st, const rl_check_t &c, int64_t now);

// The longest range holding the check's key, a client's address: as the
// key's bytes ($binary_remote_addr), or read from its text.  Most addresses
// stop at the store's filter.
inline const OverrideEntry *find_address(const Table &table, const Store &st, const rl_check_t &c, int64_t now)
{
    if (c.rule->key_addr != RL_KEY_ADDR_BINARY) {
        return find_text_address(table, st, c, now);
    }
    const uint8_t *addr = static_cast<const uint8_t *>(c.key);
    const int family = c.key_len == 4 ? 4 : c.key_len == 16 ? 6 : 0;
    return family == 0 || st.filtered_out(family, addr) ? nullptr : st.find_range(table, family, addr, c.identity, now);
}

inline bool live(const OverrideEntry *e, int64_t now)
{
    return e != nullptr && (e->ov.expires_ms == 0 || e->ov.expires_ms > now);
}

// The override of the check's key: its own in its rule (an expired limit
// override carried back and removed on the way), else its own in every
// rule keyed on the rule's expression, else the longest range holding its
// client's address.
__attribute__((always_inline)) inline const OverrideEntry *find_for(Table &table, Store &st, rl_check_t &c, int64_t now)
{
    const OverrideEntry *e = nullptr;
    if (st.keys()) {
        const OverrideEntry *every = nullptr;
        e = st.find_key(c.hash, c.identity, c.rule->keyed, &every);
        if (__builtin_expect(e != nullptr, 0) && !live(e, now)) {
            ended(table, st, c, e);
            e = nullptr;
            every = st.find(c.hash, c.rule->keyed);
        }
        e = e != nullptr ? e : live(every, now) ? every : nullptr;
    }
    if (e == nullptr && c.rule->key_addr && st.ranges()) {
        e = find_address(table, st, c, now);
    }
    return e;
}

// What the check does with the override it met.
__attribute__((always_inline)) inline void meet(rl_request_t &rq, rl_check_t &c, const Store &st,
                                                const OverrideEntry &e)
{
    const rl_override_t &ov = e.ov;
    if (ov.kind == RL_OVERRIDE_LIMIT) {
        rl_rule_room_t *room = rq.room;
        rq.room = nullptr;
        if (room == nullptr && (rq.more_room == nullptr || (room = rq.more_room(&rq)) == nullptr)) {
            return;  // not applied
        }
        const uint64_t change = st.change();
        if (room->entry != &e || room->configured != c.rule || room->change != change) {
            apply_override(*c.rule, ov, room->rule);
            room->entry = &e;
            room->configured = c.rule;
            room->change = change;
        }
        c.configured = c.rule;
        c.rule = &room->rule;
        c.since = ov.created_ms;
    } else if (ov.kind == RL_OVERRIDE_DENY) {
        c.until = ov.expires_ms;
    } else {
        c.key_held = (uint32_t) c.key_len;
        c.key_len = 0;  // exempt, as an empty key is
    }
    c.override = (uint32_t) ov.kind | (every_rule(ov.target) ? RL_OVERRIDE_EVERY_RULE : 0) |
                 (ov.target.family ? (ov.target.prefix + 1) << 8 : 0);
    rq.overridden++;
}

__attribute__((always_inline)) inline bool resolve_check(rl_request_t &rq, rl_check_t &c, int64_t now)
{
    if (__builtin_expect((int64_t) c.override | c.since, 0)) {
        unmeet(c);  // decided again (a request waiting for a slot)
    }
    Table &table = *Table::at(c.table);
    const uint64_t at = table.layout().overrides_live;
    if (at == 0 || !applies(c)) {
        return false;
    }
    Store &st = *reinterpret_cast<Store *>(reinterpret_cast<char *>(&table) + at);
    const OverrideEntry *e = find_for(table, st, c, now);
    if (__builtin_expect(e == nullptr, 1)) {
        return false;
    }
    meet(rq, c, st, *e);
    return e->ov.kind == RL_OVERRIDE_DENY;
}

}  // namespace rl
