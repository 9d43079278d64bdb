// Overrides (ratelimit_override.h): a key's limits changed at run time with
// what it spent carried over exactly, for every algorithm that takes a
// limit; deny and allow; expiry carried back as at its instant; address
// ranges, the longest prefix winning; the store's bounds; the file's lines
// and the API's bodies read, and refused with a reason.
#include <arpa/inet.h>

#include <algorithm>

#include "helpers.h"
#include "overrides/store.h"
#include "redis_server.h"

namespace {

constexpr size_t kTable = 256 * 1024;
constexpr uint32_t kCapacity = 16;
constexpr int64_t kHour = 3600000;

// A zone's table with a store of overrides after it, in one block.
struct OverrideZone {
    void *mem;
    std::vector<rl_rule_room_t> rooms;
    explicit OverrideZone(const std::vector<rl_rule_t> &rules = {}, uint32_t capacity = kCapacity)
    {
        const size_t total = kTable + rl_overrides_size(capacity);
        mem = std::aligned_alloc(64, (total + 63) & ~size_t{63});
        std::memset(mem, 0, total);
        char err[RL_ERR_MAX];
        const std::vector<uint32_t> blocks = block_sizes(rules);
        EXPECT_EQ(rl_table_init(mem, kTable, blocks.data(), blocks.size(), nullptr, err, sizeof(err)), RL_OK) << err;
        EXPECT_EQ(rl_overrides_attach(mem, static_cast<char *>(mem) + kTable, capacity), 0);
        rooms.reserve(64);
    }
    ~OverrideZone() { std::free(mem); }
    OverrideZone(const OverrideZone &) = delete;
    OverrideZone &operator=(const OverrideZone &) = delete;
};

rl_rule_room_t *room_of(rl_request_t *rq);

// One request of one rule's key through rl_decide, as nginx sends it, with
// room for a rule an override changes.
struct Req {
    OverrideZone &z;
    const rl_rule_t &rule;
    std::string key;
    rl_check_t c{};
    rl_request_t rq{};

    Req(OverrideZone &zone, const rl_rule_t &r, std::string k) : z(zone), rule(r), key(std::move(k)) {}

    int decide(int64_t now, uint64_t cost = 1)
    {
        c = check_of(z.mem, &rule, identity_of(rule), key, cost);
        rq = request_of(&c, 1);
        rq.more_room = room_of;
        rl_request_hash(&rq);
        return rl_decide(&rq, now);
    }
    bool admitted(int64_t now) { return decide(now) != RL_VERDICT_REJECTED; }
};

OverrideZone *current;

rl_rule_room_t *room_of(rl_request_t *)
{
    current->rooms.emplace_back();
    return &current->rooms.back();
}

rl_override_t limit_override(const std::string &key, const rl_rule_t &rule, uint32_t limit, int64_t period = 0,
                             int64_t expires = 0)
{
    rl_override_t ov{};
    char err[RL_ERR_MAX];
    EXPECT_EQ(rl_override_target(&ov.target, rule.name, std::strlen(rule.name), key.data(), key.size(), nullptr, 0, err,
                                 sizeof(err)),
              RL_OK)
        << err;
    ov.kind = RL_OVERRIDE_LIMIT;
    ov.given = RL_OVERRIDE_GIVE_LIMIT | (period ? RL_OVERRIDE_GIVE_PERIOD : 0);
    ov.limit = limit;
    ov.period_ms = period;
    ov.expires_ms = expires;
    EXPECT_EQ(rl_override_check(&ov, &rule, 0, err, sizeof(err)), RL_OK) << err;
    return ov;
}

int admitted_in_a_row(Req &r, int64_t now, int most)
{
    int n = 0;
    while (n < most && r.admitted(now)) {
        n++;
    }
    return n;
}

class Carry : public ::testing::TestWithParam<const char *> {};

// Spent 8 of 10, raised to 20: 12 more (its 9th to 20th requests),
// the 21st refused; another key cut to 5 is refused while it owes 5 or
// more, then back to 10 admits exactly its 2 left.
TEST_P(Carry, RaisedAndCutOweTheSameUnits)
{
    const rl_rule_t rule = var_rule_of(GetParam());
    OverrideZone z({rule});
    current = &z;
    rl_override_rule_t r{&rule, identity_of(rule)};
    const int64_t now = kT0 + 1000;

    Req a(z, rule, "a");
    EXPECT_EQ(admitted_in_a_row(a, now, 8), 8);
    rl_override_t up = limit_override("a", rule, 20);
    ASSERT_EQ(rl_override_put(z.mem, &up, &r, now), RL_OVERRIDE_OK);
    EXPECT_EQ(admitted_in_a_row(a, now, 30), 12);
    EXPECT_EQ(a.c.rule->limit, 20u) << "the check decides under the override's limit";
    EXPECT_EQ(a.c.configured, &rule);
    EXPECT_EQ(a.c.override & 0xf, (uint32_t) RL_OVERRIDE_LIMIT);

    Req b(z, rule, "b");
    EXPECT_EQ(admitted_in_a_row(b, now, 8), 8);
    rl_override_t down = limit_override("b", rule, 5);
    ASSERT_EQ(rl_override_put(z.mem, &down, &r, now), RL_OVERRIDE_OK);
    EXPECT_FALSE(b.admitted(now)) << "owes 8 of 5";
    ASSERT_EQ(rl_override_delete(z.mem, &down.target, &r, now), RL_OVERRIDE_OK);
    EXPECT_EQ(admitted_in_a_row(b, now, 10), 2) << "back at 10, 8 owed";
    EXPECT_EQ(b.c.override, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    EveryLimit, Carry,
    ::testing::Values("algorithm=gcra limit=10 period=1h", "algorithm=token_bucket limit=10 period=1h",
                      "algorithm=fixed_window limit=10 period=1h", "algorithm=sliding_window limit=10 period=1h",
                      "algorithm=sliding_log limit=$v limit_default=10 limit_max=100 period=1h",
                      "algorithm=quota limit=10 reset=daily", "algorithm=gcra limit=$v limit_default=10 period=1h"),
    RuleName());

// A paced key cut to 5 an hour with 8 owed is admitted again once it owes
// 4: 4 units at 720 s, to the millisecond.
TEST(Carry, PacedRetryAfterAtTheNewPace)
{
    const rl_rule_t rule = rule_of("limit=10 period=1h");
    OverrideZone z({rule});
    current = &z;
    rl_override_rule_t r{&rule, identity_of(rule)};
    Req k(z, rule, "k");
    EXPECT_EQ(admitted_in_a_row(k, kT0, 8), 8);
    rl_override_t down = limit_override("k", rule, 5);
    ASSERT_EQ(rl_override_put(z.mem, &down, &r, kT0), RL_OVERRIDE_OK);
    EXPECT_EQ(k.decide(kT0), RL_VERDICT_REJECTED);
    EXPECT_EQ(k.c.decision.retry_after_ms, 4 * kHour / 5);
    EXPECT_FALSE(k.admitted(kT0 + 4 * kHour / 5 - 1));
    EXPECT_TRUE(k.admitted(kT0 + 4 * kHour / 5));
}

// A period override scales what a paced key owes: 10 an hour is 1 unit a
// 6 min; 10 in 2 h, 1 a 12 min.
TEST(Carry, PeriodScalesThePace)
{
    const rl_rule_t rule = rule_of("limit=10 period=1h");
    OverrideZone z({rule});
    current = &z;
    rl_override_rule_t r{&rule, identity_of(rule)};
    Req k(z, rule, "k");
    EXPECT_EQ(admitted_in_a_row(k, kT0, 10), 10);
    rl_override_t slow = limit_override("k", rule, 10, 2 * kHour);
    ASSERT_EQ(rl_override_put(z.mem, &slow, &r, kT0), RL_OVERRIDE_OK);
    EXPECT_EQ(k.decide(kT0), RL_VERDICT_REJECTED);
    EXPECT_EQ(k.c.decision.retry_after_ms, 2 * kHour / 10);
}

// An expired limit override stops applying at its instant, and the key
// owes under the rule what it owed under the override then: 5 of 5 an
// hour at the expiry, under 2 an hour one more once it owes 1.
TEST(Carry, ExpiryCarriesBackAsAtItsInstant)
{
    const rl_rule_t rule = rule_of("limit=2 period=1h");
    OverrideZone z({rule});
    current = &z;
    rl_override_rule_t r{&rule, identity_of(rule)};
    Req k(z, rule, "k");
    const int64_t expiry = kT0 + 60000;
    rl_override_t up = limit_override("k", rule, 5, 0, expiry);
    ASSERT_EQ(rl_override_put(z.mem, &up, &r, kT0), RL_OVERRIDE_OK);
    EXPECT_EQ(admitted_in_a_row(k, kT0, 10), 5);
    // at the expiry it owes 5 - 60 s x 5/h = 4.9166 units (3540 s at 5/h)
    const int64_t later = expiry + 1000;
    EXPECT_EQ(k.decide(later), RL_VERDICT_REJECTED);
    EXPECT_EQ(k.c.override, 0u) << "expired: no override applies";
    // owes 4.9166 units of 2/h at the expiry: 1 unit left at 3.9166 x 1800 s
    const int64_t owed_at_expiry_ms = 5 * kHour / 5 - 60000;  // in the override's time: 3540 s at 5/h
    const int64_t units_ms_at_2 = owed_at_expiry_ms * 5 / 2;  // the same units at 2/h: 8850 s
    EXPECT_EQ(k.c.decision.retry_after_ms, expiry + units_ms_at_2 - kHour / 2 - later);
    rl_override_t got;
    EXPECT_EQ(rl_override_get(z.mem, &up.target, later, &got), 0) << "removed";
    rl_overrides_stats_t st;
    rl_overrides_stats(rl_overrides_of(z.mem), &st);
    EXPECT_EQ(st.held, 0u);
}

// A context reused by the next request gives the core its room as the last
// request left it: the rule it holds serves again only while the override,
// the configured rule and the zone's overrides are unchanged.
TEST(Overrides, ARoomReusedServesOnlyTheRuleItWasMadeFor)
{
    const rl_rule_t rule = rule_of("limit=2 period=1h");
    const rl_rule_t other = rule_of("limit=3 period=1h name=other");
    OverrideZone z({rule, other});
    current = &z;
    rl_override_rule_t rules[] = {{&rule, identity_of(rule)}, {&other, identity_of(other)}};
    rl_rule_room_t room{};
    auto decide = [&](const rl_rule_t &r, const std::string &key) {
        rl_check_t c = check_of(z.mem, &r, identity_of(r), key, 1);
        rl_request_t rq = request_of(&c, 1);
        rq.room = &room;
        rl_request_hash(&rq);
        rl_decide(&rq, kT0);
        EXPECT_EQ(rq.room, nullptr) << "taken";
        return c;
    };
    rl_override_t five = limit_override("k", rule, 5);
    ASSERT_EQ(rl_override_put(z.mem, &five, &rules[0], kT0), RL_OVERRIDE_OK);
    rl_check_t c = decide(rule, "k");
    EXPECT_EQ(c.rule, &room.rule);
    EXPECT_EQ(room.rule.limit, 5u);
    EXPECT_EQ(c.decision.remaining, 4u);
    // the same override again: the room as it is
    room.rule.cost = 77;  // a mark a remade rule would not keep
    c = decide(rule, "k");
    EXPECT_EQ(room.rule.cost, 77u);
    EXPECT_EQ(c.decision.remaining, 3u);
    room.rule.cost = rule.cost;
    // the override changed: made again
    rl_override_t nine = limit_override("k", rule, 9);
    ASSERT_EQ(rl_override_put(z.mem, &nine, &rules[0], kT0), RL_OVERRIDE_OK);
    c = decide(rule, "k");
    EXPECT_EQ(room.rule.limit, 9u);
    EXPECT_EQ(c.decision.remaining, 6u);
    // another rule's override in the same room: made for it
    rl_override_t seven = limit_override("k", other, 7);
    ASSERT_EQ(rl_override_put(z.mem, &seven, &rules[1], kT0), RL_OVERRIDE_OK);
    c = decide(other, "k");
    EXPECT_EQ(room.configured, &other);
    EXPECT_EQ(room.rule.limit, 7u);
    EXPECT_EQ(c.decision.remaining, 6u);
}

TEST(Overrides, DenyRefusesUntilItsExpiryAndSpendsNothing)
{
    const rl_rule_t rule = rule_of("limit=3 period=1h");
    OverrideZone z({rule});
    current = &z;
    Req k(z, rule, "k");
    rl_override_t deny{};
    char err[RL_ERR_MAX];
    ASSERT_EQ(rl_override_target(&deny.target, nullptr, 0, "k", 1, nullptr, 0, err, sizeof(err)), RL_OK);
    deny.kind = RL_OVERRIDE_DENY;
    deny.expires_ms = kT0 + 5000;
    ASSERT_EQ(rl_override_check(&deny, nullptr, 0, err, sizeof(err)), RL_OK) << err;
    ASSERT_EQ(rl_override_put(z.mem, &deny, nullptr, kT0), RL_OVERRIDE_OK);
    for (int i = 0; i < 5; i++) {
        EXPECT_EQ(k.decide(kT0 + i), RL_VERDICT_REJECTED);
        EXPECT_EQ(k.c.decision.retry_after_ms, 5000 - i);
        EXPECT_EQ(k.c.override, (uint32_t) (RL_OVERRIDE_DENY | RL_OVERRIDE_EVERY_RULE));
    }
    EXPECT_EQ(admitted_in_a_row(k, kT0 + 5000, 10), 3) << "expired, nothing spent meanwhile";

    deny.expires_ms = 0;
    Req f(z, rule, "forever");
    ASSERT_EQ(rl_override_target(&deny.target, nullptr, 0, "forever", 7, nullptr, 0, err, sizeof(err)), RL_OK);
    ASSERT_EQ(rl_override_put(z.mem, &deny, nullptr, kT0), RL_OVERRIDE_OK);
    EXPECT_EQ(f.decide(kT0), RL_VERDICT_REJECTED);
    EXPECT_EQ(rl_retry_after_seconds(&f.c.decision), 0u) << "no time to wait for";
}

TEST(Overrides, AllowExemptsAndDecidedAgainRestoresTheKey)
{
    const rl_rule_t rule = rule_of("limit=1 period=1h");
    OverrideZone z({rule});
    current = &z;
    rl_override_rule_t r{&rule, identity_of(rule)};
    Req k(z, rule, "k");
    rl_override_t allow{};
    char err[RL_ERR_MAX];
    ASSERT_EQ(
        rl_override_target(&allow.target, rule.name, std::strlen(rule.name), "k", 1, nullptr, 0, err, sizeof(err)),
        RL_OK);
    allow.kind = RL_OVERRIDE_ALLOW;
    ASSERT_EQ(rl_override_put(z.mem, &allow, &r, kT0), RL_OVERRIDE_OK);
    for (int i = 0; i < 5; i++) {
        EXPECT_EQ(k.decide(kT0), RL_VERDICT_EXEMPT);
    }
    EXPECT_EQ(k.c.key_len, 0u);
    EXPECT_EQ(k.c.key_held, 1u);
    // the same check decided again once the override is gone
    ASSERT_EQ(rl_override_delete(z.mem, &allow.target, &r, kT0), RL_OVERRIDE_OK);
    rl_request_t again = k.rq;
    EXPECT_EQ(rl_decide(&again, kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(k.c.key_len, 1u);
}

// ---- ranges ----

rl_override_t range_override(const char *cidr, const rl_rule_t *rule, int kind)
{
    rl_override_t ov{};
    char err[RL_ERR_MAX];
    EXPECT_EQ(rl_override_target(&ov.target, rule ? rule->name : nullptr, rule ? std::strlen(rule->name) : 0, nullptr,
                                 0, cidr, std::strlen(cidr), err, sizeof(err)),
              RL_OK)
        << cidr << ": " << err;
    ov.kind = kind;
    EXPECT_EQ(rl_override_check(&ov, rule, 0, err, sizeof(err)), RL_OK) << err;
    return ov;
}

std::string binary(const char *text)
{
    uint8_t a[16];
    if (inet_pton(AF_INET, text, a) == 1) {
        return std::string(reinterpret_cast<char *>(a), 4);
    }
    EXPECT_EQ(inet_pton(AF_INET6, text, a), 1);
    return std::string(reinterpret_cast<char *>(a), 16);
}

// $ratelimit_override names the binding rule's override, else the first
// rule's that met one, else none.
TEST(Overrides, TheOneReportedIsTheBindingRulesElseTheFirst)
{
    rl_check_t checks[3]{};
    rl_request_t rq{};
    rq.checks = checks;
    rq.n = 3;
    rq.binding = 2;
    EXPECT_EQ(rl_request_override_check(&rq), 3u);
    checks[1].override = RL_OVERRIDE_LIMIT;
    EXPECT_EQ(rl_request_override_check(&rq), 1u);
    checks[2].override = RL_OVERRIDE_DENY;
    EXPECT_EQ(rl_request_override_check(&rq), 2u);
    rq.binding = 3;  // exempt: no binding rule
    EXPECT_EQ(rl_request_override_check(&rq), 1u);
}

TEST(Ranges, LongestPrefixWinsAndAKeyBeatsAnyRange)
{
    rl_rule_t rule = rule_of("limit=1 period=1h name=ip");
    rule.key_addr = RL_KEY_ADDR_BINARY;
    rl_rule_t text = rule_of("limit=1 period=1h name=ipt");
    text.key_addr = RL_KEY_ADDR_TEXT;
    OverrideZone z({rule, text});
    current = &z;
    rl_override_rule_t r{&rule, identity_of(rule)};
    for (const auto &o : {range_override("10.0.0.0/8", &rule, RL_OVERRIDE_DENY),
                          range_override("10.1.0.0/16", &rule, RL_OVERRIDE_ALLOW),
                          range_override("10.1.2.0/24", nullptr, RL_OVERRIDE_DENY),
                          range_override("2001:db8::/32", &rule, RL_OVERRIDE_DENY),
                          range_override("2001:db8:1::/48", nullptr, RL_OVERRIDE_ALLOW)}) {
        ASSERT_EQ(rl_override_put(z.mem, &o, o.target.rule[0] ? &r : nullptr, kT0), RL_OVERRIDE_OK);
    }
    // the binary rule meets its own ranges and every rule's; the text rule
    // ($remote_addr) every rule's only
    const struct {
        const char *addr;
        int verdict;
        uint32_t prefix;  // of the range met, 0: none
        int text_verdict;
    } cases[] = {
        {"10.9.9.9", RL_VERDICT_REJECTED, 8, RL_VERDICT_PASSED},
        {"10.1.9.9", RL_VERDICT_EXEMPT, 16, RL_VERDICT_PASSED},
        {"10.1.2.3", RL_VERDICT_REJECTED, 24, RL_VERDICT_REJECTED},
        {"11.0.0.1", RL_VERDICT_PASSED, 0, RL_VERDICT_PASSED},
        {"2001:db8::1", RL_VERDICT_REJECTED, 32, RL_VERDICT_PASSED},
        {"2001:db8:1::1", RL_VERDICT_EXEMPT, 48, RL_VERDICT_EXEMPT},
        {"2001:db9::1", RL_VERDICT_PASSED, 0, RL_VERDICT_PASSED},
    };
    for (const auto &cs : cases) {
        Req k(z, rule, binary(cs.addr));
        EXPECT_EQ(k.decide(kT0), cs.verdict) << cs.addr;
        EXPECT_EQ(k.c.override >> 8, cs.prefix ? cs.prefix + 1 : 0) << cs.addr;
        Req t(z, text, cs.addr);
        EXPECT_EQ(t.decide(kT0), cs.text_verdict) << cs.addr << " as text";
    }
    // the key's own override beats every range
    rl_override_t own = limit_override(binary("10.1.2.3"), rule, 5);
    ASSERT_EQ(rl_override_put(z.mem, &own, &r, kT0), RL_OVERRIDE_OK);
    Req k(z, rule, binary("10.1.2.3"));
    EXPECT_EQ(k.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(k.c.override, (uint32_t) RL_OVERRIDE_LIMIT);
    char name[RL_OVERRIDE_NAME_MAX];
    Req in24(z, rule, binary("10.1.2.9"));
    in24.decide(kT0);
    EXPECT_EQ(std::string(name, rl_override_name(in24.c.override, &rule, in24.key.data(), in24.key.size(), name)),
              "deny * 10.1.2.0/24");
}

TEST(Ranges, TargetsMustBeNetworks)
{
    rl_override_target_t t;
    char err[RL_ERR_MAX];
    const struct {
        const char *cidr;
        const char *message;
    } bad[] = {
        {"10.1.0.1/16", "is not a network"},       {"10.1.0.0/33", "from 0 to 32"},
        {"2001:db8::/129", "from 0 to 128"},       {"10.1.0.0", "ADDRESS/LENGTH"},
        {"10.1.0.0/", "ADDRESS/LENGTH"},           {"10.1.0.0/1x", "from 0 to 32"},
        {"host/8", "not an IPv4 or IPv6 address"},
    };
    for (const auto &b : bad) {
        EXPECT_EQ(rl_override_target(&t, nullptr, 0, nullptr, 0, b.cidr, std::strlen(b.cidr), err, sizeof(err)),
                  RL_ERROR)
            << b.cidr;
        EXPECT_NE(std::strstr(err, b.message), nullptr) << b.cidr << ": " << err;
    }
    EXPECT_EQ(rl_override_target(&t, nullptr, 0, nullptr, 0, "0.0.0.0/0", 9, err, sizeof(err)), RL_OK);
    EXPECT_EQ(t.prefix, 0u);
}

// ---- the store ----

TEST(Store, FullRefusesAndEvictsNothing)
{
    const rl_rule_t rule = rule_of("limit=1 period=1h");
    OverrideZone z({rule}, 4);
    rl_override_rule_t r{&rule, identity_of(rule)};
    for (int i = 0; i < 4; i++) {
        rl_override_t ov = limit_override("k" + std::to_string(i), rule, 5);
        EXPECT_EQ(rl_override_put(z.mem, &ov, &r, kT0), RL_OVERRIDE_OK);
    }
    rl_override_t late = limit_override("late", rule, 5);
    EXPECT_EQ(rl_override_put(z.mem, &late, &r, kT0), RL_OVERRIDE_FULL);
    rl_override_t again = limit_override("k2", rule, 7);
    EXPECT_EQ(rl_override_put(z.mem, &again, &r, kT0), RL_OVERRIDE_OK) << "a replacement needs no room";
    size_t total = 0;
    rl_override_t list[8];
    EXPECT_EQ(rl_override_list(z.mem, nullptr, 0, kT0, list, 8, &total), 4u);
    EXPECT_EQ(total, 4u);
}

// Writes and removals many times the capacity: removed index slots are
// reclaimed, every lookup still ends.
TEST(Store, ChurnKeepsTheIndexUsable)
{
    const rl_rule_t rule = rule_of("limit=1 period=1h");
    OverrideZone z({rule}, 8);
    rl_override_rule_t r{&rule, identity_of(rule)};
    for (int i = 0; i < 5000; i++) {
        rl_override_t ov = limit_override("k" + std::to_string(i), rule, 5);
        ASSERT_EQ(rl_override_put(z.mem, &ov, &r, kT0), RL_OVERRIDE_OK) << i;
        if (i >= 4) {
            rl_override_t old = limit_override("k" + std::to_string(i - 4), rule, 5);
            ASSERT_EQ(rl_override_delete(z.mem, &old.target, &r, kT0), RL_OVERRIDE_OK) << i;
        }
    }
    rl_override_t got;
    rl_override_t last = limit_override("k4999", rule, 5);
    EXPECT_EQ(rl_override_get(z.mem, &last.target, kT0, &got), 1);
    rl_overrides_stats_t st;
    rl_overrides_stats(rl_overrides_of(z.mem), &st);
    EXPECT_EQ(st.held, 4u);
}

TEST(Store, RetagFollowsARuleByName)
{
    rl_rule_t rule = rule_of("limit=1 period=1h name=r");
    OverrideZone z({rule});
    current = &z;
    rl_override_rule_t r{&rule, identity_of(rule)};
    rl_override_t deny = range_override("10.0.0.0/8", nullptr, RL_OVERRIDE_DENY);
    rl_override_t own = limit_override("k", rule, 5);
    ASSERT_EQ(rl_override_put(z.mem, &own, &r, kT0), RL_OVERRIDE_OK);
    // the rule's algorithm changed at a reload: its identity too
    rl_rule_t changed = rule_of("algorithm=fixed_window limit=1 period=1h name=r");
    rl_override_rule_t rc{&changed, identity_of(changed)};
    Req before(z, changed, "k");
    EXPECT_EQ(before.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(before.c.override, 0u) << "tagged for the old identity";
    rl_overrides_retag(z.mem, &rc, 1);
    Req after(z, changed, "k");
    after.decide(kT0);
    EXPECT_EQ(after.c.override, (uint32_t) RL_OVERRIDE_LIMIT);
    ASSERT_EQ(rl_override_put(z.mem, &deny, nullptr, kT0), RL_OVERRIDE_OK);
    rl_overrides_retag(z.mem, &rc, 1);
    Req other(z, changed, "k2");
    EXPECT_EQ(other.decide(kT0), RL_VERDICT_PASSED) << "a range of every rule meets no rule not keyed on addresses";
}

// ---- text ----

TEST(Text, FileLinesRoundTrip)
{
    const rl_rule_t rule = rule_of("limit=1 period=1h name=per_key");
    std::vector<rl_override_t> all;
    all.push_back(limit_override(std::string("a b%\n\x01\xff", 7), rule, 7, 90000, kT0 + 5));
    all.back().created_ms = kT0;
    rl_override_t r = range_override("2001:db8::/32", nullptr, RL_OVERRIDE_DENY);
    r.expires_ms = kT0 + 9;
    all.push_back(r);
    rl_override_t allow{};
    char err[RL_ERR_MAX];
    ASSERT_EQ(rl_override_target(&allow.target, "per_key", 7, "p", 1, nullptr, 0, err, sizeof(err)), RL_OK);
    allow.kind = RL_OVERRIDE_ALLOW;
    all.push_back(allow);
    for (const rl_override_t &ov : all) {
        char line[RL_OVERRIDE_LINE_MAX];
        const size_t n = rl_overrides_file_line(&ov, line);
        ASSERT_GT(n, 1u);
        ASSERT_EQ(line[n - 1], '\n');
        EXPECT_EQ(std::memchr(line, '\n', n - 1), nullptr) << "one line";
        rl_override_t back;
        ASSERT_EQ(rl_overrides_file_read(line, n - 1, &back, err, sizeof(err)), RL_OK) << err;
        EXPECT_EQ(std::memcmp(&back, &ov, sizeof(ov)), 0) << std::string(line, n);
    }
    EXPECT_EQ(rl_overrides_file_read("# ngx-ratelimit overrides 1", 27, &allow, err, sizeof(err)), RL_DECLINED);
    for (const char *bad :
         {"per_key key %zz limit 1 5 0 0 0 0", "per_key key a limit 1 5 0 0 0", "per_key key a shout 1 5 0 0 0 0",
          "per_key key a limit 0 0 0 0 0 0", "per_key range 10.0.0.1/8 deny 0 0 0 0 0 0",
          "per_key key a deny 1 5 0 0 0 0", "bad name! key a deny 0 0 0 0 0 0", "per_key key a limit 1 5 0 0 0 0 extra",
          // numbers past their bound, up to the digits of one past INT64_MAX
          "per_key key a limit 1 5 0 0 9999999999999999999 0", "per_key key a limit 1 5 0 0 9223372036854775808 0",
          "per_key key a limit 8 5 0 0 0 0"}) {
        EXPECT_EQ(rl_overrides_file_read(bad, std::strlen(bad), &allow, err, sizeof(err)), RL_ERROR) << bad;
    }
}

TEST(Text, BodiesReadOrRefusedNamingTheField)
{
    rl_override_t ov{};
    char err[RL_ERR_MAX];
    const std::string ok = " {\"limit\": 1000, \"period\":\"1m\", \"burst\":50, \"expire\":\"7d\"} ";
    ASSERT_EQ(rl_override_body(&ov, ok.data(), ok.size(), kT0, err, sizeof(err)), RL_OK) << err;
    EXPECT_EQ(ov.limit, 1000u);
    EXPECT_EQ(ov.burst, 50u);
    EXPECT_EQ(ov.period_ms, 60000);
    EXPECT_EQ(ov.expires_ms, kT0 + 7 * 86400000LL);
    EXPECT_EQ(ov.kind, RL_OVERRIDE_LIMIT);
    const struct {
        const char *body;
        const char *message;
    } bad[] = {
        {"", "expected a JSON object"},
        {"[1]", "expected a JSON object"},
        {"{\"limit\":5", "not a JSON object of fields"},
        {"{\"limit\":5} x", "text after the JSON object"},
        {"{\"lim\\u0069t\":5}", "not a JSON object of fields"},
        {"{\"Limit\":5}", "unknown field \"Limit\""},
        {"{\"limit\":\"5\"}", "\"limit\": expected an integer"},
        {"{\"limit\":5.5}", "\"limit\": expected an integer from 1 to 1000000000, not a number with a sign"},
        {"{\"limit\":-1}", "\"limit\": expected an integer from 1 to 1000000000, not a number with a sign"},
        {"{\"limit\":99999999999999999999999}", "\"limit\": expected an integer from 1 to 1000000000"},
        {"{\"period\":60000}", "\"period\": expected a time"},
        {"{\"expire\":\"0s\"}", "\"expire\": expected a time"},
        {"{\"action\":\"deny\",\"burst\":2}", "takes no limit, burst or period"},
        {"{\"action\":null}", "\"action\": expected"},
        {"{\"expire\":null}", "a limit override sets"},
    };
    for (const auto &b : bad) {
        EXPECT_EQ(rl_override_body(&ov, b.body, std::strlen(b.body), kT0, err, sizeof(err)), RL_ERROR) << b.body;
        EXPECT_NE(std::strstr(err, b.message), nullptr) << b.body << ": " << err;
    }
}

// What JSON does not allow is refused, each with what is wrong (RFC 8259):
// numbers as JSON writes them (no leading zero, no '+', digits on both
// sides of a '.', an exponent with digits), an integer where one is
// expected (no fraction, exponent or sign, though JSON allows them), one
// object, no trailing comma, no field twice, nothing after it.
TEST(Text, BodiesAreJsonAsJsonWritesIt)
{
    rl_override_t ov{};
    char err[RL_ERR_MAX];
    const struct {
        const char *body;
        const char *message;
    } bad[] = {
        {"{\"limit\":01}", "\"limit\": not JSON at \"01}\": a number with a leading zero"},
        {"{\"limit\":00}", "a number with a leading zero"},
        {"{\"limit\":-01}", "a number with a leading zero"},
        {"{\"limit\":+1}", "not JSON at \"+1}\": a '+' before a number"},
        {"{\"limit\":1.}", "a '.' with no digits after it"},
        {"{\"limit\":.5}", "a number with no digit before its '.'"},
        {"{\"limit\":1e}", "an exponent with no digits"},
        {"{\"limit\":1e+}", "an exponent with no digits"},
        {"{\"limit\":-}", "a '-' with no digits after it"},
        {"{\"limit\":5x}", "not a JSON object of fields"},
        {"{\"limit\":1e2}",
         "\"limit\": expected an integer from 1 to 1000000000, not a number with a sign, a fraction"},
        {"{\"limit\":10E-1}", "not a number with a sign, a fraction or an exponent"},
        {"{\"limit\":1.0}", "not a number with a sign, a fraction or an exponent"},
        {"{\"limit\":-0}", "not a number with a sign, a fraction or an exponent"},
        {"{\"limit\":true}", "\"limit\": expected an integer from 1 to 1000000000, not true or false"},
        {"{\"limit\":null}", "not null"},
        {"{\"limit\":{}}", "not an object or an array"},
        {"{\"limit\":[5]}", "not an object or an array"},
        {"{\"limit\":\"5\"}", "not a string"},
        {"{\"limit\":nul}", "not JSON at \"nul}\": not a JSON value"},
        {"{\"limit\":nullx}", "not JSON at \"nullx}\": not a JSON value"},
        {"{\"limit\":truex}", "not a JSON value"},
        {"{\"limit\":NaN}", "not a JSON value"},
        {"{\"limit\":Infinity}", "not a JSON value"},
        {"{\"limit\":'5'}", "not a JSON value"},
        {"{\"limit\":5,}", "not a JSON object of fields"},
        {"{,\"limit\":5}", "not a JSON object of fields"},
        {"{\"limit\" 5}", "not a JSON object of fields"},
        {"{limit:5}", "not a JSON object of fields"},
        {"{'limit':5}", "not a JSON object of fields"},
        {"{\"limit\":5}}", "text after the JSON object"},
        {"{\"limit\":5}{}", "text after the JSON object"},
        {"{\"limit\":5}\x00\x00", "text after the JSON object"},
        {"\xef\xbb\xbf{\"limit\":5}", "expected a JSON object"},
        {"{\"limit\":5,\"limit\":5}", "field \"limit\" given twice"},
        {"{\"period\":\"1m\",\"period\":\"1m\"}", "field \"period\" given twice"},
        {"{\"period\":60}",
         "\"period\": expected a time from 1ms to 366d as a string, e.g. \"1m\", \"7d\", not an integer"},
        {"{\"expire\":true}", "or null for none, not true or false"},
        {"{\"action\":1}", "\"action\": expected \"limit\", \"deny\" or \"allow\", not an integer"},
        {"{\"action\":\"deny\\u0000\"}", "a string this field cannot take"},
        {"{\"action\":\"de\nny\"}", "a string this field cannot take"},
    };
    for (const auto &b : bad) {
        // the one with a NUL byte after the object: its two bytes
        const size_t len = std::strlen(b.body) + (std::strcmp(b.body, "{\"limit\":5}") == 0 ? 2 : 0);
        EXPECT_EQ(rl_override_body(&ov, b.body, len, kT0, err, sizeof(err)), RL_ERROR) << b.body;
        EXPECT_NE(std::strstr(err, b.message), nullptr) << b.body << ": " << err;
    }
    // what JSON allows and the fields take: whitespace anywhere between
    // tokens, 0's own digit, an escaped '/', fields in any order
    const struct {
        const char *body;
        uint32_t limit;
    } good[] = {
        {"{\"limit\":10}", 10},
        {"\t\r\n{ \"limit\" :\n 7 }\n", 7},
        {"{\"expire\":null,\"limit\":1000000000}", 1000000000},
        {"{\"action\":\"li\\/mit\",\"limit\":3}", 0},
    };
    for (const auto &g : good) {
        const int rc = rl_override_body(&ov, g.body, std::strlen(g.body), kT0, err, sizeof(err));
        if (g.limit == 0) {
            EXPECT_EQ(rc, RL_ERROR) << g.body << ": \"li/mit\" is no action";
            continue;
        }
        EXPECT_EQ(rc, RL_OK) << g.body << ": " << err;
        EXPECT_EQ(ov.limit, g.limit) << g.body;
    }
}

// ---- one client, one key, whichever way its address came -----------------

// An IPv4-mapped IPv6 address (a dual-stack listener's IPv4 client, or what
// realip makes of ::ffff:a.b.c.d) is its IPv4 address: to the ranges, as
// nginx's allow, deny and geo have it, and as a key, so that one client
// has one budget.
TEST(Ranges, AMappedAddressIsItsIPv4Address)
{
    rl_rule_t bin = rule_of("limit=1 period=1h name=ip key=$binary_remote_addr");
    bin.key_addr = RL_KEY_ADDR_BINARY;
    rl_rule_t text = rule_of("limit=1 period=1h name=ipt key=$remote_addr");
    text.key_addr = RL_KEY_ADDR_TEXT;
    OverrideZone z({bin, text});
    current = &z;
    rl_override_rule_t rules[] = {{&bin, identity_of(bin), "$binary_remote_addr", 19},
                                  {&text, identity_of(text), "$remote_addr", 12}};
    rl_override_t deny = range_override("10.1.2.0/24", nullptr, RL_OVERRIDE_DENY);
    ASSERT_EQ(rl_override_put(z.mem, &deny, nullptr, kT0), RL_OVERRIDE_OK);
    const std::string mapped = std::string(10, '\0') + "\xff\xff" + binary("10.1.2.3");
    ASSERT_EQ(mapped, binary("::ffff:10.1.2.3"));
    Req b(z, bin, mapped);
    EXPECT_EQ(b.decide(kT0), RL_VERDICT_REJECTED) << "::ffff:10.1.2.3 is in 10.1.2.0/24";
    EXPECT_EQ(b.c.key_len, 4u) << "its key is the IPv4 address's";
    EXPECT_EQ(std::string(static_cast<const char *>(b.c.key), 4), binary("10.1.2.3"));
    Req t(z, text, "::ffff:10.1.2.3");
    EXPECT_EQ(t.decide(kT0), RL_VERDICT_REJECTED);
    EXPECT_EQ(std::string(static_cast<const char *>(t.c.key), t.c.key_len), "10.1.2.3");
    char name[RL_OVERRIDE_NAME_MAX];
    EXPECT_EQ(std::string(name, rl_override_name(t.c.override, &text, t.c.key, t.c.key_len, name)),
              "deny * 10.1.2.0/24");
    // one budget for both forms of an address outside the range, as a key
    for (const rl_rule_t *r : {&bin, &text}) {
        const bool binary_key = r == &bin;
        Req plain(z, *r, binary_key ? binary("10.9.9.9") : "10.9.9.9");
        Req as_v6(z, *r, binary_key ? binary("::ffff:10.9.9.9") : "::ffff:10.9.9.9");
        EXPECT_EQ(plain.decide(kT0), RL_VERDICT_PASSED) << r->name;
        EXPECT_EQ(as_v6.decide(kT0), RL_VERDICT_REJECTED) << r->name << ": the same client, its 1 spent";
    }
    // IPv6 addresses that are not mapped ones keep their 16 bytes, or text
    for (const char *a : {"::10.9.9.9", "::fffe:10.9.9.9", "2001:db8::1", "::ffff:a09:909"}) {
        Req k(z, text, a);
        k.decide(kT0);
        EXPECT_EQ(k.c.key_len, std::strlen(a)) << a;
        Req kb(z, bin, binary(a));
        kb.decide(kT0);
        EXPECT_EQ(kb.c.key_len, std::strcmp(a, "::ffff:a09:909") == 0 ? 4u : 16u) << a;
    }
    // a range written as a mapped one is the IPv4 range
    rl_override_target_t tg;
    char err[RL_ERR_MAX];
    ASSERT_EQ(rl_override_target(&tg, nullptr, 0, nullptr, 0, "::ffff:10.1.3.0/120", 19, err, sizeof(err)), RL_OK);
    EXPECT_EQ(tg.family, 4);
    EXPECT_EQ(tg.prefix, 24u);
    EXPECT_EQ(std::string(reinterpret_cast<char *>(tg.key), 4), binary("10.1.3.0"));
    ASSERT_EQ(rl_override_target(&tg, nullptr, 0, nullptr, 0, "::/64", 5, err, sizeof(err)), RL_OK);
    EXPECT_EQ(tg.family, 6) << "wider than the mapped addresses: an IPv6 range";
    // a key override of a mapped address is made the IPv4 address's
    rl_override_t own{};
    ASSERT_EQ(rl_override_target(&own.target, "ip", 2, mapped.data(), 16, nullptr, 0, err, sizeof(err)), RL_OK);
    own.kind = RL_OVERRIDE_ALLOW;
    const rl_override_rule_t *rule = nullptr;
    ASSERT_EQ(rl_override_admit(&own, rules, 2, 0, kT0, &rule, err, sizeof(err)), RL_OK) << err;
    EXPECT_EQ(rule, &rules[0]);
    EXPECT_EQ(std::string(reinterpret_cast<char *>(own.target.key), own.target.key_len), binary("10.1.2.3"));
    ASSERT_EQ(rl_override_put(z.mem, &own, rule, kT0), RL_OVERRIDE_OK);
    Req again(z, bin, mapped);
    EXPECT_EQ(again.decide(kT0), RL_VERDICT_EXEMPT) << "its own override beats the range";
}

// ---- a key in every rule: the rules keyed on its expression only -----------

TEST(Keyed, AKeyInEveryRuleMeetsTheRulesKeyedOnItsExpressionOnly)
{
    rl_rule_t ip = rule_of("limit=1 period=1h name=ip key=$remote_addr");
    ip.key_addr = RL_KEY_ADDR_TEXT;
    const rl_rule_t hdr = rule_of("limit=1 period=1h name=hdr key=$http_x_k");
    const rl_rule_t hdr2 = rule_of("limit=1 period=1m name=hdr2 key=$http_x_k");
    OverrideZone z({ip, hdr, hdr2});
    current = &z;
    const rl_override_rule_t rules[] = {{&ip, identity_of(ip), "$remote_addr", 12},
                                        {&hdr, identity_of(hdr), "$http_x_k", 9},
                                        {&hdr2, identity_of(hdr2), "$http_x_k", 9}};
    rl_override_t allow{};
    char err[RL_ERR_MAX];
    const rl_override_rule_t *rule;
    ASSERT_EQ(rl_override_target(&allow.target, nullptr, 0, "10.9.9.9", 8, nullptr, 0, err, sizeof(err)), RL_OK);
    allow.kind = RL_OVERRIDE_ALLOW;
    // the zone's rules are keyed on two expressions: which one is meant?
    rl_override_t mixed = allow;
    EXPECT_EQ(rl_override_admit(&mixed, rules, 3, 0, kT0, &rule, err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::strstr(err, "the zone's rules are keyed on different expressions (rule \"ip\" on "
                               "\"$remote_addr\", rule \"hdr\" on \"$http_x_k\")"),
              nullptr)
        << err;
    EXPECT_NE(std::strstr(err, "name the rule (rule=), or the key expression of the rules it applies to (keyed=, e.g. "
                               "keyed=$remote_addr), or, for a client's address, give range=ADDRESS/32"),
              nullptr)
        << err;
    // named, as a file line or Redis's field names it: the rules of that
    // expression only
    std::strcpy(allow.target.keyed, "$remote_addr");
    ASSERT_EQ(rl_override_admit(&allow, rules, 3, 0, kT0, &rule, err, sizeof(err)), RL_OK) << err;
    EXPECT_EQ(rule, nullptr);
    ASSERT_EQ(rl_override_put(z.mem, &allow, nullptr, kT0), RL_OVERRIDE_OK);
    Req by_ip(z, ip, "10.9.9.9");
    EXPECT_EQ(by_ip.decide(kT0), RL_VERDICT_EXEMPT);
    EXPECT_EQ(by_ip.decide(kT0), RL_VERDICT_EXEMPT) << "uncounted";
    Req by_header(z, hdr, "10.9.9.9");
    EXPECT_EQ(by_header.decide(kT0), RL_VERDICT_PASSED) << "a header that says 10.9.9.9 is another key";
    EXPECT_EQ(by_header.c.override, 0u);
    EXPECT_EQ(by_header.decide(kT0), RL_VERDICT_REJECTED) << "its own limit of 1";
    // a deny in every rule keyed on $http_x_k: both of them, not ip
    rl_override_t deny{};
    ASSERT_EQ(rl_override_target(&deny.target, nullptr, 0, "k-abuse", 7, nullptr, 0, err, sizeof(err)), RL_OK);
    deny.kind = RL_OVERRIDE_DENY;
    std::strcpy(deny.target.keyed, "$http_x_k");
    ASSERT_EQ(rl_override_admit(&deny, rules, 3, 0, kT0, &rule, err, sizeof(err)), RL_OK) << err;
    ASSERT_EQ(rl_override_put(z.mem, &deny, nullptr, kT0), RL_OVERRIDE_OK);
    for (const rl_rule_t *r : {&hdr, &hdr2}) {
        Req k(z, *r, "k-abuse");
        EXPECT_EQ(k.decide(kT0), RL_VERDICT_REJECTED) << r->name;
        EXPECT_EQ(k.c.override, (uint32_t) (RL_OVERRIDE_DENY | RL_OVERRIDE_EVERY_RULE)) << r->name;
    }
    Req other(z, ip, "k-abuse");
    EXPECT_EQ(other.decide(kT0), RL_VERDICT_PASSED);
    // the same key in every rule of each expression: two overrides
    rl_override_t both = deny;
    std::strcpy(both.target.keyed, "$remote_addr");
    ASSERT_EQ(rl_override_put(z.mem, &both, nullptr, kT0), RL_OVERRIDE_OK);
    rl_overrides_stats_t st;
    rl_overrides_stats(rl_overrides_of(z.mem), &st);
    EXPECT_EQ(st.held, 3u);
    rl_override_t got;
    ASSERT_EQ(rl_override_get(z.mem, &deny.target, kT0, &got), 1);
    EXPECT_STREQ(got.target.keyed, "$http_x_k");
    // an expression no rule of the zone is keyed on
    std::strcpy(deny.target.keyed, "$http_x_other");
    EXPECT_EQ(rl_override_admit(&deny, rules, 3, 0, kT0, &rule, err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::strstr(err, "no rule of the zone is keyed on \"$http_x_other\""), nullptr) << err;
    // a zone whose rules have one expression: the override takes it
    rl_override_t one{};
    ASSERT_EQ(rl_override_target(&one.target, nullptr, 0, "cust", 4, nullptr, 0, err, sizeof(err)), RL_OK);
    one.kind = RL_OVERRIDE_DENY;
    ASSERT_EQ(rl_override_admit(&one, rules + 1, 2, 0, kT0, &rule, err, sizeof(err)), RL_OK) << err;
    EXPECT_STREQ(one.target.keyed, "$http_x_k");
    // ranges and one rule's overrides name no expression
    rl_override_t range = range_override("10.0.0.0/8", nullptr, RL_OVERRIDE_DENY);
    std::strcpy(range.target.keyed, "$remote_addr");
    EXPECT_EQ(rl_override_admit(&range, rules, 3, 0, kT0, &rule, err, sizeof(err)), RL_ERROR);
    rl_override_t named = limit_override("k", hdr, 5);
    std::strcpy(named.target.keyed, "$http_x_k");
    EXPECT_EQ(rl_override_admit(&named, rules, 3, 0, kT0, &rule, err, sizeof(err)), RL_ERROR);
    // the file's line names the expression, and reads back the same
    char line[RL_OVERRIDE_LINE_MAX];
    const size_t n = rl_overrides_file_line(&allow, line);
    EXPECT_EQ(std::string(line, n).substr(0, 30), "*=$remote_addr key 10.9.9.9 al");
    rl_override_t back;
    ASSERT_EQ(rl_overrides_file_read(line, n - 1, &back, err, sizeof(err)), RL_OK) << err;
    EXPECT_EQ(std::memcmp(&back, &allow, sizeof(allow)), 0);
    rl_override_t spaced = allow;
    std::strcpy(spaced.target.keyed, "$a $b");
    const size_t m = rl_overrides_file_line(&spaced, line);
    EXPECT_EQ(std::string(line, m).substr(0, 10), "*=$a%20$b ");
    ASSERT_EQ(rl_overrides_file_read(line, m - 1, &back, err, sizeof(err)), RL_OK) << err;
    EXPECT_STREQ(back.target.keyed, "$a $b");
    const std::string json(line, rl_override_json(&allow, kT0, line, sizeof(line)));
    EXPECT_NE(json.find("{\"rule\":null,\"keyed\":\"$remote_addr\",\"key\":\"10.9.9.9\""), std::string::npos) << json;
    for (const char *bad :
         {"*= key a deny 0 0 0 0 0 0", "*=%zz key a deny 0 0 0 0 0 0", "*=%00 key a deny 0 0 0 0 0 0"}) {
        EXPECT_EQ(rl_overrides_file_read(bad, std::strlen(bad), &back, err, sizeof(err)), RL_ERROR) << bad;
    }
}

// ---- the file's lines and Redis's fields take what the key API takes -------

TEST(Admit, TheFileAndRedisTakeWhatTheKeyApiTakes)
{
    const rl_rule_t gcra = rule_of("limit=10 period=1h name=g key=$k");
    const rl_rule_t slots = rule_of("algorithm=concurrency limit=3 name=c key=$k");
    const rl_override_rule_t rules[] = {{&gcra, identity_of(gcra), "$k", 2}, {&slots, identity_of(slots), "$k", 2}};
    const rl_override_rule_t *rule;
    char err[RL_ERR_MAX];
    rl_override_t ov;
    const int64_t year = 366LL * 86400000;
    const struct {
        std::string line;
        int rc;
        const char *message;
    } cases[] = {
        {"g key a limit 1 20 0 0 " + std::to_string(kT0 + year) + " " + std::to_string(kT0), RL_OK, ""},
        {"g key a limit 1 20 0 0 " + std::to_string(kT0 + year + 1) + " 0", RL_ERROR,
         "it expires 366 days from now: an override expires at most 366 days from when it is written"},
        {"g key a deny 0 0 0 0 94670856000000000 0", RL_ERROR, "days from now: an override expires at most 366 days"},
        {"g key a deny 0 0 0 0 " + std::to_string(kT0) + " 0", RL_DECLINED, ""},
        {"g key a deny 0 0 0 0 0 " + std::to_string(kT0 + 86400001), RL_ERROR, "in the future"},
        {"c key a limit 1 4000 0 0 0 0", RL_ERROR, "rule \"c\" keeps room for at most 3 a key"},
        {"c key a limit 1 2 0 0 0 0", RL_OK, ""},
        {"g key a limit 4 0 0 90000 0 0", RL_OK, ""},
        {"g key a limit 4 0 0 31622400001 0 0", RL_ERROR, "number 4 after the action"},
        {"nope key a deny 0 0 0 0 0 0", RL_ERROR, "the zone has no rule \"nope\""},
        {"g range 10.0.0.0/8 deny 0 0 0 0 0 0", RL_ERROR, "is not keyed on the client's address"},
        {"* key a limit 1 5 0 0 0 0", RL_ERROR, "a limit override names its rule"},
        {"* key a deny 0 0 0 0 0 0", RL_OK, ""},
    };
    for (const auto &c : cases) {
        int rc = rl_overrides_file_read(c.line.data(), c.line.size(), &ov, err, sizeof(err));
        if (rc == RL_OK) {
            rc = rl_override_admit(&ov, rules, 2, 0, kT0, &rule, err, sizeof(err));
        }
        EXPECT_EQ(rc, c.rc) << c.line << ": " << err;
        if (c.rc == RL_ERROR) {
            EXPECT_NE(std::strstr(err, c.message), nullptr) << c.line << ": " << err;
        }
    }
    // Redis's fields alike, the field named; and those the script sends as
    // "#! WHY BYTES FIELD"
    const struct {
        const char *line;
        int rc;
        const char *message;
    } redis[] = {
        {"c key a limit 1 4000 0 0 0 0", RL_ERROR, "field \"c key a\": \"limit\": rule \"c\" keeps room for at most 3"},
        {"c key a limit 1 2 0 0 1 0", RL_OK, "an ended one is kept (a Redis zone's copy)"},
        {"garbage", RL_ERROR, "field \"garbage\": expected \"RULE key|range TARGET"},
        {"# a comment", RL_DECLINED, ""},
        {"#! long 27000 g key big", RL_ERROR,
         "field \"g key big\" (a value of 27000 bytes): its value is longer than an override's line"},
        {"#! break 40 g key \x01"
         "b",
         RL_ERROR, "field \"g key \\x01b\" (a value of 40 bytes): its value holds a line break"},
        {"#! field 30 g key x", RL_ERROR, "it is not the field of its value"},
    };
    for (const auto &c : redis) {
        EXPECT_EQ(rl_overrides_redis_read(c.line, std::strlen(c.line), rules, 2, 1, kT0, &ov, err, sizeof(err)), c.rc)
            << c.line;
        if (c.rc == RL_ERROR) {
            EXPECT_NE(std::strstr(err, c.message), nullptr) << c.line << ": " << err;
        }
    }
}

// What Redis's hash is to the copy a server took of it: the same, a later
// version of it (or of a hash made before hashes had an id), or another
// hash (Redis lost it), which the server says at warn.
TEST(RedisOverrides, ANewerVersionOrALostHash)
{
    rl_overrides_stats_t st{};
    EXPECT_EQ(rl_overrides_news(&st, 0, 0), RL_OVERRIDES_SAME) << "never written";
    EXPECT_EQ(rl_overrides_news(&st, 3, 77), RL_OVERRIDES_NEWER) << "the first taken";
    st.remote = 3;
    st.remote_id = 77;
    EXPECT_EQ(rl_overrides_news(&st, 3, 77), RL_OVERRIDES_SAME);
    EXPECT_EQ(rl_overrides_news(&st, 4, 77), RL_OVERRIDES_NEWER);
    EXPECT_EQ(rl_overrides_news(&st, 0, 0), RL_OVERRIDES_LOST) << "FLUSHALL";
    EXPECT_EQ(rl_overrides_news(&st, 1, 90), RL_OVERRIDES_LOST) << "lost, and written again";
    EXPECT_EQ(rl_overrides_news(&st, 9, 90), RL_OVERRIDES_LOST) << "lost, and written again often";
    EXPECT_EQ(rl_overrides_news(&st, 2, 77), RL_OVERRIDES_LOST) << "a failover to a replica behind";
    st.remote_id = 0;
    EXPECT_EQ(rl_overrides_news(&st, 4, 90), RL_OVERRIDES_NEWER) << "a hash of before ids, given one";
    EXPECT_EQ(rl_overrides_news(&st, 0, 0), RL_OVERRIDES_LOST);
}

// ---- the overrides' script, in a real redis-server -----------------------

using rltest::Redis;
using rltest::redis_server;

// A call of a zone's overrides to Redis, as the glue sends it, and its
// reply judged.
struct OverridesCall {
    Redis &redis;
    std::string reply;
    rl_overrides_call_t call{};
    int send()
    {
        size_t slen;
        const char *script = rl_overrides_redis_script(&slen);
        std::string cmd(rl_overrides_redis_command_size(4, slen), '\0');
        cmd.resize(rl_overrides_redis_command(&cmd[0], script, slen, 1, "ovt:", 4, 0, "z", 1, &call));
        rl_resp_t r = redis.call(cmd);
        reply.assign(r.str != nullptr ? r.str : "", r.str != nullptr ? r.str_len : 0);
        char why[RL_ERR_MAX] = "";
        const int rc = rl_overrides_redis_answer(&r, &call, why, sizeof(why));
        EXPECT_EQ(rc, RL_REDIS_DECIDED) << why << ": " << reply;
        return rc;
    }
    // the hash read whole from (version, id), every page under the reply's
    // bound: its lines
    std::vector<std::string> poll(uint64_t version, uint64_t id, int *pages)
    {
        std::vector<std::string> lines;
        call = rl_overrides_call_t{};
        call.op = RL_OVERRIDES_POLL;
        call.version = version;
        call.id = id;
        std::strcpy(call.cursor, "0");
        for (*pages = 0;; ++*pages) {
            send();
            EXPECT_LE(reply.size(), (size_t) RL_RESP_REPLY_MAX);
            if (call.unchanged) {
                return lines;
            }
            std::string text(call.lines, call.lines_len);
            for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
                lines.push_back(text.substr(at, nl - at));
            }
            if (!call.more) {
                return lines;
            }
            std::strcpy(call.cursor, call.next_cursor);
            call.skip = call.next_skip;
        }
    }
};

// Fields written into the hash by hand: one too long for any reply, one
// holding a line break, one not its line's field, many small ones; each
// poll's page stays under the reply's bound, the bad fields come as a
// line each saying why, the rest are read.  A write answers the version
// it made; the hash's id says when it was made, and a hash lost is told.
TEST(RedisOverrides, OneBadFieldStopsNothing)
{
    NEED_REDIS();
    std::string hash(512, '\0');
    char target[RL_OVERRIDES_TARGET_MAX];
    const size_t tlen = rl_overrides_redis_target("z", 1, target);
    hash.resize(rl_redis_key(&hash[0], "ovt:", 4, 0, rl::kEveryRule, target, tlen));
    redis.command({"DEL", hash});

    OverridesCall c{redis};
    char err[RL_ERR_MAX];
    for (int i = 1; i <= 2; i++) {
        c.call = rl_overrides_call_t{};
        c.call.op = RL_OVERRIDES_PUT;
        const std::string key = "k" + std::to_string(i);
        ASSERT_EQ(rl_override_target(&c.call.ov.target, "g", 1, key.data(), key.size(), nullptr, 0, err, sizeof(err)),
                  RL_OK);
        c.call.ov.kind = RL_OVERRIDE_DENY;
        c.call.now_ms = kT0 + i;
        c.call.room = 8;
        c.send();
        EXPECT_EQ(c.call.result, 1);
        EXPECT_EQ(c.call.written, (uint64_t) i) << "the version the write made";
    }
    const std::string big = "g key big deny 0 0 0 0 0 " + std::string(27000, '1');
    redis.command({"HSET", hash, "g key big", big});
    const std::string two = "g key nl deny 0 0 0 0 0 0\n* key x allow 0 0 0 0 0 0";
    const std::string other = "g key k9 deny 0 0 0 0 0 0";
    redis.command({"HSET", hash, "g key nl", two});
    redis.command({"HSET", hash, "g key elsewhere", other});
    for (int i = 0; i < 300; i++) {
        const std::string f = "g key filler-" + std::to_string(i) + std::string(60, 'x');
        redis.command({"HSET", hash, f, f + " deny 0 0 0 0 0 0"});
    }
    int pages;
    std::vector<std::string> lines = c.poll(0, 0, &pages);
    EXPECT_GE(pages, 2) << "over 20 KB of lines, a page at a time";
    EXPECT_EQ(c.call.page_version, 2u);
    EXPECT_EQ(c.call.page_id, (uint64_t) kT0 + 1) << "made by the first write";
    ASSERT_EQ(lines.size(), 2u + 3 + 300);
    int good = 0;
    std::vector<std::string> said;
    for (const std::string &l : lines) {
        if (l.compare(0, 3, "#! ") == 0) {
            said.push_back(l);
        } else {
            good++;
        }
    }
    EXPECT_EQ(good, 302);
    std::sort(said.begin(), said.end());
    ASSERT_EQ(said.size(), 3u);
    EXPECT_EQ(said[0], "#! break " + std::to_string(two.size()) + " g key nl");
    EXPECT_EQ(said[1], "#! field " + std::to_string(other.size()) + " g key elsewhere");
    EXPECT_EQ(said[2], "#! long " + std::to_string(big.size()) + " g key big");

    // known: unchanged (a few bytes); another write: read again
    c.poll(2, (uint64_t) kT0 + 1, &pages);
    EXPECT_TRUE(c.call.unchanged);
    EXPECT_EQ(c.reply, std::to_string(2) + " " + std::to_string(kT0 + 1));
    c.call = rl_overrides_call_t{};
    c.call.op = RL_OVERRIDES_DEL;
    ASSERT_EQ(rl_override_target(&c.call.ov.target, "g", 1, "k1", 2, nullptr, 0, err, sizeof(err)), RL_OK);
    c.call.now_ms = kT0 + 5;
    c.send();
    EXPECT_EQ(c.call.result, 1);
    EXPECT_EQ(c.call.written, 3u);
    c.send();
    EXPECT_EQ(c.call.result, 0) << "ended already";

    // lost: the copy's version of its hash is not there any more
    redis.command({"DEL", hash});
    lines = c.poll(3, (uint64_t) kT0 + 1, &pages);
    EXPECT_TRUE(lines.empty());
    EXPECT_FALSE(c.call.unchanged);
    rl_overrides_stats_t st{};
    st.remote = 3;
    st.remote_id = (uint64_t) kT0 + 1;
    EXPECT_EQ(rl_overrides_news(&st, c.call.page_version, c.call.page_id), RL_OVERRIDES_LOST);
}

}  // namespace
