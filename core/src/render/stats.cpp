// ratelimit_stats: a snapshot of every zone as JSON, or in Prometheus's text
// format (0.0.4), both from the figure tables below: a figure's name in
// JSON, its metric, type and help in Prometheus, and where it is.
#include <cstddef>
#include <cstring>

#include "algorithms/algorithm.h"
#include "util/out.h"

namespace rl {

namespace {

template <typename T> uint64_t figure_of(const T &base, const Figure &f)
{
    return *reinterpret_cast<const uint64_t *>(reinterpret_cast<const char *>(&base) + f.offset);
}

// a zone's figures, in rl_zone_snapshot_t
const Figure kZoneFigures[] = {
    {"size", "zone_size_bytes", "gauge", "Size of the zone.", offsetof(rl_zone_snapshot_t, table.size)},
    {"bytes_used", "zone_used_bytes", "gauge", "Bytes of the zone holding keys.", offsetof(rl_zone_snapshot_t, used)},
    {"keys", "zone_keys", "gauge", "Keys held in the zone.", offsetof(rl_zone_snapshot_t, table.keys)},
    {"capacity", "zone_capacity_keys", "gauge", "Key slots of the zone.", offsetof(rl_zone_snapshot_t, table.capacity)},
    {"overrides", "zone_overrides", "gauge", "Overrides the zone holds (the key API's overrides).",
     offsetof(rl_zone_snapshot_t, overrides)},
    {"overrides_capacity", "zone_overrides_capacity", "gauge", "Overrides the zone has room for (overrides=).",
     offsetof(rl_zone_snapshot_t, overrides_capacity)},
    {"evictions", "zone_evictions_total", "counter", "Keys evicted to make room.",
     offsetof(rl_zone_snapshot_t, table.evictions)},
    {"live_evictions", "zone_live_evictions_total", "counter", "Keys evicted before they were back to full budget.",
     offsetof(rl_zone_snapshot_t, table.live_evictions)},
    {"summary_bytes", "zone_summary_bytes", "gauge", "Bytes of the zone remembering what evicted keys owe.",
     offsetof(rl_zone_snapshot_t, table.summary_bytes)},
    {"summary_refusals", "zone_summary_refusals_total", "counter",
     "Requests of keys not in the zone refused for what the eviction summary says they owe.",
     offsetof(rl_zone_snapshot_t, table.summary_refusals)},
};

// each rule's counters: its requests' outcomes, and what it charged; then
// the figures of every algorithm's record (each_rule_figure)
const Figure kRuleFigures[] = {
    {"allowed", "allowed_total", "counter", "Requests that passed and spent at the rule.",
     offsetof(rl_rule_stats_t, count[RL_OUTCOME_ALLOWED])},
    {"rejected", "rejected_total", "counter", "Requests rejected, the rule denying them.",
     offsetof(rl_rule_stats_t, count[RL_OUTCOME_REJECTED])},
    {"delayed", "delayed_total", "counter", "Requests delayed by the rule.",
     offsetof(rl_rule_stats_t, count[RL_OUTCOME_DELAYED])},
    {"dry_run_rejected", "dry_run_rejected_total", "counter", "Requests the rule would have rejected (dry run).",
     offsetof(rl_rule_stats_t, count[RL_OUTCOME_DRY_RUN_REJECTED])},
    {"exempt", "exempt_total", "counter", "Requests exempt from the rule (empty key).",
     offsetof(rl_rule_stats_t, count[RL_OUTCOME_EXEMPT])},
    {"charged", "charged_units_total", "counter", "Units charged as requests ended (charge=).",
     offsetof(rl_rule_stats_t, charged)},
    {"debts", "debts_total", "counter", "Requests whose charge left their key in debt.",
     offsetof(rl_rule_stats_t, debts)},
    {"in_flight", "in_flight", "gauge", "Requests holding a slot now (concurrency).",
     offsetof(rl_rule_stats_t, in_flight)},
    {"peak", "in_flight_peak", "gauge", "The most requests holding a slot at once (concurrency).",
     offsetof(rl_rule_stats_t, peak)},
    {"waited", "waited_total", "counter", "Requests that waited for a slot (concurrency, max_wait).",
     offsetof(rl_rule_stats_t, waited)},
    {"bans", "bans_total", "counter", "Bans the rule started (ban=).", offsetof(rl_rule_stats_t, bans)},
    {"dry_run_bans", "dry_run_bans_total", "counter",
     "Refusals of a dry run that would have started a ban (ban=); none is stored.",
     offsetof(rl_rule_stats_t, dry_run_bans)},
    {"overrides", "overrides", "gauge", "Overrides held naming the rule (the key API's overrides).",
     offsetof(rl_rule_stats_t, overrides)},
    {"overridden", "overridden_total", "counter", "Requests that met an override in the rule.",
     offsetof(rl_rule_stats_t, overridden)},
};

// a rule's bandwidth (ratelimit_bandwidth), after the algorithms' own
const Figure kBandwidthFigures[] = {
    {"bytes", "bandwidth_bytes_total", "counter", "Bytes the rule granted its keys' responses (ratelimit_bandwidth).",
     offsetof(rl_rule_stats_t, bytes)},
    {"bytes_per_second", "bandwidth_bytes_per_second", "gauge",
     "Bytes the rule granted in the last whole second (ratelimit_bandwidth).",
     offsetof(rl_rule_stats_t, bytes_per_second)},
    {"connections", "bandwidth_connections", "gauge", "Responses sending under the rule now (ratelimit_bandwidth).",
     offsetof(rl_rule_stats_t, connections)},
    {"delayed_now", "bandwidth_delayed_connections", "gauge",
     "Of those, responses waiting for their next slice now (ratelimit_bandwidth).",
     offsetof(rl_rule_stats_t, delayed_now)},
};

// a Redis zone's counters, in rl_redis_figures_t (the latency histogram
// is written apart)
const Figure kRedisFigures[] = {
#define RL_FIGURE(name, help) {#name, "redis_" #name "_total", "counter", help, offsetof(rl_redis_figures_t, name)},
    RL_REDIS_COUNTERS(RL_FIGURE)
#undef RL_FIGURE
};

// a redis_sync zone's exchanges, in rl_sync_figures_t
const Figure kSyncFigures[] = {
    {"exchanges", "sync_exchanges_total", "counter", "redis_sync exchanges done, every call answered.",
     offsetof(rl_sync_figures_t, exchanges)},
    {"keys", "sync_keys_total", "counter", "Keys sent to Redis by redis_sync calls, a call once, when Redis took it.",
     offsetof(rl_sync_figures_t, keys)},
    {"units", "sync_units_total", "counter", "Units redis_sync calls added in Redis, a call once, when Redis took it.",
     offsetof(rl_sync_figures_t, units)},
    {"failures", "sync_failures_total", "counter",
     "redis_sync calls Redis did not answer (down, no reply, a reply refused): sent again, as the same call.",
     offsetof(rl_sync_figures_t, failures)},
    {"dropped", "sync_dropped_units_total", "counter",
     "Units spent locally that may be missing in Redis: the zone's journal was full, or a call went unanswered "
     "for an hour.",
     offsetof(rl_sync_figures_t, dropped)},
    {"pending", "sync_pending_keys", "gauge",
     "Keys waiting for a redis_sync exchange: units not sent yet, and calls in doubt (a key may have both).",
     offsetof(rl_sync_figures_t, pending)},
    {"lag_ms", "sync_lag_milliseconds", "gauge",
     "The last redis_sync exchange: from taking the journal to its last reply.", offsetof(rl_sync_figures_t, lag_ms)},
};

// A rule's figures in order: every rule's, then each algorithm's own, in
// the order of the registry, then its bandwidth's.
template <typename F> void each_rule_figure(F show)
{
    for (const Figure &f : kRuleFigures) {
        show(f);
    }
    for (uint32_t a = 0; a < RL_ALGORITHM_COUNT; a++) {
        const Algorithm &algorithm = algorithm_of(a);
        for (size_t i = 0; i < algorithm.nfigures; i++) {
            show(algorithm.figures[i]);
        }
    }
    for (const Figure &f : kBandwidthFigures) {
        show(f);
    }
}

rl_str_t name_of(const rl_rule_stats_t &r)
{
    return rl_str_t{r.name, std::strlen(r.name)};
}

void json_redis(Out &o, const rl_zone_snapshot_t &z)
{
    const rl_redis_figures_t &rs = *z.redis;
    o.put(",\"redis\":{\"server\":");
    o.json(z.server);
    for (const Figure &f : kRedisFigures) {
        o.put(",\"");
        o.put(f.name);
        o.put("\":");
        o.num(figure_of(rs, f));
    }
    o.put(",\"latency_us\":{");
    for (size_t k = 0; k < RL_REDIS_LATENCY_BUCKETS; k++) {
        o.put("\"le_");
        o.num(rs.latency_le_us[k]);
        o.put("\":");
        o.num(rs.latency[k]);
        o.put(",");
    }
    o.put("\"inf\":");
    o.num(rs.latency[RL_REDIS_LATENCY_BUCKETS]);
    o.put("},\"latency_us_sum\":");
    o.num(rs.latency_us);
    o.put("}");
}

void json_sync(Out &o, const rl_zone_snapshot_t &z)
{
    o.put(",\"sync\":{\"interval_ms\":");
    o.num(z.sync_interval_ms);
    for (const Figure &f : kSyncFigures) {
        o.put(",\"");
        o.put(f.name);
        o.put("\":");
        o.num(figure_of(*z.sync, f));
    }
    o.put("}");
}

// # HELP and # TYPE of a family
void describe(Out &o, const Figure &f)
{
    o.put("# HELP nginx_ratelimit_");
    o.put(f.metric);
    o.put(" ");
    o.put(f.help);
    o.put("\n# TYPE nginx_ratelimit_");
    o.put(f.metric);
    o.put(" ");
    o.put(f.type);
    o.put("\n");
}

// nginx_ratelimit_METRIC{zone="Z" (a zone of another block than http:
// ,block="B")
void series(Out &o, const char *metric, const rl_zone_snapshot_t &z)
{
    o.put("nginx_ratelimit_");
    o.put(metric);
    o.put("{zone=");
    o.label(z.name);
    if (z.block.len != 0 && !(z.block.len == 4 && std::memcmp(z.block.data, "http", 4) == 0)) {
        o.put(",block=");  // an HTTP zone's series carry none: queries made for them match
        o.label(z.block);
    }
}

void sample(Out &o, uint64_t value)
{
    o.put("} ");
    o.num(value);
    o.put("\n");
}

void prometheus_redis(Out &o, const rl_stats_snapshot_t &s)
{
    bool any = false;
    for (size_t i = 0; i < s.n; i++) {
        any |= s.zones[i].redis != nullptr;
    }
    if (!any) {
        return;
    }
    for (const Figure &f : kRedisFigures) {
        describe(o, f);
        for (size_t i = 0; i < s.n; i++) {
            if (s.zones[i].redis != nullptr) {
                series(o, f.metric, s.zones[i]);
                sample(o, figure_of(*s.zones[i].redis, f));
            }
        }
    }
    o.put("# HELP nginx_ratelimit_redis_latency_seconds Time from sending a request's script call to its reply.\n"
          "# TYPE nginx_ratelimit_redis_latency_seconds histogram\n");
    for (size_t i = 0; i < s.n; i++) {
        const rl_zone_snapshot_t &z = s.zones[i];
        if (z.redis == nullptr) {
            continue;
        }
        uint64_t sum = 0;
        for (size_t k = 0; k <= RL_REDIS_LATENCY_BUCKETS; k++) {
            sum += z.redis->latency[k];
            series(o, "redis_latency_seconds_bucket", z);
            if (k < RL_REDIS_LATENCY_BUCKETS) {
                o.put(",le=\"");
                o.seconds(z.redis->latency_le_us[k]);
                o.put("\"");
            } else {
                o.put(",le=\"+Inf\"");
            }
            sample(o, sum);
        }
        series(o, "redis_latency_seconds_sum", z);
        o.put("} ");
        o.seconds(z.redis->latency_us);
        o.put("\n");
        series(o, "redis_latency_seconds_count", z);
        sample(o, sum);
    }
}

void prometheus_sync(Out &o, const rl_stats_snapshot_t &s)
{
    bool any = false;
    for (size_t i = 0; i < s.n; i++) {
        any |= s.zones[i].sync != nullptr;
    }
    for (size_t k = 0; any && k < sizeof(kSyncFigures) / sizeof(kSyncFigures[0]); k++) {
        const Figure &f = kSyncFigures[k];
        describe(o, f);
        for (size_t i = 0; i < s.n; i++) {
            if (s.zones[i].sync != nullptr) {
                series(o, f.metric, s.zones[i]);
                sample(o, figure_of(*s.zones[i].sync, f));
            }
        }
    }
}

// a series a key: nginx_ratelimit_top_refused{zone,rule,fingerprint}, with
// key= where the rule logs keys in clear; a bandwidth rule's keys in
// nginx_ratelimit_top_bytes (bytes granted, counted in KiB)
void prometheus_top(Out &o, const rl_stats_snapshot_t &s, int kib)
{
    bool any = !kib;
    for (size_t i = 0; !any && i < s.n; i++) {
        for (size_t k = 0; s.zones[i].tops != nullptr && k < s.zones[i].ncounters; k++) {
            any |= s.zones[i].tops[k].kib != 0;
        }
    }
    if (!any) {
        return;  // no bandwidth rule's keys: no family of them
    }
    o.put(kib ? "# HELP nginx_ratelimit_top_bytes Bytes granted in the last one to two minutes to the keys a "
                "bandwidth rule grants most (at most 64 a rule; counted in KiB, each grant rounded up).\n"
                "# TYPE nginx_ratelimit_top_bytes gauge\n"
              : "# HELP nginx_ratelimit_top_refused Refusals in the last one to two minutes of the keys a rule "
                "refuses most (at most 64 a rule).\n"
                "# TYPE nginx_ratelimit_top_refused gauge\n");
    for (size_t i = 0; i < s.n; i++) {
        const rl_zone_snapshot_t &z = s.zones[i];
        for (size_t k = 0; z.tops != nullptr && k < z.ncounters; k++) {
            const rl_top_view_t &t = z.tops[k];
            for (size_t j = 0; (t.kib != 0) == (kib != 0) && j < t.n; j++) {
                const rl_top_key_t &key = t.keys[j];
                char fp[16];
                Out hex(fp, sizeof(fp));
                hex.hex16(key.tag);
                series(o, kib ? "top_bytes" : "top_refused", z);
                o.put(",rule=");
                o.label(name_of(z.counters[k]));
                o.put(",fingerprint=");
                o.label(fp, sizeof(fp));
                if (t.log_key && key.key_len) {
                    o.put(",key=");
                    o.label_shown(key.key, key.key_len, key.key_cut != 0);
                }
                sample(o, kib ? key.refused * 1024 : key.refused);
            }
        }
    }
}

}  // namespace

// "size":N,"bytes_used":N,...: a zone's figures (the stats and the key API)
void zone_figures(Out &o, const rl_zone_snapshot_t &z)
{
    const char *sep = "\"";
    for (const Figure &f : kZoneFigures) {
        o.put(sep);
        o.put(f.name);
        o.put("\":");
        o.num(figure_of(z, f));
        sep = ",\"";
    }
    if (z.block.len != 0) {
        o.put(",\"block\":");
        o.json(z.block);
    }
}

}  // namespace rl

extern "C" {

size_t rl_render_stats_json(const rl_stats_snapshot_t *s, char *buf, size_t cap)
{
    rl::Out o(buf, cap);
    o.put("{\"version\":");
    o.json(s->version);
    o.put(",\"zones\":{");
    for (size_t i = 0; i < s->n; i++) {
        const rl_zone_snapshot_t &z = s->zones[i];
        o.put(i ? "," : "");
        o.json(z.name);
        o.put(":{");
        rl::zone_figures(o, z);
        o.put(",\"rules\":{");
        for (size_t k = 0; k < z.ncounters; k++) {
            o.put(k ? "," : "");
            o.json(rl::name_of(z.counters[k]));
            const char *sep = ":{\"";
            rl::each_rule_figure([&](const rl::Figure &f) {
                o.put(sep);
                o.put(f.name);
                o.put("\":");
                o.num(rl::figure_of(z.counters[k], f));
                sep = ",\"";
            });
            o.put("}");
        }
        o.put("}");
        if (z.redis != nullptr) {
            rl::json_redis(o, z);
        }
        if (z.sync != nullptr) {
            rl::json_sync(o, z);
        }
        o.put("}");
    }
    o.put("}}\n");
    return o.len();
}

size_t rl_render_stats_prometheus(const rl_stats_snapshot_t *s, char *buf, size_t cap)
{
    rl::Out o(buf, cap);
    for (const rl::Figure &f : rl::kZoneFigures) {
        rl::describe(o, f);
        for (size_t i = 0; i < s->n; i++) {
            rl::series(o, f.metric, s->zones[i]);
            rl::sample(o, rl::figure_of(s->zones[i], f));
        }
    }
    rl::each_rule_figure([&](const rl::Figure &f) {
        rl::describe(o, f);
        for (size_t i = 0; i < s->n; i++) {
            const rl_zone_snapshot_t &z = s->zones[i];
            for (size_t k = 0; k < z.ncounters; k++) {
                rl::series(o, f.metric, z);
                o.put(",rule=");
                o.label(rl::name_of(z.counters[k]));
                rl::sample(o, rl::figure_of(z.counters[k], f));
            }
        }
    });
    rl::prometheus_redis(o, *s);
    rl::prometheus_sync(o, *s);
    rl::prometheus_top(o, *s, 0);
    rl::prometheus_top(o, *s, 1);
    return o.len();
}

}  // extern "C"
