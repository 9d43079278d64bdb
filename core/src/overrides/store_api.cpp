// The overrides' C API (ratelimit_override.h): the store laid out and
// linked to its table, and the key API's writes, reads and lists, each
// under the zone's lock as a request takes it.
#include <cstring>

#include "overrides/store.h"
#include "table/table.h"

namespace {

rl::Store *store_of(void *table)
{
    return rl::Store::of(rl::Table::at(table));
}

const rl::Store *store_of(const void *table)
{
    return rl::Store::of(rl::Table::at(table));
}

// The table's link read by requests: the store, while it holds any.
void note_held(rl::Table &table, const rl::Store &st)
{
    table.layout().overrides_live = st.held() ? table.layout().overrides : 0;
}

uint64_t identity_of(const rl_override_target_t &t, const rl_override_rule_t *rule)
{
    return rl::every_rule(t) ? rl::every_identity(t) : rule != nullptr ? rule->identity : 0;
}

bool live(const rl::OverrideEntry &e, int64_t now)
{
    return e.ov.expires_ms == 0 || e.ov.expires_ms > now;
}

// A limit override's key carried from the parameters `from` had (the
// rule's, or an override's) to those `to` gives (the same).
void carry(rl::Table &table, const rl::OverrideEntry &e, const rl_override_rule_t *rule, const rl_override_t *from,
           const rl_override_t *to, int64_t at)
{
    if (rule == nullptr || e.ov.target.family != 0 || rl::every_rule(e.ov.target)) {
        return;
    }
    rl_rule_t a = *rule->rule, b = *rule->rule;
    if (from != nullptr && from->kind == RL_OVERRIDE_LIMIT) {
        rl::apply_override(*rule->rule, *from, a);
    }
    if (to != nullptr && to->kind == RL_OVERRIDE_LIMIT) {
        rl::apply_override(*rule->rule, *to, b);
    }
    rl::carry_key(table, rl::Store::key_tag(e), a, b, at);
}

}  // namespace

extern "C" {

size_t rl_overrides_size(uint32_t capacity)
{
    return rl::Store::bytes(capacity);
}

int rl_overrides_attach(void *table, void *mem, uint32_t capacity)
{
    rl::Table &t = *rl::Table::at(table);
    rl::Store *st = static_cast<rl::Store *>(mem);
    const bool kept = st->valid(capacity);
    if (!kept) {
        st->init(capacity);
    }
    t.layout().overrides = (uint64_t) (static_cast<char *>(mem) - static_cast<char *>(table));
    note_held(t, *st);
    return kept ? 1 : 0;
}

void *rl_overrides_of(const void *table)
{
    return const_cast<rl::Store *>(store_of(table));
}

void rl_overrides_stats(const void *store, rl_overrides_stats_t *st)
{
    const rl::Store *s = static_cast<const rl::Store *>(store);
    st->capacity = s->capacity();
    st->held = s->held();
    st->version = s->change();
    st->written = s->books().written;
    st->remote = s->books().source;
    st->remote_id = s->books().source_id;
}

void rl_overrides_count(const void *table, rl_rule_stats_t *out, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        out[k].overrides = 0;
    }
    const rl::Store *st = rl::Store::of(rl::Table::at(table));
    if (st == nullptr) {
        return;
    }
    const rl::OverrideEntry *e = st->entries();
    for (uint32_t i = 0; i < st->used_entries(); i++) {
        uint32_t at;
        const int k = e[i].tag != 0 && e[i].ov.target.rule[0] != '\0'
                          ? rl::Table::at(table)->find_rule(e[i].ov.target.rule, &at)
                          : -1;
        if (k >= 0 && (size_t) k < n) {
            out[k].overrides++;
        }
    }
}

int rl_overrides_news(const rl_overrides_stats_t *st, uint64_t version, uint64_t id)
{
    if (version == st->remote && id == st->remote_id) {
        return RL_OVERRIDES_SAME;
    }
    // a later version of the same hash; or of one made by a module that
    // gave hashes no id, which the write gave one; or the first taken
    if (((id == st->remote_id || st->remote_id == 0) && version > st->remote) ||
        (st->remote == 0 && st->remote_id == 0)) {
        return RL_OVERRIDES_NEWER;
    }
    return RL_OVERRIDES_LOST;
}

int rl_overrides_said(void *store, uint64_t said)
{
    rl::StoreBooks &h = static_cast<rl::Store *>(store)->books();
    const bool news = h.said != said;
    h.said = said;
    return news ? 1 : 0;
}

void rl_overrides_remote(void *table)
{
    if (rl::Store *st = store_of(table)) {
        st->books().remote = 1;
    }
}

size_t rl_overrides_replace(void *table, const rl_override_t *list, size_t n, const rl_override_rule_t *rules,
                            size_t nrules, uint64_t version, uint64_t id)
{
    rl::Table &t = *rl::Table::at(table);
    rl::Store *st = store_of(table);
    if (st == nullptr) {
        return 0;
    }
    t.recover();
    st->clear();
    for (size_t i = 0; i < n; i++) {
        const rl_override_t &ov = list[i];
        const rl_override_rule_t *rule = nullptr;
        for (size_t r = 0; r < nrules && rule == nullptr && ov.target.rule[0]; r++) {
            rule = std::strcmp(rules[r].rule->name, ov.target.rule) == 0 ? &rules[r] : nullptr;
        }
        rl::OverrideEntry *e = st->lookup(t, ov.target, identity_of(ov.target, rule));
        if (e == nullptr) {
            e = st->add(t, ov.target, identity_of(ov.target, rule));
        }
        if (e == nullptr) {
            break;  // no room for the rest
        }
        e->ov = ov;
    }
    st->books().source = version;
    st->books().source_id = id;
    st->changed();
    note_held(t, *st);
    return st->held();
}

void rl_overrides_retag(void *table, const rl_override_rule_t *rules, size_t n)
{
    rl::Table &t = *rl::Table::at(table);
    rl::Store *st = store_of(table);
    if (st != nullptr) {
        t.recover();
        st->retag(t, rules, n);
        note_held(t, *st);
    }
}

void rl_overrides_written(void *store, uint64_t version)
{
    static_cast<rl::Store *>(store)->books().written = version;
}

int rl_override_put(void *table, const rl_override_t *ov, const rl_override_rule_t *rule, int64_t now_ms)
{
    rl::Table &t = *rl::Table::at(table);
    rl::Store *st = store_of(table);
    if (st == nullptr) {
        return RL_OVERRIDE_FULL;
    }
    t.recover();
    const uint64_t identity = identity_of(ov->target, rule);
    rl::OverrideEntry *e = st->lookup(t, ov->target, identity);
    if (e == nullptr) {
        e = st->add(t, ov->target, identity);
        if (e == nullptr) {
            return RL_OVERRIDE_FULL;
        }
        carry(t, *e, rule, nullptr, ov, now_ms);
    } else {
        // what applied until now: the override, unless it had expired
        carry(t, *e, rule, live(*e, now_ms) ? &e->ov : nullptr, ov, now_ms);
    }
    e->ov = *ov;
    e->ov.created_ms = ov->created_ms ? ov->created_ms : now_ms;  // a file's keeps its own
    st->changed();
    note_held(t, *st);
    return RL_OVERRIDE_OK;
}

int rl_override_delete(void *table, const rl_override_target_t *target, const rl_override_rule_t *rule, int64_t now_ms)
{
    rl::Table &t = *rl::Table::at(table);
    rl::Store *st = store_of(table);
    rl::OverrideEntry *e = st != nullptr ? st->lookup(t, *target, identity_of(*target, rule)) : nullptr;
    if (e == nullptr) {
        return RL_OVERRIDE_MISSING;
    }
    t.recover();
    const bool was = live(*e, now_ms);
    carry(t, *e, rule, &e->ov, nullptr, was ? now_ms : e->ov.expires_ms);
    st->remove(e);
    st->changed();
    note_held(t, *st);
    return was ? RL_OVERRIDE_OK : RL_OVERRIDE_MISSING;
}

int rl_override_get(const void *table, const rl_override_target_t *target, int64_t now_ms, rl_override_t *out)
{
    const rl::Store *st = store_of(table);
    if (st == nullptr) {
        return 0;
    }
    // by the target's rule name (a tag needs the rule's identity)
    const rl::OverrideEntry *e = nullptr;
    const rl::OverrideEntry *all = st->entries();
    for (uint32_t i = 0; i < st->used_entries() && e == nullptr; i++) {
        if (all[i].tag != 0 && rl::same_target(all[i].ov.target, *target)) {
            e = &all[i];
        }
    }
    if (e == nullptr || !live(*e, now_ms)) {
        return 0;
    }
    *out = e->ov;
    return 1;
}

size_t rl_override_list(const void *table, const char *rule, size_t from, int64_t now_ms, rl_override_t *out,
                        size_t max, size_t *total)
{
    const rl::Store *st = store_of(table);
    size_t n = 0, seen = 0;
    if (st != nullptr) {
        const rl::OverrideEntry *e = st->entries();
        for (uint32_t i = 0; i < st->used_entries(); i++) {
            if (e[i].tag == 0 || !live(e[i], now_ms) || (rule != nullptr && std::strcmp(e[i].ov.target.rule, rule))) {
                continue;
            }
            if (seen++ >= from && n < max) {
                out[n++] = e[i].ov;
            }
        }
    }
    *total = seen;
    return n;
}

size_t rl_overrides_expire(void *table, const rl_override_rule_t *rules, size_t n, int64_t now_ms)
{
    rl::Table &t = *rl::Table::at(table);
    rl::Store *st = store_of(table);
    size_t removed = 0;
    if (st == nullptr || st->held() == 0) {
        return 0;
    }
    t.recover();
    rl::OverrideEntry *e = st->entries();
    for (uint32_t i = 0; i < st->used_entries(); i++) {
        if (e[i].tag == 0 || live(e[i], now_ms)) {
            continue;
        }
        const rl_override_rule_t *rule = nullptr;
        for (size_t r = 0; r < n && rule == nullptr; r++) {
            rule = std::strcmp(rules[r].rule->name, e[i].ov.target.rule) == 0 ? &rules[r] : nullptr;
        }
        carry(t, e[i], rule, &e[i].ov, nullptr, e[i].ov.expires_ms);
        st->remove(&e[i]);
        removed++;
    }
    if (removed > 0) {
        st->changed();
        note_held(t, *st);
    }
    return removed;
}

int rl_overrides_held(const void *table)
{
    return __atomic_load_n(&rl::Table::at(table)->layout().overrides_live, __ATOMIC_RELAXED) != 0;
}

int64_t rl_overrides_next_expiry(void *table, int64_t after)
{
    rl::Store *st = store_of(table);
    return st != nullptr ? st->next_expiry(after) : 0;
}

}  // extern "C"
