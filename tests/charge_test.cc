// Charges (charge=) and bans (ban=), through the table as nginx uses it:
// rl_decide when a request arrives, rl_request_end when it ends.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "helpers.h"

namespace {

const uint8_t kSecret[16] = {7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// A rule that charges when requests end (but a shaper, which cannot).
std::string charged(const std::string &text)
{
    const bool can = text.find("leaky_bucket") == std::string::npos && text.find("charge=") == std::string::npos;
    return can ? text + " charge=$c" : text;
}

// One rule and one key in a zone of their own.
struct OneKey {
    rl_rule_t rule;
    TestZone zone;
    std::string key;

    // a zone of 64 KiB, as small as the tests of a few keys take: the
    // table's invariants, checked whole after each request's end, are
    // checked over a sixteenth of the buckets of a 1 MiB zone
    explicit OneKey(const std::string &text, const std::string &k = "client")
        : rule(rule_of(charged(text))), zone(64 * 1024, {rule_of(charged(text))}, kSecret), key(k)
    {
    }

    // The key's check, its tag computed.
    rl_check_t check(uint64_t cost)
    {
        rl_check_t c = check_of(zone.mem, &rule, 42, key, cost);
        hashed(request_of(&c, 1));
        return c;
    }

    // A request arriving: its check (for its end), and whether admitted.
    bool arrive(int64_t now, rl_check_t *out, uint64_t cost = 1)
    {
        *out = check(cost);
        return decide(out, 1, RL_COMBINE_ALL, now);
    }

    // The request ends, charged `units`.
    void end(rl_check_t *c, int64_t now, uint64_t units)
    {
        c->charge = units;
        end_request(c, 1, now);
        EXPECT_TABLE_VALID(zone.table());
    }

    // A request that is served and charged at once; its decision.
    rl_decision_t serve(int64_t now, uint64_t units, rl_check_t *c = nullptr)
    {
        rl_check_t mine;
        c = c ? c : &mine;
        if (arrive(now, c)) {
            end(c, now, units);
        }
        return c->decision;
    }

    rl_peek_t peek(int64_t now)
    {
        rl_check_t c = check(1);
        rl_peek_t p;
        rl_table_peek(zone.mem, &rule, c.tag, 1, now, &p);
        return p;
    }

    // The key's whole state in the table: head and block bytes.
    std::string state()
    {
        rl_check_t c = check(1);
        rl::State s{};
        if (!zone.table()->find(c.tag, &s)) {
            return "";
        }
        // t and n, not the head's bytes: its padding is not state
        std::string bytes = std::to_string(s.head.t) + " " + std::to_string(s.head.n) + " ";
        if (s.blob != nullptr) {
            bytes.append(reinterpret_cast<const char *>(s.blob), rl::blob_size(rule));
        }
        return bytes;
    }
};

const char *const kCharged[] = {
    "algorithm=gcra",           "algorithm=token_bucket",
    "algorithm=fixed_window",   "algorithm=fixed_window align=first",
    "algorithm=sliding_window", "algorithm=sliding_log",
};

}  // namespace

TEST(Charge, RuleParameters)
{
    rl_rule_t r;
    char err[RL_ERR_MAX];
    ASSERT_EQ(rl_rule_parse(&r, name_room(), "limit=5 period=15m charge=$failed ban=1h", err, sizeof(err)), RL_OK)
        << err;
    EXPECT_EQ(r.charge, 1u);
    EXPECT_EQ(r.ban_ms, 3600000);
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "algorithm=leaky_bucket limit=5 charge=$x", err, sizeof(err)), RL_ERROR);
    EXPECT_STREQ(err,
                 "\"charge=\" does not apply to algorithm=leaky_bucket: a shaper sets each request's delay before it "
                 "is served, so what the request spends cannot change after it");
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "limit=5 charge=", err, sizeof(err)), RL_ERROR);
    EXPECT_STREQ(err, "invalid \"charge=\": expected a value, like charge=$upstream_http_x_tokens");
    for (const char *bad : {"ban=0", "ban=367d", "ban=x", "ban="}) {
        EXPECT_EQ(rl_rule_parse(&r, name_room(), (std::string("limit=5 ") + bad).c_str(), err, sizeof(err)), RL_ERROR)
            << bad;
        EXPECT_NE(std::string(err).find("expected a time from 1ms to 366d"), std::string::npos) << err;
    }
    // a bucket may owe a limit beyond its burst: (burst + limit) x period fits 2^61 ms/limit
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "limit=1000000000 burst=1 period=366d charge=$x", err, sizeof(err)),
              RL_ERROR);
    EXPECT_NE(std::string(err).find("too large for charge="), std::string::npos) << err;
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "limit=1000000000 burst=1 period=366d", err, sizeof(err)), RL_OK) << err;
}

// The tokens recipe: 1000 a period, each request reports 400.  Three are
// served, the third puts the key 200 in debt, and the fourth waits for the
// debt and its own unit to come back.
TEST(Charge, TokensGoIntoDebtAndRetryAfterRepaysIt)
{
    OneKey k("algorithm=gcra limit=1000 period=1000s");  // a unit a second
    const int64_t t = kT0;
    for (int i = 0; i < 3; i++) {
        rl_check_t c;
        ASSERT_TRUE(k.arrive(t, &c)) << i;
        k.end(&c, t, 400);
        EXPECT_EQ(c.charged, 400u);
        EXPECT_EQ(c.in_debt, i == 2 ? 1 : 0) << i;
    }
    rl_check_t c;
    EXPECT_FALSE(k.arrive(t, &c));
    EXPECT_EQ(c.decision.retry_after_ms, 201000);  // 200 owed, then 1 for this request
    EXPECT_FALSE(k.arrive(t + 200999, &c));
    EXPECT_TRUE(k.arrive(t + 201000, &c));
}

TEST(Charge, ZeroSpendsNothingAndTheReservationIsGivenBack)
{
    for (const char *alg : kCharged) {
        OneKey k(std::string(alg) + " limit=5 period=15m charge=$failed");
        for (int i = 0; i < 20; i++) {
            const rl_decision_t d = k.serve(kT0 + i, 0);
            ASSERT_TRUE(d.allowed) << alg << " " << i;
            EXPECT_EQ(d.remaining, 3u) << alg << " " << i;  // the reservation (a third of 5), while it runs
        }
        EXPECT_EQ(k.peek(kT0 + 20).look.remaining, 5u) << alg;
        // five failures, then even a success is refused
        for (int i = 0; i < 5; i++) {
            EXPECT_TRUE(k.serve(kT0 + 100 + i, 1).allowed) << alg << " " << i;
        }
        EXPECT_FALSE(k.serve(kT0 + 200, 0).allowed) << alg;
    }
}

TEST(Charge, TheDebtIsAtMostOneLimitBeyondAnEmptyBudget)
{
    for (const char *alg : kCharged) {
        OneKey k(std::string(alg) + " limit=10 period=10s");
        rl_check_t c;
        ASSERT_TRUE(k.arrive(kT0, &c));
        k.end(&c, kT0, 1000000);
        EXPECT_EQ(c.charged, 20u) << alg << " " << c.decision.remaining;  // a full budget and one limit of debt
        EXPECT_EQ(c.capped, 1) << alg;
        EXPECT_EQ(c.in_debt, 1) << alg;
        // refused for more than a period, back within two (and a tick)
        EXPECT_FALSE(k.arrive(kT0 + 10000, &c)) << alg;
        EXPECT_GE(c.decision.retry_after_ms, 1) << alg;
        EXPECT_LE(c.decision.retry_after_ms, 11001) << alg;
        EXPECT_TRUE(k.arrive(kT0 + 21001, &c)) << alg;
        // a second charge while in debt adds nothing beyond the bound
        OneKey q(std::string(alg) + " limit=10 period=10s");
        rl_check_t a, b;
        ASSERT_TRUE(q.arrive(kT0, &a));
        ASSERT_TRUE(q.arrive(kT0, &b));
        q.end(&a, kT0, 1000);
        q.end(&b, kT0, 1000);
        // the second's reservation is given back where the algorithm still
        // tells it apart (else it stays spent, and is not charged again)
        EXPECT_LE(a.charged + b.charged, 20u) << alg;
        EXPECT_GE(a.charged + b.charged, 20u - b.reserved) << alg;
        EXPECT_TRUE(q.arrive(kT0 + 21001, &c)) << alg;
    }
}

TEST(Charge, FixedWindowsCarryTheExcessIntoTheNextWindow)
{
    OneKey k("algorithm=fixed_window limit=10 period=10s cost=1");  // each reserves 1
    rl_check_t c;
    ASSERT_TRUE(k.arrive(kT0 + 9000, &c));
    k.end(&c, kT0 + 9000, 14);  // 10 in this window, 4 in the next
    EXPECT_FALSE(k.arrive(kT0 + 9500, &c));
    EXPECT_EQ(c.decision.retry_after_ms, 500);  // the next window has 6 left
    EXPECT_EQ(c.decision.reset_ms, 10500);      // back to full after the next
    for (int i = 0; i < 6; i++) {
        EXPECT_TRUE(k.arrive(kT0 + 10000, &c)) << i;
        EXPECT_EQ(c.decision.remaining, 5u - i);
    }
    EXPECT_FALSE(k.arrive(kT0 + 10000, &c));
    EXPECT_EQ(c.decision.retry_after_ms, 10000);
    EXPECT_TRUE(k.arrive(kT0 + 20000, &c));

    // a window owing its whole budget: refused until the one after
    OneKey q("algorithm=quota reset=daily limit=10");
    ASSERT_TRUE(q.arrive(kT0 + 1000, &c));
    q.end(&c, kT0 + 1000, 20);
    EXPECT_FALSE(q.arrive(kT0 + 86400000, &c));
    EXPECT_EQ(c.decision.retry_after_ms, 86400000);
    EXPECT_TRUE(q.arrive(kT0 + 2 * 86400000, &c));
}

TEST(Charge, SlidingAlgorithmsRepayBeyondTheWindowAtTheRate)
{
    for (const char *alg : {"algorithm=sliding_window buckets=10", "algorithm=sliding_log"}) {
        OneKey k(std::string(alg) + " limit=10 period=10s");
        rl_check_t c;
        ASSERT_TRUE(k.arrive(kT0, &c));
        k.end(&c, kT0, 15);  // 5 beyond the limit: half a period more
        EXPECT_FALSE(k.arrive(kT0 + 10000, &c)) << alg;
        EXPECT_FALSE(k.arrive(kT0 + 14999, &c)) << alg;
        EXPECT_TRUE(k.arrive(kT0 + 15000 + 1000, &c)) << alg;
    }
}

TEST(Charge, ARefusedRequestIsNeverCharged)
{
    OneKey k("algorithm=gcra limit=1 period=1h");
    rl_check_t a, b;
    ASSERT_TRUE(k.arrive(kT0, &a));
    ASSERT_FALSE(k.arrive(kT0, &b));
    const std::string before = k.state();
    k.end(&b, kT0, 100);
    EXPECT_EQ(b.charged, 0u);
    EXPECT_EQ(k.state(), before);
}

// Random traces, several requests in flight, charges from 0 to far past the
// bound: a refusal never changes the key's state, and whatever the
// charges, a key spends at most three limits in any period (its budget, one
// limit of debt, and a paced rule's refill), and on the long run no more
// than the rate.
TEST(Charge, RandomTracesKeepTheBounds)
{
    for (const char *alg : kCharged) {
        for (uint64_t seed = 1; seed <= 4; seed++) {
            std::mt19937_64 rng(seed);
            const uint32_t limit = 1 + (uint32_t) (rng() % 40);
            const int64_t W = 1000 * (int64_t) (1 + rng() % 20);
            // odd seeds reserve a third of the limit, even ones their cost
            OneKey k(std::string(alg) + " limit=" + std::to_string(limit) + " period=" + std::to_string(W) + "ms" +
                     (seed % 2 ? "" : " cost=1"));
            std::vector<std::pair<rl_check_t, int64_t>> flying;  // and when each ends
            std::map<int64_t, int64_t> spent;                    // units by time: a reservation when a request
                                                                 // arrives, the rest of its charge when it ends
            int64_t now = kT0 + (int64_t) (rng() % 100000);
            const int64_t start = now;
            for (int i = 0; i < 3000; i++) {
                now += rng() % 4 == 0 ? (int64_t) (rng() % (uint64_t) W) : (int64_t) (rng() % 50);
                // requests end in the order of their ends
                std::sort(flying.begin(), flying.end(),
                          [](const auto &a, const auto &b) { return a.second < b.second; });
                for (size_t j = 0; j < flying.size();) {
                    if (flying[j].second <= now) {
                        const uint64_t units = rng() % 8 == 0 ? rng() % (100 * (uint64_t) limit) : rng() % 4;
                        rl_check_t &c = flying[j].first;
                        k.end(&c, flying[j].second, units);
                        spent[flying[j].second] += (int64_t) c.charged - (int64_t) c.reserved;
                        flying.erase(flying.begin() + (long) j);
                    } else {
                        j++;
                    }
                }
                const std::string before = k.state();
                rl_check_t c;
                if (k.arrive(now, &c)) {
                    spent[now] += (int64_t) c.reserved;
                    flying.push_back({c, now + (int64_t) (rng() % (uint64_t) (2 * W))});
                } else {
                    ASSERT_EQ(k.state(), before) << alg << " seed " << seed << " at " << i;
                    ASSERT_GT(c.decision.retry_after_ms, 0);
                }
            }
            // any period: at most the budget, a limit of debt, and what
            // comes back meanwhile (a paced rule's limit)
            for (auto it = spent.begin(); it != spent.end(); ++it) {
                int64_t in = 0;
                for (auto j = it; j != spent.end() && j->first < it->first + W; ++j) {
                    in += j->second;
                }
                ASSERT_LE(in, 3 * (int64_t) limit) << alg << " seed " << seed << " from " << it->first - start;
            }
            int64_t total = 0;
            for (const auto &e : spent) {
                total += e.second;
            }
            const int64_t periods = (now - start) / W + 1;
            EXPECT_LE(total, (periods + 2) * (int64_t) limit) << alg << " seed " << seed;
        }
    }
}

// ---- bans --------------------------------------------------------------

TEST(Ban, ARefusedKeyStaysOutForTheBanWhateverItsBudget)
{
    for (const char *alg : {"algorithm=gcra", "algorithm=sliding_log", "algorithm=fixed_window",
                            "algorithm=leaky_bucket delay=4 max_delay=0", "algorithm=quota reset=daily"}) {
        const bool quota = std::string(alg).find("quota") != std::string::npos;
        OneKey k(std::string(alg) + " limit=5" + (quota ? "" : " period=15m") + " ban=1h cost=1");
        rl_check_t c;
        for (int i = 0; i < 5; i++) {
            ASSERT_TRUE(k.arrive(kT0 + i, &c)) << alg << " " << i;
            k.end(&c, kT0 + i, 1);
        }
        ASSERT_FALSE(k.arrive(kT0 + 10, &c)) << alg;  // the refusal that bans
        EXPECT_EQ(c.decision.banned_ms, 3600000) << alg;
        EXPECT_EQ(c.decision.retry_after_ms, quota ? 86399990 : 3600000) << alg;
        // refused while banned, though the window would admit: not extended
        for (int64_t at : {kT0 + 20, kT0 + 16 * 60000, kT0 + 3600009}) {
            ASSERT_FALSE(k.arrive(at, &c)) << alg << " at " << at - kT0;
            EXPECT_EQ(c.decision.banned_ms, kT0 + 3600010 - at) << alg;
            if (!quota) {  // a quota's day may end later than its ban
                EXPECT_EQ(c.decision.retry_after_ms, kT0 + 3600010 - at) << alg;
            }
            EXPECT_EQ(c.decision.remaining, 0u);
        }
        EXPECT_EQ(k.peek(kT0 + 20).banned_ms, 3599990) << alg;
        if (!quota) {
            EXPECT_TRUE(k.arrive(kT0 + 3600010, &c)) << alg;
        }
    }
}

TEST(Ban, AResetLiftsIt)
{
    OneKey k("limit=1 period=1h ban=1h cost=1");
    rl_check_t c;
    ASSERT_TRUE(k.arrive(kT0, &c));
    k.end(&c, kT0, 1);
    ASSERT_FALSE(k.arrive(kT0, &c));
    const int done = rl_table_reset(k.zone.mem, c.tag, kT0 + 1);
    EXPECT_EQ(done, RL_RESET_HELD | RL_RESET_UNBANNED);
    EXPECT_EQ(k.peek(kT0 + 1).banned_ms, 0);
    EXPECT_TRUE(k.arrive(kT0 + 2, &c));
    EXPECT_TABLE_VALID(k.zone.table());
}

TEST(Ban, OnlyTheRuleThatRefusesBansAndNotACostItCanNeverAdmit)
{
    OneKey k("limit=2 period=1h ban=1h");
    rl_check_t c;
    ASSERT_FALSE(k.arrive(kT0, &c, 3));  // never: no ban
    EXPECT_EQ(c.decision.never, 1);
    EXPECT_EQ(c.decision.banned_ms, 0);
    EXPECT_TRUE(k.arrive(kT0, &c));
    EXPECT_EQ(k.peek(kT0).banned_ms, 0);
}

// The login recipe: failures only, then a ban.
TEST(Ban, LoginFailuresThenABan)
{
    OneKey k("algorithm=sliding_log limit=5 period=15m ban=1h");
    for (int i = 0; i < 20; i++) {
        ASSERT_TRUE(k.serve(kT0 + i, 0).allowed) << i;  // successes cost nothing
    }
    for (int i = 0; i < 5; i++) {
        ASSERT_TRUE(k.serve(kT0 + 100 + i, 1).allowed) << i;
    }
    rl_check_t c;
    EXPECT_FALSE(k.arrive(kT0 + 200, &c));
    EXPECT_EQ(c.decision.banned_ms, 3600000);
    EXPECT_FALSE(k.arrive(kT0 + 200 + 15 * 60000, &c));  // the window has room again
    EXPECT_TRUE(k.arrive(kT0 + 200 + 3600000, &c));
}

namespace {

// A charge= rule counted in its zone, as nginx counts it.
struct Counted {
    rl_rule_t rule;
    TestZone zone;
    int slot;
    std::vector<std::string> keys;

    explicit Counted(const std::string &text)
        : rule(rule_of(text)), zone(1 << 20, {rule_of(text)}, kSecret), slot(rl_table_rule_slot(zone.mem, rule.name))
    {
        keys.reserve(1 << 16);  // checks point at these keys
    }

    // A request arriving: its check, decided (*status: the request's).
    rl_check_t arrive(const std::string &key, int64_t now, uint64_t cost = 1, int *status = nullptr)
    {
        keys.push_back(key);
        rl_check_t c = check_of(zone.mem, &rule, 42, keys.back(), cost, slot + 1);
        rl_request_t rq = hashed(request_of(&c, 1));
        rl_decide(&rq, now);
        if (status != nullptr) {
            *status = rq.status;
        }
        return c;
    }

    void end(rl_check_t &c, int64_t now, uint64_t units)
    {
        c.charge = units;
        end_request(&c, 1, now);
    }

    // What the key has left, looked at without spending.
    uint64_t left(const std::string &key, int64_t now)
    {
        rl_check_t c = check_of(zone.mem, &rule, 42, key, 0, slot + 1);
        hashed(request_of(&c, 1));
        rl_peek_t p;
        rl_table_peek(zone.mem, &rule, c.tag, 0, now, &p);
        return p.look.remaining;
    }

    // A key's ban, as the key API reads it (0: none).
    int64_t banned(const std::string &key, int64_t now)
    {
        rl_check_t c = check_of(zone.mem, &rule, 42, key, 1, slot + 1);
        hashed(request_of(&c, 1));
        rl_peek_t p;
        rl_table_peek(zone.mem, &rule, c.tag, 1, now, &p);
        return p.banned_ms;
    }

    // One request of `key` at a time, each charged `units` when it ends.
    void serial(const std::string &key, int n, uint64_t units, int64_t now)
    {
        for (int i = 0; i < n; i++) {
            rl_check_t c = arrive(key, now);
            if (c.decision.allowed) {
                end(c, now, units);
            }
        }
    }
};

}  // namespace

// 50 tokens a request, 100 an hour: a request in flight reserves a third
// of what a key can hold (34), at most what it has left, so three of a
// key's requests run at once (34 + 34 + 32) and the fourth is refused,
// told apart: only they refused it.  With cost= the request declares its
// worst case, and reserves that.
TEST(Reserve, RequestsInFlightReserveAThirdOfWhatAKeyHolds)
{
    Counted r("algorithm=gcra limit=100 period=1h charge=$t name=tok");
    std::vector<rl_check_t> flight;
    int status = 0;
    for (int i = 0; i < 5; i++) {
        flight.push_back(r.arrive("new", kT0, 1, &status));
    }
    EXPECT_EQ(flight[0].reserved, 34u);
    EXPECT_EQ(flight[0].decision.remaining, 66u);
    EXPECT_EQ(flight[1].reserved, 34u);
    EXPECT_EQ(flight[2].reserved, 32u) << "what was left";
    EXPECT_EQ(flight[2].decision.remaining, 0u);
    for (int i = 3; i < 5; i++) {
        EXPECT_FALSE(flight[i].decision.allowed) << i;
        EXPECT_EQ(flight[i].in_flight, 1) << i;
    }
    EXPECT_EQ(status, RL_STATUS_REJECTED_IN_FLIGHT);
    // each charge replaces its reservation: 150 spent of 100, 50 owed
    for (int i = 0; i < 3; i++) {
        r.end(flight[i], kT0 + 1, 50);
    }
    rl_check_t after = r.arrive("new", kT0 + 1, 1, &status);
    EXPECT_FALSE(after.decision.allowed);
    EXPECT_EQ(after.in_flight, 0) << "nothing in flight: the charges refuse it";
    EXPECT_EQ(status, RL_STATUS_REJECTED);

    // what is left bounds the reservation; the cost, when larger, wins
    rl_check_t spent = r.arrive("partial", kT0 + 2);
    r.end(spent, kT0 + 2, 80);
    rl_check_t rest = r.arrive("partial", kT0 + 2);
    EXPECT_TRUE(rest.decision.allowed);
    EXPECT_EQ(rest.reserved, 20u);
    EXPECT_EQ(r.arrive("big", kT0 + 2, 80).reserved, 80u);
    r.end(rest, kT0 + 2, 10);
    EXPECT_EQ(r.left("partial", kT0 + 2), 10u);

    // cost= declares the worst case: reserved as it is, four at once
    Counted declared("algorithm=gcra limit=100 period=1h cost=25 charge=$t name=max");
    for (int i = 0; i < 4; i++) {
        EXPECT_EQ(declared.arrive("k", kT0, 25).reserved, 25u) << i;
    }
    EXPECT_FALSE(declared.arrive("k", kT0, 25).decision.allowed);
    EXPECT_TABLE_VALID(r.zone.table());
}

// No charge settled before moves what a request reserves, by other keys or
// by the key itself, for every algorithm: 16 charges of 0 by other keys,
// or 16 one-token requests of the key, then 200 requests of one key at
// once, each charged 50 when they end, 100 an hour: at most 3 admitted;
// 16 charges of 100 by other keys, then a key with 99 left sends 3
// one-token requests at once: all 3 admitted.
TEST(Reserve, NoChargeSettledBeforeMovesTheReservation)
{
    for (const char *alg : kCharged) {
        const std::string name = alg;
        for (int poison = 0; poison < 3; poison++) {
            Counted r(name + " limit=100 period=1h charge=$t name=p");
            r.serial("honest", 10, 50, kT0);
            for (int i = 0; i < 16; i++) {
                r.serial(poison == 0   ? "throwaway" + std::to_string(i)
                         : poison == 1 ? "greedy"
                                       : "big" + std::to_string(i),
                         1,
                         poison == 0   ? 0
                         : poison == 1 ? 1
                                       : 100,
                         kT0);
            }
            if (poison < 2) {
                std::vector<rl_check_t> in;
                for (int i = 0; i < 200; i++) {
                    rl_check_t c = r.arrive("greedy", kT0 + 1);
                    if (c.decision.allowed) {
                        in.push_back(c);
                    } else {
                        EXPECT_EQ(c.in_flight, 1) << name << ": only those in flight refuse it";
                    }
                }
                EXPECT_GE(in.size(), 1u) << name;
                EXPECT_LE(in.size(), 3u) << name << " poison " << poison;
                for (rl_check_t &c : in) {
                    r.end(c, kT0 + 2, 50);
                }
            } else {
                r.serial("modest", 1, 1, kT0);
                EXPECT_EQ(r.left("modest", kT0), 99u) << name;
                std::vector<rl_check_t> in;
                for (int i = 0; i < 3; i++) {
                    in.push_back(r.arrive("modest", kT0 + 1));
                    EXPECT_TRUE(in.back().decision.allowed) << name << " request " << i;
                }
                for (rl_check_t &c : in) {
                    r.end(c, kT0 + 2, 1);
                }
                EXPECT_EQ(r.left("modest", kT0 + 2), 96u) << name;
            }
            EXPECT_TABLE_VALID(r.zone.table());
        }
    }
}

// An adversary that tries to be served as much as it can: it moves the
// charges (other keys' and its own: 0, 1, 100, anything), keeps requests in
// flight, ends them in any order with any charge, lets time pass, then
// sends 200 requests at once whose upstream charges 50 each, ending some
// of them as it goes.  Whatever it did, for every algorithm: a key never
// has more than ceil(left / share) <= 3 requests in flight; a refusal is
// told apart (in_flight) exactly when what the key has left plus what its
// requests in flight reserved would admit it, and then starts no ban; and
// the 200 are served at most 3 times.
TEST(Reserve, ARandomizedAdversaryIsServedAtMostThreeAtOnce)
{
    std::mt19937_64 g(50);
    for (const char *alg : kCharged) {
        const std::string name = alg;
        Counted r(name + " limit=100 period=1h charge=$t ban=1h name=adv");
        int64_t now = kT0;
        size_t most = 0, told = 0, rounds_served = 0;
        for (int round = 0; round < 120; round++) {
            const std::string key = "adv" + std::to_string(round % 7);
            std::vector<rl_check_t> mine;
            uint64_t held = 0;
            auto end_one = [&](size_t k, uint64_t units) {
                held -= mine[k].reserved;
                r.end(mine[k], now, units);
                mine.erase(mine.begin() + (long) k);
            };
            auto send = [&]() {
                const uint64_t left = r.left(key, now);
                rl_check_t c = r.arrive(key, now);
                if (c.decision.allowed) {
                    held += c.reserved;
                    mine.push_back(c);
                    most = std::max(most, mine.size());
                    EXPECT_LE(mine.size(), 3u) << name << " round " << round;
                } else if (!c.decision.never && r.banned(key, now) == 0 && c.decision.banned_ms == 0) {
                    // a refusal of a key not banned: told apart exactly when
                    // its requests in flight alone refused it
                    const bool flight = held > 0 && left + held >= 1;
                    EXPECT_EQ(c.in_flight, flight ? 1 : 0) << name << " round " << round << " left " << left;
                    EXPECT_EQ(c.banning, flight ? 0 : 1) << name << " round " << round;
                    told += flight;
                }
                return c.decision.allowed != 0;
            };
            // the charges move: other keys, and the key itself
            for (int i = 0, n = (int) (g() % 24); i < n; i++) {
                const uint64_t units[] = {0, 1, 100, g() % 300};
                r.serial(g() % 2 ? key : "other" + std::to_string(g() % 1000), 1, units[g() % 4], now);
            }
            for (int i = 0, n = (int) (g() % 12); i < n; i++) {
                if (g() % 2 || mine.empty()) {
                    send();
                } else {
                    const uint64_t units[] = {0, 1, 50, 100};
                    end_one(g() % mine.size(), units[g() % 4]);
                }
            }
            while (!mine.empty()) {
                end_one(0, g() % 3);
            }
            now += (int64_t) (g() % 4) * 600000;  // sometimes a while
            while (r.banned(key, now) != 0 || r.left(key, now) < 100) {
                now += 3600000;  // back to full budget, the ban over
            }
            // 200 at once, each charged 50, some ended as the rest arrive
            const uint64_t full = r.left(key, now);
            size_t served = 0;
            for (int i = 0; i < 200; i++) {
                served += send();
                if (!mine.empty() && g() % 16 == 0) {
                    end_one(g() % mine.size(), 50);
                }
            }
            EXPECT_LE(served, 3u) << name << " round " << round;
            EXPECT_GE(served, 1u) << name << " round " << round << ", " << full << " left";
            rounds_served += served;
            while (!mine.empty()) {
                end_one(0, 50);
            }
            now += 2 * 3600000 + 1;
        }
        EXPECT_EQ(most, 3u) << name << ": three at once, no more";
        EXPECT_GT(told, 0u) << name;
        EXPECT_GT(rounds_served, 120u * 2) << name;
        EXPECT_TABLE_VALID(r.zone.table());
    }
}

// A refusal that only reservations in flight caused starts no ban; one of
// a key whose settled charges spent its budget does.
TEST(Ban, NoneFromARefusalTheSettledBudgetWouldAdmit)
{
    Counted r("algorithm=sliding_log limit=100 period=1h charge=$t ban=1h name=b");
    for (int i = 0; i < 16; i++) {
        r.serial("big" + std::to_string(i), 1, 100, kT0);  // whatever others charged
    }
    std::vector<rl_check_t> in;
    int status = 0;
    for (int i = 0; i < 4; i++) {
        in.push_back(r.arrive("innocent", kT0 + 1, 1, &status));
    }
    EXPECT_TRUE(in[2].decision.allowed);
    EXPECT_FALSE(in[3].decision.allowed);
    EXPECT_EQ(in[3].in_flight, 1);
    EXPECT_EQ(in[3].banning, 0);
    EXPECT_EQ(in[3].decision.banned_ms, 0);
    EXPECT_EQ(status, RL_STATUS_REJECTED_IN_FLIGHT);
    EXPECT_EQ(r.banned("innocent", kT0 + 1), 0);
    for (int i = 0; i < 3; i++) {
        r.end(in[i], kT0 + 2, 1);
    }
    EXPECT_TRUE(r.arrive("innocent", kT0 + 3).decision.allowed) << "served: no ban";
    rl_rule_stats_t st[RL_RULE_STATS_MAX];
    rl_table_rule_stats(r.zone.mem, st, RL_RULE_STATS_MAX);
    EXPECT_EQ(st[r.slot].bans, 0u);

    // its budget spent by what it was charged: refused, and banned
    r.serial("spender", 1, 100, kT0 + 4);
    rl_check_t refused = r.arrive("spender", kT0 + 5, 1, &status);
    EXPECT_FALSE(refused.decision.allowed);
    EXPECT_EQ(refused.in_flight, 0);
    EXPECT_EQ(refused.banning, 1);
    EXPECT_EQ(status, RL_STATUS_REJECTED);
    EXPECT_EQ(r.banned("spender", kT0 + 6), 3600000 - 1);
}

// A request its client abandoned keeps its reservation unless the rule
// says abandoned=charge; a request of a rule without charge= has none to
// evaluate.  (cost=1: a guess is charged one at most, and reserves that;
// without it each would reserve 2, a third of 5.)
TEST(Reserve, AnAbandonedRequestKeepsWhatItReserved)
{
    Counted keep("algorithm=sliding_log limit=5 period=15m cost=1 charge=$failed name=keep");
    Counted give("algorithm=sliding_log limit=5 period=15m cost=1 charge=$failed abandoned=charge name=give");
    for (int i = 0; i < 5; i++) {
        rl_check_t k = keep.arrive("guesser", kT0 + i);
        rl_check_t g = give.arrive("guesser", kT0 + i);
        EXPECT_EQ(rl_check_charge_wanted(&k, 1), 0);
        EXPECT_EQ(rl_check_charge_wanted(&k, 0), 1);
        EXPECT_EQ(rl_check_charge_wanted(&g, 1), 1);
        k.charge = RL_NO_CHARGE;  // as the glue does for an abandoned request
        end_request(&k, 1, kT0 + i);
        give.end(g, kT0 + i, 0);  // $failed of a 499: 0
    }
    EXPECT_FALSE(keep.arrive("guesser", kT0 + 10).decision.allowed) << "five abandoned guesses spent the five";
    EXPECT_TRUE(give.arrive("guesser", kT0 + 10).decision.allowed);
    rl_rule_t plain = rule_of("limit=5");
    rl_check_t c = check_of(keep.zone.mem, &plain, 7, keep.keys[0], 1);
    decide(&c, 1, RL_COMBINE_ALL, kT0);
    EXPECT_EQ(rl_check_charge_wanted(&c, 0), 0);
}

// A dry run stores no ban: its refusal says what the ban would be, and is
// counted apart from the bans started.
TEST(Ban, ADryRunStartsNone)
{
    rl_rule_t rule = rule_of("limit=1 period=1h ban=1h name=b");
    TestZone zone(1 << 20, {rule}, kSecret);
    const int slot = rl_table_rule_slot(zone.mem, "b");
    const std::string key = "k";
    auto request = [&](int dry, int64_t now) {
        rl_check_t c = check_of(zone.mem, &rule, 9, key, 1, slot + 1);
        rl_request_t rq = hashed(request_of(&c, 1));
        rq.dry_run = dry;
        rl_decide(&rq, now);
        return c;
    };
    EXPECT_TRUE(request(1, kT0).decision.allowed);
    rl_check_t refused = request(1, kT0 + 1);
    EXPECT_FALSE(refused.decision.allowed);
    EXPECT_EQ(refused.banning, 1);
    EXPECT_EQ(refused.decision.banned_ms, 3600000) << "what the ban would be";
    rl_peek_t p;
    rl_table_peek(zone.mem, &rule, refused.tag, 1, kT0 + 2, &p);
    EXPECT_EQ(p.banned_ms, 0) << "none stored";
    rl_rule_stats_t st[RL_RULE_STATS_MAX];
    rl_table_rule_stats(zone.mem, st, RL_RULE_STATS_MAX);
    EXPECT_EQ(st[slot].dry_run_bans, 1u);
    EXPECT_EQ(st[slot].bans, 0u);
    rl_check_t real = request(0, kT0 + 2);
    EXPECT_EQ(real.banning, 1);
    rl_table_peek(zone.mem, &rule, real.tag, 1, kT0 + 3, &p);
    EXPECT_EQ(p.banned_ms, 3600000 - 1);
    rl_table_rule_stats(zone.mem, st, RL_RULE_STATS_MAX);
    EXPECT_EQ(st[slot].bans, 1u);
    EXPECT_EQ(request(0, kT0 + 4).banning, 0) << "refused while banned: no new ban";
}
