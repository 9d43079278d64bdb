// What the key API (ratelimit_api) answers, as JSON: the zones and their
// rules as configured, a key's state in each rule (or what its reset found),
// and the keys each rule refuses most.
#include <cstring>

#include "algorithms/algorithm.h"
#include "util/out.h"

namespace rl {

namespace {

void fingerprint(Out &o, uint64_t tag)
{
    o.put("\"fingerprint\":\"");
    o.hex16(tag);
    o.put("\"");
}

// {"algorithm":A,"key":"$expr","limit":N,...}: what the rule says, and its
// algorithm's own parameters
void rule_json(Out &o, const rl_rule_view_t &v)
{
    const rl_rule_t &r = *v.rule;
    o.put("{\"algorithm\":");
    o.json(rl_algorithm_name(r.algorithm), std::strlen(rl_algorithm_name(r.algorithm)));
    o.put(",\"key\":");
    o.json(v.key);
    o.field("limit", r.limit);
    if (r.limit_var) {
        o.put(",\"limit_variable\":true");
    }
    algorithm_of(r).api_fields(o, r);  // its period (or calendar) and its own parameters
    o.put(",\"log_key\":");
    o.boolean(r.log_key != 0);
    o.put("}");
}

// A zone's fields: "redis":B, its figures (as ratelimit_stats), "rules"
void zone_json(Out &o, const rl_zone_snapshot_t &z)
{
    o.put("\"redis\":");
    o.boolean(z.redis != nullptr);
    o.put(",");
    zone_figures(o, z);
    o.put(",\"rules\":{");
    for (size_t i = 0; i < z.nrules; i++) {
        o.put(i ? "," : "");
        o.json(z.rules[i].name);
        o.put(":");
        rule_json(o, z.rules[i]);
    }
    o.put("}");
}

// A rule with priority classes: ,"classes":{"NAME":{"in_flight":N,
// "waiting":N,"kept":N},...}, highest first ("kept": the slots its share
// keeps of those open now).
void classes_json(Out &o, const rl_rule_t &rule, const rl_peek_t &pk)
{
    if (rule.classes == nullptr) {
        return;
    }
    o.put(",\"classes\":{");
    for (uint32_t i = 0; i < rule.classes->n && i < 8; i++) {
        o.put(i ? "," : "");
        o.json(rule.classes->name[i], std::strlen(rule.classes->name[i]));
        o.put(":{\"in_flight\":");
        o.num(pk.class_in_flight[i]);
        o.field("waiting", pk.class_waiting[i]);
        o.field("kept", pk.class_kept[i]);
        o.put("}");
    }
    o.put("}");
}

// A state: {"rule":R,"fingerprint":F,"state":"held"|"summary"|"none",
// "refused":B,"remaining":N,"reset":S,"reset_ms":MS,"retry_after":S,
// "retry_after_ms":MS,"delay_ms":MS,"banned_ms":MS,"limit":N,"cost":N} (and
// "in_flight", "waiting" for concurrency, with "in_flight_here" after
// in_flight on a Redis zone, and "classes" after "waiting" for a rule with
// priority classes), seconds as the headers show them
// (rl_seconds, rl_retry_after_seconds); after a reset
// {"rule":R,"fingerprint":F,"held":B,"forgiven":B,"unbanned":B}.
// A bandwidth rule's key: {"rule":R,"fingerprint":F,"kind":"bandwidth",
// "state":"held"|"none","rate":N,"burst":N,"connections":N,"ahead_ms":MS,
// "owed_bytes":N,"next_slice_ms":MS}: its connections in flight, how far
// the bytes granted run ahead of now, those bytes at its rate and when its
// next slice is due (with a rate from a variable, "rate":null and the
// last two null: each request has its own rate).
void bandwidth_json(Out &o, const rl_key_state_t &st)
{
    o.put("{\"rule\":");
    o.json(st.rule);
    o.put(",");
    fingerprint(o, st.tag);
    o.put(",\"kind\":\"bandwidth\",\"state\":\"");
    o.put(st.bw.held ? "held" : "none");
    o.put("\"");
    const int64_t ahead = st.bw.ahead_us;
    if (st.rate == 0) {
        o.put(",\"rate\":null");
    } else {
        o.field("rate", st.rate);
    }
    o.field("burst", st.burst);
    o.field("connections", st.bw.connections);
    o.put(",\"ahead_ms\":");
    o.num0((ahead + 999) / 1000);
    if (st.rate == 0) {
        o.put(",\"owed_bytes\":null,\"next_slice_ms\":null}");
        return;
    }
    // ahead_us <= (burst + slice) / rate + idle time: its product with the
    // rate (at most RL_BANDWIDTH_MAX) is kept in 64 bits by dividing first
    const uint64_t us = (uint64_t) (ahead > 0 ? ahead : 0);
    o.field("owed_bytes", us / 1000000 * st.rate + us % 1000000 * st.rate / 1000000);
    const rl_bandwidth_grant_t g = rl_bandwidth_grant(ahead, 0, 0, st.rate, st.burst);
    o.put(",\"next_slice_ms\":");
    o.num0((g.wait_us + 999) / 1000);
    o.put("}");
}

void state_json(Out &o, const rl_key_state_t &st, bool reset)
{
    if (st.bandwidth) {
        bandwidth_json(o, st);
        return;
    }
    o.put("{\"rule\":");
    o.json(st.rule);
    o.put(",");
    fingerprint(o, st.tag);
    if (reset) {
        o.put(",\"held\":");
        o.boolean(st.reset & RL_RESET_HELD);
        o.put(",\"forgiven\":");
        o.boolean(st.reset & RL_RESET_FORGIVEN);
        o.put(",\"unbanned\":");
        o.boolean(st.reset & RL_RESET_UNBANNED);
        o.put("}");
        return;
    }
    const rl_peek_t &pk = st.peek;
    const bool allowed = pk.next.allowed != 0;
    o.put(",\"state\":\"");
    o.put(pk.held ? "held" : pk.owed ? "summary" : "none");
    o.put("\",\"refused\":");
    o.boolean(!allowed);
    o.field("remaining", pk.look.remaining);
    o.field("reset", rl_seconds(pk.look.reset_ms));
    o.put(",\"reset_ms\":");
    o.num0(pk.look.reset_ms);
    o.field("retry_after", rl_retry_after_seconds(&pk.next));
    o.put(",\"retry_after_ms\":");
    o.num0(allowed ? 0 : pk.next.retry_after_ms);
    o.put(",\"delay_ms\":");
    o.num0(allowed ? pk.next.delay_ms : 0);
    o.put(",\"banned_ms\":");
    o.num0(pk.banned_ms);
    if (has(*st.config, kSlots)) {
        o.field("in_flight", pk.in_flight);
        if (pk.fleet) {
            o.field("in_flight_here", pk.in_flight_here);
        }
        o.field("waiting", pk.waiting);
        classes_json(o, *st.config, pk);
        if (algorithm_of(*st.config).learned_of != nullptr) {
            o.field("limit_now", pk.limit_now);
            o.field("baseline_us", pk.baseline_us);
            o.field("recent_us", pk.recent_us);
        }
    }
    o.field("limit", st.config->limit);
    o.field("cost", st.cost);
    o.put("}");
}

// "R":{"state":S,"refusals":N,"entries":32,"keys":[{"fingerprint":F,
// "key":K,"refused":N,"error":N,"banned_ms":MS},...]}: "key" only where
// the rule logs keys in clear, "banned_ms" only for a key a ban= keeps out;
// a bandwidth rule's counts bytes granted (in KiB, each grant rounded up):
// "bytes" for "refusals" and for each key's "refused", its error in bytes
void top_json(Out &o, const rl_top_view_t &t)
{
    static const char *const states[] = {"none", "kept", "no_room"};
    const uint64_t unit = t.kib ? 1024 : 1;
    o.json(t.rule);
    o.put(":{\"state\":\"");
    o.put(t.state >= RL_TOP_NONE && t.state <= RL_TOP_NO_ROOM ? states[t.state] : "none");
    o.put("\"");
    o.field(t.kib ? "bytes" : "refusals", t.refusals * unit);
    o.field("entries", RL_TOP_ENTRIES);
    o.put(",\"keys\":[");
    for (size_t j = 0; j < t.n; j++) {
        const rl_top_key_t &k = t.keys[j];
        o.put(j ? ",{" : "{");
        fingerprint(o, k.tag);
        if (t.log_key && k.key_len) {
            o.put(",\"key\":");
            o.json_shown(k.key, k.key_len, k.key_cut != 0);
        }
        o.field(t.kib ? "bytes" : "refused", k.refused * unit);
        o.field("error", k.error * unit);
        if (k.banned_ms > 0) {
            o.field("banned_ms", (uint64_t) k.banned_ms);
        }
        o.put("}");
    }
    o.put("]}");
}

}  // namespace

}  // namespace rl

extern "C" {

// {"version":V,"write":B,"top_epoch_ms":N,"zones":{NAME:{...}}}
size_t rl_render_api_zones(const rl_stats_snapshot_t *s, int write, char *buf, size_t cap)
{
    rl::Out o(buf, cap);
    o.put("{\"version\":");
    o.json(s->version);
    o.put(",\"write\":");
    o.boolean(write != 0);
    o.field("top_epoch_ms", RL_TOP_EPOCH_MS);
    o.put(",\"zones\":{");
    for (size_t i = 0; i < s->n; i++) {
        o.put(i ? "," : "");
        o.json(s->zones[i].name);
        o.put(":{");
        rl::zone_json(o, s->zones[i]);
        o.put("}");
    }
    o.put("}}\n");
    return o.len();
}

// {"zone":NAME,...}: the same fields as a zone of the zones
size_t rl_render_api_zone(const rl_zone_snapshot_t *z, char *buf, size_t cap)
{
    rl::Out o(buf, cap);
    o.put("{\"zone\":");
    o.json(z->name);
    o.put(",");
    rl::zone_json(o, *z);
    o.put("}\n");
    return o.len();
}

// {"zone":Z,"key":K|"fingerprint":F,"rules":[state,...]}, the key escaped
// as log lines show it
size_t rl_render_api_keys(const rl_key_snapshot_t *k, char *buf, size_t cap)
{
    rl::Out o(buf, cap);
    o.put("{\"zone\":");
    o.json(k->zone);
    if (k->key != nullptr) {
        o.put(",\"key\":");
        o.json_shown(k->key, k->key_len);
    } else {
        o.put(",");
        rl::fingerprint(o, k->fingerprint);
    }
    o.put(",\"rules\":[");
    for (size_t i = 0; i < k->n; i++) {
        o.put(i ? "," : "");
        rl::state_json(o, k->states[i], k->reset != 0);
    }
    o.put("]}\n");
    return o.len();
}

// {"zone":Z,"since_ms":T,"rules":{R:{...}}}, since the start of the epoch
// before the current one; a Redis zone's has "scope":"server" after since_ms
// (this server's refusals)
size_t rl_render_api_top(const rl_top_snapshot_t *t, char *buf, size_t cap)
{
    rl::Out o(buf, cap);
    o.put("{\"zone\":");
    o.json(t->zone);
    const int64_t epoch = t->now_ms / RL_TOP_EPOCH_MS;
    o.put(",\"since_ms\":");
    o.num0((epoch - 1) * RL_TOP_EPOCH_MS);
    if (t->server) {
        o.put(",\"scope\":\"server\"");
    }
    o.put(",\"rules\":{");
    for (size_t i = 0; i < t->n; i++) {
        o.put(i ? "," : "");
        rl::top_json(o, t->rules[i]);
    }
    o.put("}}\n");
    return o.len();
}

}  // extern "C"
