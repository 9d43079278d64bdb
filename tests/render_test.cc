// What ratelimit_stats and the key API answer, rendered by the core from
// snapshots: exact JSON and Prometheus text for known figures, every byte
// value escaped in JSON strings and Prometheus label values, and the
// bounded writer (the size told whatever the buffer, nothing written past
// it).
#include <cstring>
#include <string>
#include <vector>

#include "helpers.h"
#include "json_check.h"
#include "ratelimit_render.h"
#include "util/out.h"

namespace {

using json_check::json_string;
using json_check::json_valid;

rl_str_t str(const char *s)
{
    return rl_str_t{s, std::strlen(s)};
}

// Renders with fn(buf, cap) three ways: to learn the size, into exactly
// that, and into one byte less (the same first bytes, the same size told,
// nothing written past the buffer).
template <typename F> std::string render(F fn)
{
    const size_t n = fn(nullptr, 0);
    std::string s(n + 16, '#');
    EXPECT_EQ(fn(&s[0], n), n);
    EXPECT_EQ(s.substr(n), std::string(16, '#'));
    s.resize(n);
    if (n > 0) {
        std::string t(n + 16, '#');
        EXPECT_EQ(fn(&t[0], n - 1), n);
        EXPECT_EQ(t.substr(0, n - 1), s.substr(0, n - 1));
        EXPECT_EQ(t.substr(n - 1), std::string(17, '#'));
    }
    return s;
}

std::string json_of(const std::string &bytes)
{
    std::string out(6 * bytes.size(), '\0');
    out.resize(rl::json_escape(&out[0], bytes.data(), bytes.size()));
    EXPECT_EQ(rl::json_escape(nullptr, bytes.data(), bytes.size()), out.size());
    return out;
}

std::string label_of(const std::string &bytes)
{
    std::string out(3 * bytes.size(), '\0');
    out.resize(rl::label_escape(&out[0], bytes.data(), bytes.size()));
    EXPECT_EQ(rl::label_escape(nullptr, bytes.data(), bytes.size()), out.size());
    return out;
}

// A label value as Prometheus's text format reads it: only \\, \" and \n
// escaped, valid UTF-8 (a label escape is a JSON escape too).
bool label_valid(const std::string &esc)
{
    for (size_t i = 0; i < esc.size(); i++) {
        if (esc[i] == '\\') {
            if (i + 1 == esc.size() || (esc[i + 1] != '\\' && esc[i + 1] != '"' && esc[i + 1] != 'n')) {
                return false;
            }
            i++;
        } else if (esc[i] == '"' || esc[i] == '\n') {
            return false;
        }
    }
    std::string decoded;
    return json_string("\"" + esc + "\"", &decoded);
}

TEST(Escape, EveryByteInJson)
{
    for (int b = 0; b < 256; b++) {
        const std::string in(1, (char) b);
        const std::string out = json_of(in);
        char want[8];
        if (b == '"' || b == '\\') {
            std::snprintf(want, sizeof(want), "\\%c", b);
        } else if (b >= 0x20 && b < 0x7f) {
            std::snprintf(want, sizeof(want), "%c", b);
        } else if (b < 0x80) {
            std::snprintf(want, sizeof(want), "\\u%04x", b);
        } else {
            std::snprintf(want, sizeof(want), "\\ufffd");  // a lone byte is never UTF-8
        }
        EXPECT_EQ(out, want) << "byte " << b;
        std::string decoded;
        ASSERT_TRUE(json_string("\"" + out + "\"", &decoded)) << "byte " << b;
        EXPECT_EQ(decoded, b < 0x80 ? in : std::string("\xef\xbf\xbd")) << "byte " << b;
    }
}

TEST(Escape, EveryByteInALabel)
{
    for (int b = 0; b < 256; b++) {
        const std::string out = label_of(std::string(1, (char) b));
        std::string want;
        if (b == '"' || b == '\\') {
            want = std::string("\\") + (char) b;
        } else if (b == '\n') {
            want = "\\n";
        } else if (b >= 0x20 && b < 0x7f) {
            want = std::string(1, (char) b);
        } else if (b < 0x80) {
            want = "?";
        } else {
            want = "\xef\xbf\xbd";
        }
        EXPECT_EQ(out, want) << "byte " << b;
        EXPECT_TRUE(label_valid(out)) << "byte " << b;
    }
}

TEST(Escape, Utf8AsItIsAndOnlyWhenWellFormed)
{
    const std::vector<std::pair<std::string, bool>> cases = {
        {"caf\xc3\xa9", true},        // U+00E9
        {"\xe2\x82\xac", true},       // U+20AC
        {"\xf0\x9f\x98\x80", true},   // U+1F600
        {"\xf4\x8f\xbf\xbf", true},   // U+10FFFF
        {"\xed\x9f\xbf", true},       // U+D7FF
        {"\xc0\x80", false},          // overlong NUL
        {"\xc1\xbf", false},          // overlong
        {"\xe0\x80\xaf", false},      // overlong '/'
        {"\xf0\x80\x80\xaf", false},  // overlong
        {"\xed\xa0\x80", false},      // a surrogate
        {"\xf4\x90\x80\x80", false},  // above U+10FFFF
        {"\xf5\x80\x80\x80", false},  // no such lead byte
        {"\xe2\x82", false},          // cut short
        {"\xc3", false},              // cut short
        {"\x80\xbf", false},          // continuation bytes alone
    };
    for (const auto &c : cases) {
        std::string decoded;
        ASSERT_TRUE(json_string("\"" + json_of(c.first) + "\"", &decoded));
        EXPECT_TRUE(label_valid(label_of(c.first)));
        if (c.second) {
            EXPECT_EQ(json_of(c.first), c.first);
            EXPECT_EQ(label_of(c.first), c.first);
        } else {
            EXPECT_NE(json_of(c.first).find("\\ufffd"), std::string::npos) << json_of(c.first);
            EXPECT_NE(label_of(c.first).find("\xef\xbf\xbd"), std::string::npos);
        }
    }
    // a valid sequence after a cut one is kept whole
    EXPECT_EQ(json_of("\xe2\x82"
                      "\xc3\xa9"),
              "\\ufffd\\ufffd\xc3\xa9");
}

TEST(Escape, EveryPairOfBytesGivesValidJsonAndLabels)
{
    for (int a = 0; a < 256; a++) {
        for (int b = 0; b < 256; b++) {
            const std::string in{(char) a, (char) b};
            std::string decoded;
            ASSERT_TRUE(json_string("\"" + json_of(in) + "\"", &decoded)) << a << " " << b;
            ASSERT_TRUE(label_valid(label_of(in))) << a << " " << b;
        }
    }
}

TEST(Out, NumbersAndSeconds)
{
    char buf[64];
    rl::Out o(buf, sizeof(buf));
    o.num(0);
    o.put(" ");
    o.num(UINT64_MAX);
    o.put(" ");
    o.num0(-5);
    o.put(" ");
    o.hex16(0xab);
    o.put(" ");
    o.seconds(250);
    EXPECT_EQ(std::string(buf, o.len()), "0 18446744073709551615 0 00000000000000ab 0.000250");
    rl::Out s(buf, sizeof(buf));
    s.seconds(12345678901);
    EXPECT_EQ(std::string(buf, s.len()), "12345.678901");
}

TEST(Out, KeysShownAsLogLinesShowThem)
{
    char buf[600];
    rl::Out o(buf, sizeof(buf));
    o.json_shown("a\"b\\c\x01\xff", 7);
    o.put(" ");
    o.label_shown("abc", 3, true);
    o.put(" ");
    const std::string long_key(100, 'k');
    o.json_shown(long_key.data(), long_key.size());
    EXPECT_EQ(std::string(buf, o.len()),
              "\"a\\\\x22b\\\\x5cc\\\\x01\\\\xff\" \"abc...\" \"" + std::string(64, 'k') + "...\"");
}

// ---- ratelimit_stats ----------------------------------------------------

struct Stats {
    rl_rule_stats_t counters[2]{};
    rl_top_key_t keys[3]{};
    rl_top_view_t tops[2]{};
    rl_redis_figures_t redis{};
    rl_zone_snapshot_t zones[2]{};
    rl_stats_snapshot_t snap{};

    Stats()
    {
        std::strcpy(counters[0].name, "r1");
        for (int k = 0; k < RL_OUTCOMES; k++) {
            counters[0].count[k] = (uint64_t) k + 1;
        }
        counters[0].charged = 6;
        counters[0].debts = 7;
        counters[0].in_flight = 8;
        counters[0].peak = 9;
        counters[0].waited = 10;
        counters[0].bans = 11;
        counters[0].dry_run_bans = 12;
        counters[0].overrides = 14;
        counters[0].overridden = 15;
        counters[0].limit_now = 17;
        counters[0].baseline_us = 18;
        counters[0].recent_us = 19;
        counters[0].bytes = 20;
        counters[0].bytes_per_second = 21;
        counters[0].connections = 22;
        counters[0].delayed_now = 23;
        std::strcpy(counters[1].name, "gone");  // no rule of this configuration

        keys[0].tag = 0x0123456789abcdef;
        keys[0].refused = 5;
        std::memcpy(keys[0].key, "k\"1", 3);
        keys[0].key_len = 3;
        keys[1].tag = 0xff;
        keys[1].refused = 2;
        keys[2].tag = 1;
        keys[2].refused = 1;
        std::memcpy(keys[2].key, "abc", 3);
        keys[2].key_len = 3;
        keys[2].key_cut = 1;
        tops[0] = rl_top_view_t{str("r1"), 1, RL_TOP_KEPT, 8, 3, keys};
        tops[1] = rl_top_view_t{str("gone"), 0, RL_TOP_NONE, 0, 0, nullptr};

        const uint64_t le[RL_REDIS_LATENCY_BUCKETS] = {250, 500, 1000, 2500, 5000, 10000, 25000, 50000};
        redis = rl_redis_figures_t{
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, {1, 0, 2, 0, 0, 0, 0, 0, 3}, {}, 1234567};
        std::memcpy(redis.latency_le_us, le, sizeof(le));

        zones[0].name = str("a");
        zones[0].table.size = 100;
        zones[0].table.keys = 2;
        zones[0].table.capacity = 10;
        zones[0].table.evictions = 3;
        zones[0].table.live_evictions = 1;
        zones[0].table.summary_bytes = 8;
        zones[0].table.summary_refusals = 4;
        zones[0].used = 50;
        zones[0].overrides = 16;
        zones[0].overrides_capacity = 1000;
        zones[0].ncounters = 2;
        zones[0].counters = counters;
        zones[0].tops = tops;
        zones[1].name = str("b-2.z");
        zones[1].table.size = 64;
        zones[1].redis = &redis;
        zones[1].server = str("127.0.0.1:6379");
        snap = rl_stats_snapshot_t{str("1.2.3"), 2, zones};
    }
};

TEST(Stats, Json)
{
    Stats s;
    const std::string out = render([&](char *b, size_t c) { return rl_render_stats_json(&s.snap, b, c); });
    EXPECT_EQ(out,
              "{\"version\":\"1.2.3\",\"zones\":{\"a\":{\"size\":100,\"bytes_used\":50,\"keys\":2,\"capacity\":10,"
              "\"overrides\":16,\"overrides_capacity\":1000,\"evictions\":3,\"live_evictions\":1,\"summary_bytes\":8,"
              "\"summary_refusals\":4,\"rules\":{\"r1\":{"
              "\"allowed\":1,\"rejected\":2,\"delayed\":3,\"dry_run_rejected\":4,\"exempt\":5,\"charged\":6,"
              "\"debts\":7,\"in_flight\":8,\"peak\":9,\"waited\":10,\"bans\":11,\"dry_run_bans\":12,"
              "\"overrides\":14,\"overridden\":15,\"limit_now\":17,\"baseline_us\":18,"
              "\"recent_us\":19,\"bytes\":20,\"bytes_per_second\":21,\"connections\":22,\"delayed_now\":23},\"gone\":{"
              "\"allowed\":0,\"rejected\":0,"
              "\"delayed\":0,\"dry_run_rejected\":0,\"exempt\":0,\"charged\":0,\"debts\":0,\"in_flight\":0,"
              "\"peak\":0,\"waited\":0,\"bans\":0,\"dry_run_bans\":0,\"overrides\":0,"
              "\"overridden\":0,\"limit_now\":0,\"baseline_us\":0,\"recent_us\":0,\"bytes\":0,\"bytes_per_second\":0,"
              "\"connections\":0,\"delayed_now\":0}}},\"b-2.z\":{"
              "\"size\":64,\"bytes_used\":0,\"keys\":0,\"capacity\":0,\"overrides\":0,\"overrides_capacity\":0,"
              "\"evictions\":0,\"live_evictions\":0,\"summary_bytes\":0,\"summary_refusals\":0,\"rules\":{},"
              "\"redis\":{\"server\":\"127.0.0.1:6379\",\"decisions\":1,\"errors\":2,\"timeouts\":3,\"fallbacks\":4,"
              "\"reconnects\":5,\"charges\":6,\"undelivered\":7,\"cached\":8,\"tls_failures\":9,\"tls_resumed\":10,"
              "\"leases\":11,\"leases_released\":12,\"leases_expired\":13,\"leases_renewed\":14,"
              "\"leases_undelivered\":15,\"leases_restored\":16,"
              "\"latency_us\":{\"le_250\":1,\"le_500\":0,\"le_1000\":"
              "2,\"le_2500\":0,\"le_5000\":0,"
              "\"le_10000\":0,\"le_25000\":0,\"le_50000\":0,\"inf\":3},\"latency_us_sum\":1234567}}}}\n");
    EXPECT_TRUE(json_valid(out));
}

// A zone says the block that declared it: "block" last among its figures
// (stats and key API); a label after the zone's in Prometheus for a block
// other than http, whose series keep the labels they had.
TEST(Stats, BlockOfAZone)
{
    Stats s;
    s.zones[0].block = str("stream");
    s.zones[1].block = str("http");
    const std::string json = render([&](char *b, size_t c) { return rl_render_stats_json(&s.snap, b, c); });
    EXPECT_NE(json.find("\"summary_refusals\":4,\"block\":\"stream\",\"rules\":{"), std::string::npos) << json;
    EXPECT_NE(json.find("\"summary_refusals\":0,\"block\":\"http\",\"rules\":{}"), std::string::npos) << json;
    EXPECT_TRUE(json_valid(json));
    const std::string prom = render([&](char *b, size_t c) { return rl_render_stats_prometheus(&s.snap, b, c); });
    EXPECT_NE(prom.find("nginx_ratelimit_zone_size_bytes{zone=\"a\",block=\"stream\"} 100\n"), std::string::npos);
    EXPECT_NE(prom.find("nginx_ratelimit_allowed_total{zone=\"a\",block=\"stream\",rule=\"r1\"} 1\n"),
              std::string::npos);
    EXPECT_NE(prom.find("nginx_ratelimit_zone_size_bytes{zone=\"b-2.z\"} 64\n"), std::string::npos);
    EXPECT_EQ(prom.find("block=\"http\""), std::string::npos);
    const std::string api = render([&](char *b, size_t c) { return rl_render_api_zone(&s.zones[0], b, c); });
    EXPECT_NE(api.find("\"block\":\"stream\""), std::string::npos) << api;
}

TEST(Stats, JsonOfNoZone)
{
    const rl_stats_snapshot_t none{str("1.2.3"), 0, nullptr};
    EXPECT_EQ(render([&](char *b, size_t c) { return rl_render_stats_json(&none, b, c); }),
              "{\"version\":\"1.2.3\",\"zones\":{}}\n");
    EXPECT_EQ(render([&](char *b, size_t c) { return rl_render_stats_prometheus(&none, b, c); }).find("{"),
              std::string::npos)
        << "families described, no series";
}

TEST(Stats, Prometheus)
{
    Stats s;
    const std::string out = render([&](char *b, size_t c) { return rl_render_stats_prometheus(&s.snap, b, c); });
    const std::string zone_family = "# HELP nginx_ratelimit_zone_size_bytes Size of the zone.\n"
                                    "# TYPE nginx_ratelimit_zone_size_bytes gauge\n"
                                    "nginx_ratelimit_zone_size_bytes{zone=\"a\"} 100\n"
                                    "nginx_ratelimit_zone_size_bytes{zone=\"b-2.z\"} 64\n"
                                    "# HELP nginx_ratelimit_zone_used_bytes Bytes of the zone holding keys.\n"
                                    "# TYPE nginx_ratelimit_zone_used_bytes gauge\n"
                                    "nginx_ratelimit_zone_used_bytes{zone=\"a\"} 50\n"
                                    "nginx_ratelimit_zone_used_bytes{zone=\"b-2.z\"} 0\n";
    EXPECT_EQ(out.substr(0, zone_family.size()), zone_family);
    EXPECT_NE(out.find("# TYPE nginx_ratelimit_zone_summary_refusals_total counter\n"
                       "nginx_ratelimit_zone_summary_refusals_total{zone=\"a\"} 4\n"
                       "nginx_ratelimit_zone_summary_refusals_total{zone=\"b-2.z\"} 0\n"
                       "# HELP nginx_ratelimit_allowed_total Requests that passed and spent at the rule.\n"
                       "# TYPE nginx_ratelimit_allowed_total counter\n"
                       "nginx_ratelimit_allowed_total{zone=\"a\",rule=\"r1\"} 1\n"
                       "nginx_ratelimit_allowed_total{zone=\"a\",rule=\"gone\"} 0\n"
                       "# HELP nginx_ratelimit_rejected_total"),
              std::string::npos);
    EXPECT_NE(out.find("# HELP nginx_ratelimit_in_flight_peak The most requests holding a slot at once "
                       "(concurrency).\n"
                       "# TYPE nginx_ratelimit_in_flight_peak gauge\n"
                       "nginx_ratelimit_in_flight_peak{zone=\"a\",rule=\"r1\"} 9\n"),
              std::string::npos);
    const std::string tail =
        "# HELP nginx_ratelimit_waited_total Requests that waited for a slot (concurrency, max_wait).\n"
        "# TYPE nginx_ratelimit_waited_total counter\n"
        "nginx_ratelimit_waited_total{zone=\"a\",rule=\"r1\"} 10\n"
        "nginx_ratelimit_waited_total{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_bans_total Bans the rule started (ban=).\n"
        "# TYPE nginx_ratelimit_bans_total counter\n"
        "nginx_ratelimit_bans_total{zone=\"a\",rule=\"r1\"} 11\n"
        "nginx_ratelimit_bans_total{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_dry_run_bans_total Refusals of a dry run that would have started a ban (ban=); none "
        "is stored.\n"
        "# TYPE nginx_ratelimit_dry_run_bans_total counter\n"
        "nginx_ratelimit_dry_run_bans_total{zone=\"a\",rule=\"r1\"} 12\n"
        "nginx_ratelimit_dry_run_bans_total{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_overrides Overrides held naming the rule (the key API's overrides).\n"
        "# TYPE nginx_ratelimit_overrides gauge\n"
        "nginx_ratelimit_overrides{zone=\"a\",rule=\"r1\"} 14\n"
        "nginx_ratelimit_overrides{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_overridden_total Requests that met an override in the rule.\n"
        "# TYPE nginx_ratelimit_overridden_total counter\n"
        "nginx_ratelimit_overridden_total{zone=\"a\",rule=\"r1\"} 15\n"
        "nginx_ratelimit_overridden_total{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_adaptive_limit The limit of requests in flight now (adaptive; of the key that moved "
        "its limit last).\n"
        "# TYPE nginx_ratelimit_adaptive_limit gauge\n"
        "nginx_ratelimit_adaptive_limit{zone=\"a\",rule=\"r1\"} 17\n"
        "nginx_ratelimit_adaptive_limit{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_adaptive_baseline_microseconds The upstream's latency without queueing, as the "
        "adaptive rule learned it.\n"
        "# TYPE nginx_ratelimit_adaptive_baseline_microseconds gauge\n"
        "nginx_ratelimit_adaptive_baseline_microseconds{zone=\"a\",rule=\"r1\"} 18\n"
        "nginx_ratelimit_adaptive_baseline_microseconds{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_adaptive_recent_microseconds The upstream's typical latency over the adaptive rule's "
        "last interval (the geometric mean of its middle half).\n"
        "# TYPE nginx_ratelimit_adaptive_recent_microseconds gauge\n"
        "nginx_ratelimit_adaptive_recent_microseconds{zone=\"a\",rule=\"r1\"} 19\n"
        "nginx_ratelimit_adaptive_recent_microseconds{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_bandwidth_bytes_total Bytes the rule granted its keys' responses "
        "(ratelimit_bandwidth).\n"
        "# TYPE nginx_ratelimit_bandwidth_bytes_total counter\n"
        "nginx_ratelimit_bandwidth_bytes_total{zone=\"a\",rule=\"r1\"} 20\n"
        "nginx_ratelimit_bandwidth_bytes_total{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_bandwidth_bytes_per_second Bytes the rule granted in the last whole second "
        "(ratelimit_bandwidth).\n"
        "# TYPE nginx_ratelimit_bandwidth_bytes_per_second gauge\n"
        "nginx_ratelimit_bandwidth_bytes_per_second{zone=\"a\",rule=\"r1\"} 21\n"
        "nginx_ratelimit_bandwidth_bytes_per_second{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_bandwidth_connections Responses sending under the rule now (ratelimit_bandwidth).\n"
        "# TYPE nginx_ratelimit_bandwidth_connections gauge\n"
        "nginx_ratelimit_bandwidth_connections{zone=\"a\",rule=\"r1\"} 22\n"
        "nginx_ratelimit_bandwidth_connections{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_bandwidth_delayed_connections Of those, responses waiting for their next slice now "
        "(ratelimit_bandwidth).\n"
        "# TYPE nginx_ratelimit_bandwidth_delayed_connections gauge\n"
        "nginx_ratelimit_bandwidth_delayed_connections{zone=\"a\",rule=\"r1\"} 23\n"
        "nginx_ratelimit_bandwidth_delayed_connections{zone=\"a\",rule=\"gone\"} 0\n"
        "# HELP nginx_ratelimit_redis_decisions_total Requests decided in Redis.\n"
        "# TYPE nginx_ratelimit_redis_decisions_total counter\n"
        "nginx_ratelimit_redis_decisions_total{zone=\"b-2.z\"} 1\n"
        "# HELP nginx_ratelimit_redis_errors_total Redis error replies and lost connections.\n"
        "# TYPE nginx_ratelimit_redis_errors_total counter\n"
        "nginx_ratelimit_redis_errors_total{zone=\"b-2.z\"} 2\n"
        "# HELP nginx_ratelimit_redis_timeouts_total Requests with no Redis reply within redis_timeout.\n"
        "# TYPE nginx_ratelimit_redis_timeouts_total counter\n"
        "nginx_ratelimit_redis_timeouts_total{zone=\"b-2.z\"} 3\n"
        "# HELP nginx_ratelimit_redis_fallbacks_total Requests decided by on_redis_error.\n"
        "# TYPE nginx_ratelimit_redis_fallbacks_total counter\n"
        "nginx_ratelimit_redis_fallbacks_total{zone=\"b-2.z\"} 4\n"
        "# HELP nginx_ratelimit_redis_reconnects_total Connections opened to Redis.\n"
        "# TYPE nginx_ratelimit_redis_reconnects_total counter\n"
        "nginx_ratelimit_redis_reconnects_total{zone=\"b-2.z\"} 5\n"
        "# HELP nginx_ratelimit_redis_charges_total Requests' charges (charge=) settled in Redis.\n"
        "# TYPE nginx_ratelimit_redis_charges_total counter\n"
        "nginx_ratelimit_redis_charges_total{zone=\"b-2.z\"} 6\n"
        "# HELP nginx_ratelimit_redis_undelivered_total Requests' charges Redis did not take (not reachable, no "
        "reply, a reply refused): lost.\n"
        "# TYPE nginx_ratelimit_redis_undelivered_total counter\n"
        "nginx_ratelimit_redis_undelivered_total{zone=\"b-2.z\"} 7\n"
        "# HELP nginx_ratelimit_redis_cached_total Requests refused from a refusal Redis gave and this server "
        "remembers, without a round trip.\n"
        "# TYPE nginx_ratelimit_redis_cached_total counter\n"
        "nginx_ratelimit_redis_cached_total{zone=\"b-2.z\"} 8\n"
        "# HELP nginx_ratelimit_redis_tls_failures_total TLS connections to Redis that failed: handshake, "
        "certificate, or a TLS alert.\n"
        "# TYPE nginx_ratelimit_redis_tls_failures_total counter\n"
        "nginx_ratelimit_redis_tls_failures_total{zone=\"b-2.z\"} 9\n"
        "# HELP nginx_ratelimit_redis_tls_resumed_total TLS connections to Redis that resumed the server's last "
        "session.\n"
        "# TYPE nginx_ratelimit_redis_tls_resumed_total counter\n"
        "nginx_ratelimit_redis_tls_resumed_total{zone=\"b-2.z\"} 10\n"
        "# HELP nginx_ratelimit_redis_leases_total Concurrency slots taken in Redis by this server (leases).\n"
        "# TYPE nginx_ratelimit_redis_leases_total counter\n"
        "nginx_ratelimit_redis_leases_total{zone=\"b-2.z\"} 11\n"
        "# HELP nginx_ratelimit_redis_leases_released_total Leases given back when their request ended.\n"
        "# TYPE nginx_ratelimit_redis_leases_released_total counter\n"
        "nginx_ratelimit_redis_leases_released_total{zone=\"b-2.z\"} 12\n"
        "# HELP nginx_ratelimit_redis_leases_expired_total Leases found expired when their request ended: not "
        "renewed in time (a worker stalled, Redis away).\n"
        "# TYPE nginx_ratelimit_redis_leases_expired_total counter\n"
        "nginx_ratelimit_redis_leases_expired_total{zone=\"b-2.z\"} 13\n"
        "# HELP nginx_ratelimit_redis_leases_renewed_total Leases renewed for requests that outlive a third of "
        "their lease.\n"
        "# TYPE nginx_ratelimit_redis_leases_renewed_total counter\n"
        "nginx_ratelimit_redis_leases_renewed_total{zone=\"b-2.z\"} 14\n"
        "# HELP nginx_ratelimit_redis_leases_undelivered_total Releases and renewals Redis did not take: the "
        "lease runs out by itself.\n"
        "# TYPE nginx_ratelimit_redis_leases_undelivered_total counter\n"
        "nginx_ratelimit_redis_leases_undelivered_total{zone=\"b-2.z\"} 15\n"
        "# HELP nginx_ratelimit_redis_leases_restored_total Leases written into Redis again for requests in "
        "flight: admitted while Redis was away, or lost by it.\n"
        "# TYPE nginx_ratelimit_redis_leases_restored_total counter\n"
        "nginx_ratelimit_redis_leases_restored_total{zone=\"b-2.z\"} 16\n"
        "# HELP nginx_ratelimit_redis_latency_seconds Time from sending a request's script call to its reply.\n"
        "# TYPE nginx_ratelimit_redis_latency_seconds histogram\n"
        "nginx_ratelimit_redis_latency_seconds_bucket{zone=\"b-2.z\",le=\"0.000250\"} 1\n"
        "nginx_ratelimit_redis_latency_seconds_bucket{zone=\"b-2.z\",le=\"0.000500\"} 1\n"
        "nginx_ratelimit_redis_latency_seconds_bucket{zone=\"b-2.z\",le=\"0.001000\"} 3\n"
        "nginx_ratelimit_redis_latency_seconds_bucket{zone=\"b-2.z\",le=\"0.002500\"} 3\n"
        "nginx_ratelimit_redis_latency_seconds_bucket{zone=\"b-2.z\",le=\"0.005000\"} 3\n"
        "nginx_ratelimit_redis_latency_seconds_bucket{zone=\"b-2.z\",le=\"0.010000\"} 3\n"
        "nginx_ratelimit_redis_latency_seconds_bucket{zone=\"b-2.z\",le=\"0.025000\"} 3\n"
        "nginx_ratelimit_redis_latency_seconds_bucket{zone=\"b-2.z\",le=\"0.050000\"} 3\n"
        "nginx_ratelimit_redis_latency_seconds_bucket{zone=\"b-2.z\",le=\"+Inf\"} 6\n"
        "nginx_ratelimit_redis_latency_seconds_sum{zone=\"b-2.z\"} 1.234567\n"
        "nginx_ratelimit_redis_latency_seconds_count{zone=\"b-2.z\"} 6\n"
        "# HELP nginx_ratelimit_top_refused Refusals in the last one to two minutes of the keys a rule refuses "
        "most (at most 64 a rule).\n"
        "# TYPE nginx_ratelimit_top_refused gauge\n"
        "nginx_ratelimit_top_refused{zone=\"a\",rule=\"r1\",fingerprint=\"0123456789abcdef\",key=\"k\\\\x221\"} 5\n"
        "nginx_ratelimit_top_refused{zone=\"a\",rule=\"r1\",fingerprint=\"00000000000000ff\"} 2\n"
        "nginx_ratelimit_top_refused{zone=\"a\",rule=\"r1\",fingerprint=\"0000000000000001\",key=\"abc...\"} 1\n";
    ASSERT_GE(out.size(), tail.size());
    EXPECT_EQ(out.substr(out.size() - tail.size()), tail);

    // every line a comment or a sample: name{labels} value
    size_t lines = 0;
    for (size_t at = 0; at < out.size(); lines++) {
        const size_t nl = out.find('\n', at);
        ASSERT_NE(nl, std::string::npos);
        const std::string line = out.substr(at, nl - at);
        EXPECT_TRUE(line.rfind("# HELP nginx_ratelimit_", 0) == 0 || line.rfind("# TYPE nginx_ratelimit_", 0) == 0 ||
                    line.rfind("nginx_ratelimit_", 0) == 0)
            << line;
        at = nl + 1;
    }
    EXPECT_EQ(lines, 10 * (2 + 2) + 21 * (2 + 2) + 16 * (2 + 1) + 2 + 11 + 2 + 3);
}

TEST(Stats, LogKeyOffShowsNoKey)
{
    Stats s;
    s.tops[0].log_key = 0;
    const std::string out = render([&](char *b, size_t c) { return rl_render_stats_prometheus(&s.snap, b, c); });
    EXPECT_EQ(out.find("key=\""), std::string::npos);
    EXPECT_NE(out.find("fingerprint=\"0123456789abcdef\"} 5\n"), std::string::npos);
}

// ---- the key API --------------------------------------------------------

struct Zone {
    rl_rule_t rules[7];
    rl_rule_view_t views[7];
    rl_zone_snapshot_t z{};

    Zone()
    {
        const char *const text[] = {
            "limit=3 period=1h name=per_user log_key=on",
            "algorithm=quota limit=100 reset=weekly",
            "algorithm=leaky_bucket limit=10 period=1s max_delay=2s",
            "algorithm=sliding_window limit=2 period=1h",
            "algorithm=fixed_window align=first limit=2 period=1h",
            "algorithm=concurrency limit=2",
            "algorithm=token_bucket limit=4 burst=7 period=1m",
        };
        for (int i = 0; i < 7; i++) {
            rules[i] = rule_of(text[i]);
            views[i] = rl_rule_view_t{rl_str_t{rules[i].name, std::strlen(rules[i].name)}, &rules[i],
                                      str(i == 0 ? "$http_x_user" : "ip:$x\t\"q\\\xc3\xa9\x01")};
        }
        rules[6].limit_var = 1;
        z.name = str("api");
        z.table.size = 1048576;
        z.table.keys = 5;
        z.used = 41931;
        z.nrules = 7;
        z.rules = views;
    }
};

TEST(Api, Zone)
{
    Zone zone;
    const std::string out = render([&](char *b, size_t c) { return rl_render_api_zone(&zone.z, b, c); });
    const std::string key = "\"key\":\"ip:$x\\u0009\\\"q\\\\\xc3\xa9\\u0001\"";
    EXPECT_EQ(out, "{\"zone\":\"api\",\"redis\":false,\"size\":1048576,\"bytes_used\":41931,\"keys\":5,\"capacity\":0,"
                   "\"overrides\":0,\"overrides_capacity\":0,\"evictions\":0,\"live_evictions\":0,\"summary_bytes\":0,"
                   "\"summary_refusals\":0,\"rules\":{"
                   "\"per_user\":{\"algorithm\":\"gcra\",\"key\":\"$http_x_user\",\"limit\":3,\"period_ms\":3600000,"
                   "\"burst\":3,\"log_key\":true},"
                   "\"quota_100_weekly\":{\"algorithm\":\"quota\"," +
                       key +
                       ",\"limit\":100,\"reset\":\"weekly\","
                       "\"log_key\":false},"
                       "\"leaky_bucket_10_1s\":{\"algorithm\":\"leaky_bucket\"," +
                       key +
                       ",\"limit\":10,\"period_ms\":1000,"
                       "\"max_delay_ms\":2000,\"log_key\":false},"
                       "\"sliding_window_2_1h\":{\"algorithm\":\"sliding_window\"," +
                       key +
                       ",\"limit\":2,"
                       "\"period_ms\":3600000,\"buckets\":10,\"log_key\":false},"
                       "\"fixed_window_2_1h\":{\"algorithm\":\"fixed_window\"," +
                       key +
                       ",\"limit\":2,\"period_ms\":3600000,"
                       "\"align\":\"first\",\"log_key\":false},"
                       "\"concurrency_2_at_once\":{\"algorithm\":\"concurrency\"," +
                       key +
                       ",\"limit\":2,\"period_ms\":1000,"
                       "\"log_key\":false},"
                       "\"token_bucket_4_1m_b7\":{\"algorithm\":\"token_bucket\"," +
                       key +
                       ",\"limit\":4,"
                       "\"limit_variable\":true,\"period_ms\":60000,\"burst\":7,\"log_key\":false}}}\n");
    EXPECT_TRUE(json_valid(out)) << out;
}

TEST(Api, Zones)
{
    Zone a, b;
    rl_redis_figures_t redis{};
    b.z.name = str("r");
    b.z.redis = &redis;
    b.z.nrules = 1;
    const rl_zone_snapshot_t zones[2] = {a.z, b.z};
    const rl_stats_snapshot_t s{str("0.1.0"), 2, zones};
    const std::string out = render([&](char *buf, size_t c) { return rl_render_api_zones(&s, 1, buf, c); });
    EXPECT_EQ(out.substr(0, 83),
              "{\"version\":\"0.1.0\",\"write\":true,\"top_epoch_ms\":60000,\"zones\":{\"api\":{\"redis\":false,");
    EXPECT_NE(out.find("},\"r\":{\"redis\":true,\"size\":1048576,"), std::string::npos);
    EXPECT_EQ(out.substr(out.size() - 4), "}}}\n");
    EXPECT_TRUE(json_valid(out));
    const std::string ro = render([&](char *buf, size_t c) { return rl_render_api_zones(&s, 0, buf, c); });
    EXPECT_NE(ro.find("\"write\":false,"), std::string::npos);
}

TEST(Api, KeysLookedUp)
{
    Zone zone;
    rl_key_state_t st[2]{};
    st[0].rule = str("per_user");
    st[0].config = &zone.rules[0];
    st[0].tag = 0xddff59193c53b424;
    st[0].cost = 1;
    st[0].peek.held = 1;
    st[0].peek.look.remaining = 0;
    st[0].peek.look.reset_ms = 3599001;
    st[0].peek.next.allowed = 0;
    st[0].peek.next.retry_after_ms = 12;  // under a second: Retry-After 1
    st[0].peek.banned_ms = -3;
    st[1].rule = str("concurrency_2_at_once");
    st[1].config = &zone.rules[5];
    st[1].tag = 7;
    st[1].cost = 2;
    st[1].peek.owed = 1;
    st[1].peek.look.remaining = 1;
    st[1].peek.next.allowed = 1;
    st[1].peek.next.retry_after_ms = 99;  // not shown when allowed
    st[1].peek.next.delay_ms = 250;
    st[1].peek.in_flight = 1;
    st[1].peek.waiting = 3;
    const rl_key_snapshot_t k{str("api"), "a\"b", 3, 0, 0, 2, st};
    const std::string out = render([&](char *b, size_t c) { return rl_render_api_keys(&k, b, c); });
    EXPECT_EQ(out, "{\"zone\":\"api\",\"key\":\"a\\\\x22b\",\"rules\":["
                   "{\"rule\":\"per_user\",\"fingerprint\":\"ddff59193c53b424\",\"state\":\"held\",\"refused\":true,"
                   "\"remaining\":0,\"reset\":3600,\"reset_ms\":3599001,\"retry_after\":1,\"retry_after_ms\":12,"
                   "\"delay_ms\":0,\"banned_ms\":0,\"limit\":3,\"cost\":1},"
                   "{\"rule\":\"concurrency_2_at_once\",\"fingerprint\":\"0000000000000007\",\"state\":\"summary\","
                   "\"refused\":false,\"remaining\":1,\"reset\":0,\"reset_ms\":0,\"retry_after\":0,"
                   "\"retry_after_ms\":0,\"delay_ms\":250,\"banned_ms\":0,\"in_flight\":1,\"waiting\":3,\"limit\":2,"
                   "\"cost\":2}]}\n");
    EXPECT_TRUE(json_valid(out));
}

// A bandwidth rule's key: its connections, the bytes granted ahead of now
// at its rate, its next slice's wait beyond the burst; a rate from a
// variable has neither
TEST(Api, KeysBandwidth)
{
    rl_key_state_t st[2]{};
    st[0].rule = str("dl");
    st[0].tag = 1;
    st[0].bandwidth = 1;
    st[0].rate = 1048576;
    st[0].burst = 524288;  // half a second of the rate
    st[0].bw.held = 1;
    st[0].bw.connections = 3;
    st[0].bw.ahead_us = 1500000;  // 1.5 MB granted ahead: 1 s beyond the burst
    st[1].rule = str("plan");
    st[1].tag = 2;
    st[1].bandwidth = 1;
    st[1].bw.ahead_us = 0;
    const rl_key_snapshot_t k{str("z"), "k", 1, 0, 0, 2, st};
    const std::string out = render([&](char *b, size_t c) { return rl_render_api_keys(&k, b, c); });
    EXPECT_EQ(out, "{\"zone\":\"z\",\"key\":\"k\",\"rules\":["
                   "{\"rule\":\"dl\",\"fingerprint\":\"0000000000000001\",\"kind\":\"bandwidth\",\"state\":\"held\","
                   "\"rate\":1048576,\"burst\":524288,\"connections\":3,\"ahead_ms\":1500,"
                   "\"owed_bytes\":1572864,\"next_slice_ms\":1000},"
                   "{\"rule\":\"plan\",\"fingerprint\":\"0000000000000002\",\"kind\":\"bandwidth\",\"state\":\"none\","
                   "\"rate\":null,\"burst\":0,\"connections\":0,\"ahead_ms\":0,\"owed_bytes\":null,"
                   "\"next_slice_ms\":null}]}\n");
    EXPECT_TRUE(json_valid(out));
}

TEST(Api, KeysReset)
{
    Zone zone;
    rl_key_state_t st[2]{};
    st[0].rule = str("per_user");
    st[0].config = &zone.rules[0];
    st[0].tag = 1;
    st[0].reset = RL_RESET_HELD | RL_RESET_UNBANNED;
    st[1].rule = str("win");
    st[1].config = &zone.rules[3];
    st[1].tag = 2;
    st[1].reset = RL_RESET_FORGIVEN;
    const rl_key_snapshot_t k{str("api"), nullptr, 0, 0x0123456789abcdef, 1, 2, st};
    EXPECT_EQ(render([&](char *b, size_t c) { return rl_render_api_keys(&k, b, c); }),
              "{\"zone\":\"api\",\"fingerprint\":\"0123456789abcdef\",\"rules\":["
              "{\"rule\":\"per_user\",\"fingerprint\":\"0000000000000001\",\"held\":true,\"forgiven\":false,"
              "\"unbanned\":true},"
              "{\"rule\":\"win\",\"fingerprint\":\"0000000000000002\",\"held\":false,\"forgiven\":true,"
              "\"unbanned\":false}]}\n");
}

TEST(Api, Top)
{
    Stats s;
    s.keys[1].banned_ms = 1500;
    rl_top_view_t rules[2] = {s.tops[0], rl_top_view_t{str("per_ip"), 1, RL_TOP_NO_ROOM, 0, 0, nullptr}};
    rl_top_snapshot_t t{str("api"), 3 * 60000 + 59999, 0, 2, rules};
    const std::string out = render([&](char *b, size_t c) { return rl_render_api_top(&t, b, c); });
    EXPECT_EQ(out, "{\"zone\":\"api\",\"since_ms\":120000,\"rules\":{\"r1\":{\"state\":\"kept\",\"refusals\":8,"
                   "\"entries\":32,\"keys\":[{\"fingerprint\":\"0123456789abcdef\",\"key\":\"k\\\\x221\","
                   "\"refused\":5,\"error\":0},{\"fingerprint\":\"00000000000000ff\",\"refused\":2,\"error\":0,"
                   "\"banned_ms\":1500},{\"fingerprint\":\"0000000000000001\",\"key\":\"abc...\",\"refused\":1,"
                   "\"error\":0}]},\"per_ip\":{\"state\":\"no_room\",\"refusals\":0,\"entries\":32,\"keys\":[]}}}\n");
    EXPECT_TRUE(json_valid(out));

    t.server = 1;
    t.n = 0;
    EXPECT_EQ(render([&](char *b, size_t c) { return rl_render_api_top(&t, b, c); }),
              "{\"zone\":\"api\",\"since_ms\":120000,\"scope\":\"server\",\"rules\":{}}\n");
}

// A bandwidth rule's top keys count bytes: labelled "bytes", never
// "refusals" or "refused", in JSON and Prometheus.
TEST(Api, TopOfABandwidthRuleIsInBytes)
{
    rl_top_key_t key{};
    key.tag = 0xab;
    key.refused = 3;  // KiB
    key.error = 1;
    rl_top_view_t v{str("bw"), 0, RL_TOP_KEPT, 5, 1, &key, 1};
    rl_top_snapshot_t t{str("z"), 60000, 0, 1, &v};
    const std::string out = render([&](char *b, size_t c) { return rl_render_api_top(&t, b, c); });
    EXPECT_EQ(out, "{\"zone\":\"z\",\"since_ms\":0,\"rules\":{\"bw\":{\"state\":\"kept\",\"bytes\":5120,"
                   "\"entries\":32,\"keys\":[{\"fingerprint\":\"00000000000000ab\",\"bytes\":3072,"
                   "\"error\":1024}]}}}\n");
    EXPECT_TRUE(json_valid(out));
}

// Every byte a key can hold, in a key asked about and in the top keys: the
// answer is valid JSON, the key shown as log lines show it.
TEST(Api, HostileKeysStayValidJson)
{
    Zone zone;
    std::string key;
    for (int b = 0; b < 256; b++) {
        key.push_back((char) b);
    }
    rl_key_state_t st{};
    st.rule = str("per_user");
    st.config = &zone.rules[0];
    const rl_key_snapshot_t k{str("api"), key.data(), key.size(), 0, 0, 1, &st};
    const std::string out = render([&](char *b, size_t c) { return rl_render_api_keys(&k, b, c); });
    EXPECT_TRUE(json_valid(out));
    char shown[rl::kShownBytes];
    const size_t n = rl::shown(shown, key.data(), key.size(), false);
    std::string decoded;
    const size_t at = out.find("\"key\":") + 6;
    ASSERT_TRUE(json_string(out.substr(at, out.find("\",\"rules\"") + 1 - at), &decoded));
    EXPECT_EQ(decoded, std::string(shown, n));
    EXPECT_EQ(decoded.substr(decoded.size() - 3), "...");

    rl_top_key_t top{};
    for (int b = 0; b < 256; b += RL_TOP_KEY_MAX) {
        for (int i = 0; i < RL_TOP_KEY_MAX; i++) {
            top.key[i] = (uint8_t) (b + i);
        }
        top.key_len = RL_TOP_KEY_MAX;
        top.key_cut = 1;
        const rl_top_view_t v{str("r"), 1, RL_TOP_KEPT, 1, 1, &top};
        const rl_top_snapshot_t t{str("api"), 0, 0, 1, &v};
        EXPECT_TRUE(json_valid(render([&](char *b2, size_t c) { return rl_render_api_top(&t, b2, c); })));
    }
}

}  // namespace
