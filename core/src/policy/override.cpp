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

// A range holding a client's address read from the key's text.
const OverrideEntry *find_text_address(const Table &table, const Store &st, const rl_check_t &c, int64_t now)
{
    uint8_t addr[16];
    const int family = client_address(*c.rule, c.key, c.key_len, addr);
    return family == 0 || st.filtered_out(family, addr) ? nullptr : st.find_range(table, family, addr, c.identity, now);
}

// An expired override of the check's key in its rule: a limit override's
// key carried back as at its expiry and the override removed; a Redis
// zone's carried there (since: the end).  (Apart: most requests meet none.)
void ended(Table &table, Store &st, rl_check_t &c, const OverrideEntry *e)
{
    if (st.books().remote) {
        c.since = e->ov.kind == RL_OVERRIDE_LIMIT ? e->ov.expires_ms : 0;
        return;
    }
    table.recover();  // before the table is written
    if (e->ov.kind == RL_OVERRIDE_LIMIT) {
        rl_rule_t applied;
        apply_override(*c.rule, e->ov, applied);
        carry_key(table, c.tag, applied, *c.rule, e->ov.expires_ms);
    }
    st.remove(const_cast<OverrideEntry *>(e));
    st.changed();
    table.layout().overrides_live = st.held() ? table.layout().overrides : 0;
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
        if (Table::at(rq.checks[i].table)->layout().overrides_live | rq.checks[i].override) {
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
        deny |= resolve_check(rq, rq.checks[i], now);
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
