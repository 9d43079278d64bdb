// The overrides a request meets (rl_decide, under the locks): for each check,
// the override of its key in its rule, else of its key in every rule, else
// the longest range holding its client's address (a rule keyed on it), its
// rule's first at each length.  An expired override applies no more; a
// limit override found expired carries its key back to the rule's
// parameters as at its expiry, and is removed.
#include "policy/override.h"

#include "overrides/store.h"
#include "policy/request.h"
#include "table/table.h"

namespace rl {

namespace {

bool live(const OverrideEntry *e, int64_t now)
{
    return e != nullptr && (e->ov.expires_ms == 0 || e->ov.expires_ms > now);
}

// The longest range holding the check's key, a client's address: as the
// key's bytes ($binary_remote_addr), or read from its text.  Most addresses
// stop at the store's filter.
__attribute__((noinline)) const OverrideEntry *find_text_address(const Table &table, const Store &st,
                                                                 const rl_check_t &c, int64_t now)
{
    uint8_t addr[16];
    const int family = client_address(*c.rule, c.key, c.key_len, addr);
    return family == 0 || st.filtered_out(family, addr) ? nullptr : st.find_range(table, family, addr, c.identity, now);
}

inline const OverrideEntry *find_address(const Table &table, const Store &st, const rl_check_t &c, int64_t now)
{
    if (c.rule->key_addr != RL_KEY_ADDR_BINARY) {
        return find_text_address(table, st, c, now);
    }
    const uint8_t *addr = static_cast<const uint8_t *>(c.key);
    const int family = c.key_len == 4 ? 4 : c.key_len == 16 ? 6 : 0;
    return family == 0 || st.filtered_out(family, addr) ? nullptr : st.find_range(table, family, addr, c.identity, now);
}

// An expired override of the check's key in its rule: a limit override's
// key carried back as at its expiry and the override removed; a Redis
// zone's carried there (since: the end).  (Apart: most requests meet none.)
__attribute__((noinline)) void ended(Table &table, Store &st, rl_check_t &c, const OverrideEntry *e)
{
    if (st.header().remote) {
        c.since = e->ov.kind == RL_OVERRIDE_LIMIT ? e->ov.expires_ms : 0;
        return;
    }
    if (e->ov.kind == RL_OVERRIDE_LIMIT) {
        rl_rule_t applied;
        apply_override(*c.rule, e->ov, applied);
        carry_key(table, c.tag, applied, *c.rule, e->ov.expires_ms);
    }
    st.remove(const_cast<OverrideEntry *>(e));
    st.changed();
    table.header().overrides_live = st.held() ? table.header().overrides : 0;
}

// The override of the check's key: an expired limit override of its rule
// is carried back and removed on the way.
inline const OverrideEntry *find_for(Table &table, Store &st, rl_check_t &c, int64_t now)
{
    const OverrideEntry *e = st.keys_rule() ? st.find(c.tag) : nullptr;
    if (e != nullptr && !live(e, now)) {
        ended(table, st, c, e);
        e = nullptr;
    }
    if (e == nullptr && st.keys_every()) {
        e = st.find(Table::of_hash(c.hash, kEveryRule));
        e = live(e, now) ? e : nullptr;
    }
    if (e == nullptr && c.rule->key_addr && st.ranges()) {
        e = find_address(table, st, c, now);
    }
    return e;
}

// What the check does with the override it met.
void meet(rl_request_t &rq, rl_check_t &c, const OverrideEntry &e)
{
    const rl_override_t &ov = e.ov;
    c.override = (uint32_t) ov.kind | (e.identity == kEveryRule ? RL_OVERRIDE_EVERY_RULE : 0) |
                 (ov.target.family ? (ov.target.prefix + 1) << 8 : 0);
    switch (ov.kind) {
    case RL_OVERRIDE_DENY:
        c.until = ov.expires_ms;
        break;
    case RL_OVERRIDE_ALLOW:
        c.key_held = (uint32_t) c.key_len;
        c.key_len = 0;  // exempt, as an empty key is
        break;
    default: {
        rl_rule_t *room = rq.room != nullptr ? rq.room(&rq) : nullptr;
        if (room == nullptr) {
            c.override = 0;
            break;
        }
        apply_override(*c.rule, ov, *room);
        c.configured = c.rule;
        c.rule = room;
        c.since = ov.created_ms;
        break;
    }
    }
}

// A check as it was before the override it met applied.
void unmeet(rl_check_t &c)
{
    if (c.configured != nullptr) {
        c.rule = c.configured;
        c.configured = nullptr;
    }
    if (c.key_held != 0) {
        c.key_len = c.key_held;  // exempt by an override before
        c.key_held = 0;
    }
    c.override = 0;
    c.until = c.since = 0;
}

}  // namespace

void deny_decision(rl_decision_t &d, int64_t until, int64_t now)
{
    d.allowed = 0;
    d.remaining = 0;
    d.delay_ms = 0;
    d.queued = 0;
    if (until == 0) {
        d.retry_after_ms = d.available_ms = 0;  // no time to wait for
        return;
    }
    const int64_t wait = until - now;
    d.retry_after_ms = d.available_ms = wait;
    d.reset_ms = d.reset_ms > wait ? d.reset_ms : wait;
}

bool any_overrides(const rl_request_t &rq)
{
    for (size_t i = 0; i < rq.n; i++) {
        if (Table::at(rq.checks[i].table)->header().overrides_live | rq.checks[i].override) {
            return true;
        }
    }
    return false;
}

bool resolve_overrides(rl_request_t &rq, int64_t now)
{
    bool deny = false;
    rq.overridden = 0;
    for (size_t i = 0; i < rq.n; i++) {
        rl_check_t &c = rq.checks[i];
        if (__builtin_expect((int64_t) c.override | c.since, 0)) {
            unmeet(c);  // decided again (a request waiting for a slot)
        }
        Table &table = *Table::at(c.table);
        if (!applies(c) || table.header().overrides_live == 0) {
            continue;
        }
        table.recover();
        Store &st = *reinterpret_cast<Store *>(reinterpret_cast<char *>(&table) + table.header().overrides_live);
        const OverrideEntry *e = find_for(table, st, c, now);
        if (e != nullptr) {
            meet(rq, c, *e);
            deny |= e->ov.kind == RL_OVERRIDE_DENY;
            rq.overridden += c.override != 0;
        }
    }
    return deny;
}

}  // namespace rl

extern "C" {

int rl_request_overrides(rl_request_t *rq, int64_t now_ms)
{
    if (!rl::any_overrides(*rq)) {
        return 0;
    }
    if (!rl::resolve_overrides(*rq, now_ms)) {
        for (size_t i = 0; i < rq->n; i++) {
            if (rl::applies(rq->checks[i])) {
                return 0;
            }
        }
        // every rule's key exempt by an override (allow): nothing to send
        rq->binding = rq->n;
        rq->delay_ms = 0;
        rq->verdict = RL_VERDICT_EXEMPT;
        for (size_t i = 0; i < rq->n; i++) {
            rq->checks[i].outcome = RL_OUTCOME_EXEMPT;
        }
        rl::act(*rq);
        return 1;
    }
    size_t applying = 0, denied = 0;
    for (size_t i = 0; i < rq->n; i++) {
        rl_check_t &c = rq->checks[i];
        if (!rl::applies(c)) {
            continue;
        }
        applying++;
        c.decision = rl_decision_t{};
        c.decision.window_ms = c.rule->period_ms;
        if ((c.override & 0xf) == RL_OVERRIDE_DENY) {
            rl::deny_decision(c.decision, c.until, now_ms);
            denied++;
        } else {
            c.decision.allowed = 1;  // not decided: not the refusal's
            c.decision.remaining = c.rule->limit;
        }
    }
    if (rq->combine == RL_COMBINE_ANY && denied < applying) {
        // the others may admit it: the denied sit the call out, exempt
        for (size_t i = 0; i < rq->n; i++) {
            rl_check_t &c = rq->checks[i];
            if (rl::applies(c) && (c.override & 0xf) == RL_OVERRIDE_DENY) {
                c.key_held = (uint32_t) c.key_len;
                c.key_len = 0;
            }
        }
        return 0;
    }
    rl::conclude(*rq, false);
    return 1;
}

}  // extern "C"
