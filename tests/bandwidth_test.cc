// Bandwidth (ratelimit_bandwidth.h): the rule's parameters, the grant of a
// slice on a fake clock, and a key's entry in a zone's table.
#include <map>
#include <queue>
#include <string>
#include <vector>

#include "helpers.h"
#include "ratelimit_bandwidth.h"

namespace {

constexpr uint64_t kMB = 1024 * 1024;
constexpr int64_t kSec = 1000000;  // microseconds
const uint8_t kSecret[16] = {9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

int param(rl_bandwidth_rule_t *r, const std::string &p, std::string *why = nullptr)
{
    char err[RL_ERR_MAX] = "";
    const int rc = rl_bandwidth_param(r, p.data(), p.size(), err, sizeof(err));
    if (why != nullptr) {
        *why = err;
    }
    return rc;
}

TEST(Bandwidth, SizesInNginxUnits)
{
    uint64_t v = 0;
    ASSERT_EQ(rl_bandwidth_size("1m", 2, &v), RL_OK);
    EXPECT_EQ(v, kMB);
    ASSERT_EQ(rl_bandwidth_size("512K", 4, &v), RL_OK);
    EXPECT_EQ(v, 512u * 1024);
    ASSERT_EQ(rl_bandwidth_size("100g", 4, &v), RL_OK);
    EXPECT_EQ(v, RL_BANDWIDTH_MAX);
    ASSERT_EQ(rl_bandwidth_size("1000", 4, &v), RL_OK);
    EXPECT_EQ(v, 1000u);
    for (const char *bad : {"", "0", "0m", "m", "1x", "-1", "101g", "1.5m", "99999999999999999999999"}) {
        EXPECT_EQ(rl_bandwidth_size(bad, std::strlen(bad), &v), RL_ERROR) << bad;
    }
}

TEST(Bandwidth, ParametersAndTheirErrors)
{
    rl_bandwidth_rule_t r;
    rl_bandwidth_init(&r);
    EXPECT_STREQ(r.name, "bandwidth");
    std::string why;
    char err[RL_ERR_MAX];
    EXPECT_EQ(rl_bandwidth_finish(&r, err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("rate= is missing"), std::string::npos);

    ASSERT_EQ(param(&r, "rate=1m"), RL_OK);
    EXPECT_EQ(r.rate, kMB);
    EXPECT_EQ(param(&r, "rate=2m", &why), RL_ERROR);
    EXPECT_NE(why.find("duplicate parameter \"rate=2m\""), std::string::npos) << why;
    ASSERT_EQ(param(&r, "burst=4m"), RL_OK);
    EXPECT_EQ(r.burst, 4 * kMB);
    ASSERT_EQ(param(&r, "name=per_ip"), RL_OK);
    EXPECT_STREQ(r.name, "per_ip");
    ASSERT_EQ(param(&r, "direction=in"), RL_OK);
    EXPECT_EQ(r.direction, (uint32_t) RL_BANDWIDTH_IN);
    EXPECT_EQ(rl_bandwidth_finish(&r, err, sizeof(err)), RL_OK);

    rl_bandwidth_rule_t v;
    rl_bandwidth_init(&v);
    ASSERT_EQ(param(&v, "rate=$plan_rate"), RL_OK);
    EXPECT_EQ(v.rate_varies, 1u);
    EXPECT_EQ(v.rate, 0u);
    EXPECT_EQ(param(&v, "burst=0"), RL_OK);

    rl_bandwidth_rule_t b;
    rl_bandwidth_init(&b);
    EXPECT_EQ(param(&b, "rate=0", &why), RL_ERROR);
    EXPECT_NE(why.find("invalid rate \"0\": expected bytes a second"), std::string::npos) << why;
    EXPECT_EQ(param(&b, "rate=$", &why), RL_ERROR);
    EXPECT_EQ(param(&b, "burst=-1", &why), RL_ERROR);
    EXPECT_NE(why.find("invalid burst"), std::string::npos) << why;
    EXPECT_EQ(param(&b, "direction=up", &why), RL_ERROR);
    EXPECT_NE(why.find("expected \"out\""), std::string::npos) << why;
    EXPECT_EQ(param(&b, "name=a b", &why), RL_ERROR);
    EXPECT_EQ(param(&b, "limit=5", &why), RL_ERROR);
    EXPECT_NE(why.find("unknown parameter \"limit=5\""), std::string::npos) << why;
}

TEST(Bandwidth, SliceIsATenthOfASecondWithinBounds)
{
    EXPECT_EQ(rl_bandwidth_slice(kMB), kMB / 10);
    EXPECT_EQ(rl_bandwidth_slice(1000), (uint64_t) RL_BANDWIDTH_SLICE_MIN);
    EXPECT_EQ(rl_bandwidth_slice(RL_BANDWIDTH_MAX), (uint64_t) RL_BANDWIDTH_SLICE_MAX);
    EXPECT_EQ(rl_bandwidth_slice(100 * kMB), 10 * kMB);
}

// What a flow asks for: what it holds, within a hundredth of a second of
// the rate and a slice (1 MB/s: 10485 to 104857 bytes); a datagram whole.
TEST(Bandwidth, AskIsWhatIsHeldWithinBounds)
{
    EXPECT_EQ(rl_bandwidth_ask(kMB, 16384, 0, 0), 16384u);
    EXPECT_EQ(rl_bandwidth_ask(kMB, 99, 0, 0), kMB / 100);
    EXPECT_EQ(rl_bandwidth_ask(kMB, 10 * kMB, 0, 0), kMB / 10);
    EXPECT_EQ(rl_bandwidth_ask(kMB, 50000, 20000, 0), 30000u);
    // 100 GB/s: a proxy's 16 KB buffer asks for a slice's tenth, 6.4 MB,
    // not one 16 KB grant a millisecond
    EXPECT_EQ(rl_bandwidth_ask(RL_BANDWIDTH_MAX, 16384, 0, 0), (uint64_t) RL_BANDWIDTH_SLICE_MAX / 10);
    // a datagram: at least itself, beyond a slice if it is larger
    EXPECT_EQ(rl_bandwidth_ask(1000, 1003, 0, 1), 1003u);
    EXPECT_EQ(rl_bandwidth_ask(1000, 1003, 1000, 1), (uint64_t) RL_BANDWIDTH_SLICE_MIN / 10);
    EXPECT_EQ(rl_bandwidth_ask(kMB, 65000, 0, 1), 65000u);
}

// The grant's boundaries: an idle key sends burst + one slice at once; the
// next slice waits exactly until the key is back within burst.
TEST(Bandwidth, GrantBoundaries)
{
    const int64_t now = 1000 * kSec;
    const uint64_t rate = 1000000;  // a byte a microsecond
    // idle, no burst: the first slice at once, the second after it
    rl_bandwidth_grant_t g = rl_bandwidth_grant(0, now, 100000, rate, 0);
    EXPECT_EQ(g.wait_us, 0);
    EXPECT_EQ(g.tat_us, now + 100000);
    g = rl_bandwidth_grant(g.tat_us, now, 100000, rate, 0);
    EXPECT_EQ(g.wait_us, 100000);
    EXPECT_EQ(g.tat_us, now + 200000);

    // burst 300000: three slices of 100000 at once, and a fourth; the
    // fifth waits 100000 - exactly one slice
    int64_t tat = 0;
    for (int i = 0; i < 4; i++) {
        g = rl_bandwidth_grant(tat, now, 100000, rate, 300000);
        EXPECT_EQ(g.wait_us, 0) << i;
        tat = g.tat_us;
    }
    g = rl_bandwidth_grant(tat, now, 100000, rate, 300000);
    EXPECT_EQ(g.wait_us, 100000);
    // one microsecond later, one less
    g = rl_bandwidth_grant(tat, now + 1, 100000, rate, 300000);
    EXPECT_EQ(g.wait_us, 99999);
    // a slice's cost is rounded up: 3 bytes at 2 bytes a second is 1.5 s
    g = rl_bandwidth_grant(0, now, 3, 2, 0);
    EXPECT_EQ(g.tat_us, now + 1500000);
    g = rl_bandwidth_grant(0, now, 1, 3, 0);
    EXPECT_EQ(g.tat_us, now + 333334);
}

TEST(Bandwidth, GiveBackIsBounded)
{
    const int64_t now = 1000 * kSec;
    EXPECT_EQ(rl_bandwidth_give_back(now + 500000, now, 100000, 1000000), now + 400000);
    // never before now
    EXPECT_EQ(rl_bandwidth_give_back(now + 50000, now, 100000, 1000000), now);
    // an idle key stays as it is
    EXPECT_EQ(rl_bandwidth_give_back(now - 7, now, 100000, 1000000), now - 7);
}

// n connections of one key on a fake clock, each asking its next slice as
// soon as the last one is sent (reading as fast as it can): what each
// sends by the end.
struct Sim {
    uint64_t rate, burst, slice;
    int64_t tat = 0;
    int64_t now = 0;
    // a connection's next send: when, which
    std::priority_queue<std::pair<int64_t, int>, std::vector<std::pair<int64_t, int>>, std::greater<>> due;
    std::map<int, uint64_t> sent;
    std::map<int, int64_t> ends;  // a connection that ends at that time

    Sim(uint64_t r, uint64_t b) : rate(r), burst(b), slice(rl_bandwidth_slice(r)) {}

    void start(int c, int64_t at) { due.push({at, c}); }
    // runs until `until`; bytes sent in [from, until) counted per connection
    std::map<int, uint64_t> run(int64_t from, int64_t until)
    {
        std::map<int, uint64_t> in;
        while (!due.empty() && due.top().first < until) {
            const auto [at, c] = due.top();
            due.pop();
            now = at;
            if (ends.count(c) && ends[c] <= now) {
                continue;
            }
            const rl_bandwidth_grant_t g = rl_bandwidth_grant(tat, now, slice, rate, burst);
            tat = g.tat_us;
            const int64_t send_at = now + g.wait_us;
            if (send_at >= from && send_at < until) {
                in[c] += slice;
            }
            sent[c] += slice;
            due.push({send_at, c});
        }
        return in;
    }
};

TEST(Bandwidth, OneConnectionGetsTheRateAfterTheBurst)
{
    Sim s(kMB, 4 * kMB);
    s.start(0, 0);
    auto first = s.run(0, 1);  // the burst and a slice, at once, to a slice
    EXPECT_GT(first[0], 4 * kMB);
    EXPECT_LE(first[0], 4 * kMB + s.slice);
    auto steady = s.run(kSec, 11 * kSec);
    EXPECT_NEAR((double) steady[0] / 10, (double) kMB, kMB * 0.01);
}

TEST(Bandwidth, ConnectionsShareTheRateEvenly)
{
    for (int n : {2, 3, 8, 16}) {
        Sim s(kMB, 0);
        for (int c = 0; c < n; c++) {
            s.start(c, c);
        }
        auto got = s.run(kSec, 11 * kSec);
        uint64_t total = 0;
        for (int c = 0; c < n; c++) {
            total += got[c];
            // each within one slice of rate / n over ten seconds
            EXPECT_NEAR((double) got[c], 10.0 * kMB / n, (double) s.slice) << n << " connections, #" << c;
        }
        EXPECT_NEAR((double) total / 10, (double) kMB, kMB * 0.02) << n;
    }
}

TEST(Bandwidth, AConnectionEndingGivesItsShareBackWithinASlice)
{
    Sim s(kMB, 0);
    for (int c = 0; c < 4; c++) {
        s.start(c, c);
    }
    s.run(0, 2 * kSec);
    s.ends[0] = 2 * kSec;
    s.ends[1] = 2 * kSec;
    // the two left share the whole rate from one slice after the end on
    const int64_t from = 2 * kSec + 4 * (int64_t) (s.slice * kSec / kMB);
    auto got = s.run(from, from + 2 * kSec);
    EXPECT_EQ(got[0] + got[1], 0u);
    EXPECT_NEAR((double) (got[2] + got[3]) / 2, (double) kMB, kMB * 0.06);
    EXPECT_NEAR((double) got[2], (double) got[3], (double) s.slice);
}

// The key's entry in the zone: connections counted, slices granted in
// turn across "workers" (calls on the same table), given back at the end.
TEST(Bandwidth, KeyInTheTable)
{
    TestZone zone(64 * 1024, kSecret);
    char name[] = "dl";
    const int slot = rl_table_rule_slot(zone.mem, name);
    ASSERT_GE(slot, 0);
    const uint64_t id = rl_bandwidth_identity("dl", "$binary_remote_addr", 19);
    EXPECT_NE(id, rl_bandwidth_identity("dl", "$http_x_key", 11));
    EXPECT_NE(id, rl_bandwidth_identity("other", "$binary_remote_addr", 19));
    const uint64_t tag = rl_table_tag(zone.mem, id, "\x7f\0\0\x01", 4);
    const int64_t now = 1700000000 * kSec + 123456;

    rl_bandwidth_peek_t p;
    rl_bandwidth_peek(zone.mem, tag, now, &p);
    EXPECT_EQ(p.held, 0);

    rl_bandwidth_open(zone.mem, slot, tag, now);
    rl_bandwidth_open(zone.mem, slot, tag, now);
    rl_bandwidth_peek(zone.mem, tag, now, &p);
    EXPECT_EQ(p.held, 1);
    EXPECT_EQ(p.connections, 2u);
    EXPECT_EQ(p.ahead_us, 0);

    // 1 MB/s, no burst: the first slice now, the second 100 ms later to
    // the microsecond (the entry keeps microseconds)
    EXPECT_EQ(rl_bandwidth_take(zone.mem, slot, tag, now, 100000, 1000000, 0), 0);
    EXPECT_EQ(rl_bandwidth_take(zone.mem, slot, tag, now + 1, 100000, 1000000, 0), 99999);
    rl_bandwidth_count_delayed(zone.mem, slot, 1);
    rl_bandwidth_peek(zone.mem, tag, now + 1, &p);
    EXPECT_EQ(p.ahead_us, 199999);

    rl_rule_stats_t st[4];
    ASSERT_EQ(rl_table_rule_stats(zone.mem, st, 4), 1u);
    EXPECT_EQ(st[0].bytes, 200000u);
    EXPECT_EQ(st[0].connections, 2u);
    EXPECT_EQ(st[0].delayed_now, 1u);
    // bytes a second: the last whole second's
    rl_bandwidth_rates(st, 1, now / 1000);
    EXPECT_EQ(st[0].bytes_per_second, 0u);
    rl_bandwidth_rates(st, 1, now / 1000 + 1000);
    EXPECT_EQ(st[0].bytes_per_second, 200000u);
    rl_bandwidth_rates(st, 1, now / 1000 + 2000);
    EXPECT_EQ(st[0].bytes_per_second, 0u);

    // a connection ends with 60000 bytes of its slice unsent: given back
    rl_bandwidth_count_delayed(zone.mem, slot, -1);
    rl_bandwidth_close(zone.mem, slot, tag, now + 1, 60000, 1000000);
    rl_bandwidth_peek(zone.mem, tag, now + 1, &p);
    EXPECT_EQ(p.connections, 1u);
    EXPECT_EQ(p.ahead_us, 139999);
    rl_bandwidth_close(zone.mem, slot, tag, now + 1, 0, 1000000);
    rl_bandwidth_peek(zone.mem, tag, now + 1, &p);
    EXPECT_EQ(p.connections, 0u);
    ASSERT_EQ(rl_table_rule_stats(zone.mem, st, 4), 1u);
    EXPECT_EQ(st[0].connections, 0u);
    EXPECT_EQ(st[0].delayed_now, 0u);
    EXPECT_TABLE_VALID(zone.table());
}

// The wall clock stepped back an hour: the key's TAT, an hour ahead of the
// clock now, is read as its connections' slices ahead at most (1 MB/s, no
// burst, one connection: two slices of 100 ms), not an hour's stall.
TEST(Bandwidth, AClockSteppedBackStallsAKeyForItsSlicesOnly)
{
    TestZone zone(64 * 1024, kSecret);
    char name[] = "dl";
    const int slot = rl_table_rule_slot(zone.mem, name);
    const uint64_t tag = rl_table_tag(zone.mem, rl_bandwidth_identity("dl", "k", 1), "a", 1);
    const int64_t now = 1700000000 * kSec;
    const int64_t hour = 3600 * kSec;

    rl_bandwidth_open(zone.mem, slot, tag, now + hour);
    EXPECT_EQ(rl_bandwidth_take(zone.mem, slot, tag, now + hour, 100000, 1000000, 0), 0);
    EXPECT_EQ(rl_bandwidth_take(zone.mem, slot, tag, now + hour, 100000, 1000000, 0), 100000);
    // back an hour: the next slice waits 200 ms (the reach), and the key's
    // slices follow at the rate from there: a TAT within reach is kept
    EXPECT_EQ(rl_bandwidth_take(zone.mem, slot, tag, now, 100000, 1000000, 0), 200000);
    EXPECT_EQ(rl_bandwidth_take(zone.mem, slot, tag, now + 200000, 100000, 1000000, 0), 100000);
    EXPECT_EQ(rl_bandwidth_take(zone.mem, slot, tag, now + 200000, 100000, 1000000, 0), 200000);
}

// The rule's top keys rank by the bytes granted (KiB, a grant rounded up),
// not by grants: a key of one large slice above a key of three small ones.
TEST(Bandwidth, TopKeysByBytes)
{
    TestZone zone(64 * 1024, kSecret);
    char name[] = "dl";
    const int slot = rl_table_rule_slot(zone.mem, name);
    ASSERT_GE(slot, 0);
    const uint64_t id = rl_bandwidth_identity("dl", "$k", 2);
    const uint64_t big = rl_table_tag(zone.mem, id, "big", 3);
    const uint64_t small = rl_table_tag(zone.mem, id, "small", 5);
    const int64_t now = 1700000000 * kSec;
    rl_bandwidth_take(zone.mem, slot, big, now, 100 * 1024, kMB, kMB);
    for (int i = 0; i < 3; i++) {
        rl_bandwidth_take(zone.mem, slot, small, now, 4 * 1024 + 1, kMB, kMB);
    }
    rl_top_t top;
    rl_table_top(zone.mem, slot, now / 1000, &top);
    ASSERT_EQ(top.state, RL_TOP_KEPT);
    EXPECT_EQ(top.kib, 1);
    ASSERT_EQ(top.n, 2u);
    EXPECT_EQ(top.top[0].tag, big);
    EXPECT_EQ(top.top[0].refused, 100u);
    EXPECT_EQ(top.top[1].tag, small);
    EXPECT_EQ(top.top[1].refused, 15u);  // 3 x 5 KiB: 4 KiB and a byte each
    EXPECT_EQ(top.refusals, 115u);
    EXPECT_TABLE_VALID(zone.table());
}

TEST(Bandwidth, AfterAndBoth)
{
    rl_bandwidth_rule_t r;
    rl_bandwidth_init(&r);
    std::string why;
    ASSERT_EQ(param(&r, "after=10m"), RL_OK);
    EXPECT_EQ(r.after, 10 * kMB);
    EXPECT_EQ(param(&r, "after=1m", &why), RL_ERROR);
    EXPECT_NE(why.find("duplicate parameter \"after=1m\""), std::string::npos) << why;
    ASSERT_EQ(param(&r, "direction=both"), RL_OK);
    EXPECT_EQ(r.direction, (uint32_t) RL_BANDWIDTH_BOTH);
    rl_bandwidth_rule_t b;
    rl_bandwidth_init(&b);
    EXPECT_EQ(param(&b, "after=0"), RL_OK);
    EXPECT_EQ(b.after, 0u);
    rl_bandwidth_rule_t c;
    rl_bandwidth_init(&c);
    EXPECT_EQ(param(&c, "after=-1", &why), RL_ERROR);
    EXPECT_NE(why.find("invalid after \"-1\""), std::string::npos) << why;
}

}  // namespace
