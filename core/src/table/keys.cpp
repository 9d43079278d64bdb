// The key API (ratelimit_api): a key's state read as a request would find
// it, its reset, the keys a rule refuses most; and counting a request's
// refusals among those.  The caller holds the table's lock.
#include "algorithms/algorithms.h"
#include "algorithms/transition.h"
#include "policy/request.h"
#include "table/table.h"

namespace rl {

// Each rule that refused the request (or would have, in a dry run) counts
// it against the key, once for a rule name and key.
void note_refused(const rl_request_t &rq, int64_t now)
{
    for (size_t i = 0; i < rq.n; i++) {
        const rl_check_t &c = rq.checks[i];
        if (c.counters <= 0 || (c.outcome != RL_OUTCOME_REJECTED && c.outcome != RL_OUTCOME_DRY_RUN_REJECTED)) {
            continue;
        }
        bool counted = false;
        for (size_t j = 0; j < i && !counted; j++) {
            const rl_check_t &o = rq.checks[j];
            counted = o.table == c.table && o.counters == c.counters && o.tag == c.tag && o.outcome == c.outcome;
        }
        Table *table = Table::at(c.table);
        if (counted || (uint32_t) c.counters > table->layout().nrules) {
            continue;
        }
        const bool clear = c.rule->log_key != 0;
        if (TopList *l = table->top_list(c.counters - 1, true, clear)) {
            l->note(c.tag, clear ? c.key : nullptr, c.key_len, now);
        }
    }
}

}  // namespace rl

extern "C" {

uint64_t rl_table_tag(const void *mem, uint64_t identity, const void *key, size_t key_len)
{
    return rl::Table::at(mem)->tag(identity, key, key_len);
}

// As check.cpp's current(): the table's state, or what the summary
// restores; decided twice on copies, never written.
void rl_table_peek(void *mem, const rl_rule_t *rule, uint64_t tag, uint64_t cost, int64_t now_ms, rl_peek_t *out)
{
    *out = rl_peek_t{};
    try {
        rl::Table *table = rl::Table::at(mem);
        table->recover();
        rl::State s{rl_state_t{0, 0}, nullptr};
        if (table->find(tag, &s)) {
            out->held = 1;
        } else {
            s = rl::restore(*rule, table->owed(tag, now_ms), now_ms);
            out->owed = s.head.t != 0;
        }
        table->bound(*rule, s, nullptr, now_ms);
        const size_t blob = rl::blob_size(*rule);
        if (blob && table->pool_for(blob) < 0) {
            s.blob = nullptr;  // as rl_decide: decided as cold
        }
        if (rl::has(*rule, rl::kSlots)) {
            const rl::Algorithm &a = rl::algorithm_of(*rule);
            a.slots->held(*rule, s, &out->in_flight, &out->waiting);
            if (rule->classes != nullptr) {
                a.slots->by_class(*rule, s, out->class_in_flight, out->class_waiting, out->class_kept);
            }
            if (a.learned_of != nullptr) {
                rl::Learned l{};
                a.learned_of(*rule, s, &l);
                out->limit_now = l.limit;
                out->baseline_us = l.baseline_us;
                out->recent_us = l.recent_us;
            }
        }
        rl::State look = s, next = s;
        out->look = rl::transition(*rule, look, now_ms, 0, false);
        out->next = rl::transition(*rule, next, now_ms, cost, false);
        const int64_t banned = table->banned_until(*rule, tag, now_ms, true);
        out->banned_ms = banned != 0 ? banned - now_ms : 0;
        if (out->banned_ms > 0 && cost > 0) {
            out->next.allowed = 0;
            out->next.remaining = 0;
            out->next.delay_ms = 0;
            out->next.banned_ms = out->banned_ms;
            out->next.retry_after_ms =
                out->next.retry_after_ms > out->banned_ms ? out->next.retry_after_ms : out->banned_ms;
        }
    } catch (...) {
        *out = rl_peek_t{};
    }
}

int rl_table_reset(void *mem, uint64_t tag, int64_t now_ms)
{
    try {
        rl::Table *table = rl::Table::at(mem);
        const int done = table->forget(tag, now_ms);
        rl::State ban{};
        if (!table->find(rl::Table::ban_tag(tag), &ban)) {
            return done;
        }
        table->forget(rl::Table::ban_tag(tag), now_ms);
        return done | (ban.head.t > now_ms ? RL_RESET_UNBANNED : 0);
    } catch (...) {
        return 0;
    }
}

void rl_table_top(const void *mem, int slot, int64_t now_ms, rl_top_t *out)
{
    const rl::Table *table = rl::Table::at(mem);
    const rl::TableLayout &h = table->layout();
    out->state = RL_TOP_NONE;
    out->keys = 0;
    out->kib = 0;
    out->refusals = 0;
    out->since_ms = 0;
    out->n = 0;
    if (slot < 0 || (uint32_t) slot >= h.nrules || (uint32_t) slot >= h.rules_max) {
        return;
    }
    if (const rl::TopList *l = table->top_list(slot)) {
        out->state = RL_TOP_KEPT;
        l->read(now_ms, out);
        for (size_t i = 0; i < out->n; i++) {
            rl::State ban{};
            const uint64_t tag = out->top[i].tag;
            out->top[i].banned_ms =
                tag != 0 && table->find(rl::Table::ban_tag(tag), &ban) && ban.head.t > now_ms ? ban.head.t - now_ms : 0;
        }
    } else if (table->counters()[slot].top == rl::kTopNoRoom || h.top_used + rl::TopList::bytes(false) > h.top_bytes) {
        out->state = RL_TOP_NO_ROOM;
    }
}

}  // extern "C"
