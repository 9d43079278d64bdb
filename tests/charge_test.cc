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

    explicit OneKey(const std::string &text, const std::string &k = "client")
        : rule(rule_of(charged(text))), zone(1 << 20, {rule_of(charged(text))}, kSecret), key(k)
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
            EXPECT_EQ(d.remaining, 4u) << alg << " " << i;  // the reservation, while it runs
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
        EXPECT_GE(a.charged + b.charged, 19u) << alg;
        EXPECT_TRUE(q.arrive(kT0 + 21001, &c)) << alg;
    }
}

TEST(Charge, FixedWindowsCarryTheExcessIntoTheNextWindow)
{
    OneKey k("algorithm=fixed_window limit=10 period=10s");
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
            OneKey k(std::string(alg) + " limit=" + std::to_string(limit) + " period=" + std::to_string(W) + "ms");
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
                        spent[flying[j].second] += (int64_t) c.charged - (int64_t) c.cost;
                        flying.erase(flying.begin() + (long) j);
                    } else {
                        j++;
                    }
                }
                const std::string before = k.state();
                rl_check_t c;
                if (k.arrive(now, &c)) {
                    spent[now] += (int64_t) c.cost;
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
        OneKey k(std::string(alg) + " limit=5" + (quota ? "" : " period=15m") + " ban=1h");
        rl_check_t c;
        for (int i = 0; i < 5; i++) {
            ASSERT_TRUE(k.arrive(kT0 + i, &c)) << alg << " " << i;
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
    OneKey k("limit=1 period=1h ban=1h");
    rl_check_t c;
    ASSERT_TRUE(k.arrive(kT0, &c));
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

// A charge= rule counted in its zone, as nginx counts it: its requests
// reserve the rule's estimate of a charge.
struct Counted {
    rl_rule_t rule;
    TestZone zone;
    int slot;
    std::vector<std::string> keys;

    explicit Counted(const std::string &text)
        : rule(rule_of(text)), zone(1 << 20, {rule_of(text)}, kSecret), slot(rl_table_rule_slot(zone.mem, rule.name))
    {
        keys.reserve(4096);  // checks point at these keys
    }

    rl_check_t arrive(const std::string &key, int64_t now, uint64_t cost = 1)
    {
        keys.push_back(key);
        rl_check_t c = check_of(zone.mem, &rule, 42, keys.back(), cost, slot + 1);
        decide(&c, 1, RL_COMBINE_ALL, now);
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

    uint64_t estimate()
    {
        rl_rule_stats_t st[RL_RULE_STATS_MAX];
        const size_t n = rl_table_rule_stats(zone.mem, st, RL_RULE_STATS_MAX);
        return n > (size_t) slot ? st[slot].estimate : 0;
    }
};

}  // namespace

// 50 tokens a request, 100 an hour: requests of a new key in flight at
// once reserve 50 each once the rule has seen charges of 50, so two run
// and the third is refused; before any charge, each reserves its cost.
TEST(Reserve, RequestsInFlightReserveTheRulesEstimateWithinWhatIsLeft)
{
    Counted r("algorithm=gcra limit=100 period=1h charge=$t name=tok");
    rl_check_t first = r.arrive("fresh", kT0);
    EXPECT_EQ(first.reserved, 1u) << "nothing learned: the cost";
    r.end(first, kT0, 50);
    EXPECT_EQ(r.estimate(), 50u);
    for (int i = 0; i < 9; i++) {
        rl_check_t c = r.arrive("warm" + std::to_string(i), kT0);
        r.end(c, kT0, 50);
    }
    std::vector<rl_check_t> flight;
    for (int i = 0; i < 5; i++) {
        flight.push_back(r.arrive("new", kT0 + 1));
    }
    EXPECT_EQ(flight[0].reserved, 50u);
    EXPECT_EQ(flight[0].decision.remaining, 50u);
    EXPECT_EQ(flight[1].reserved, 50u);
    EXPECT_EQ(flight[1].decision.remaining, 0u);
    for (int i = 2; i < 5; i++) {
        EXPECT_FALSE(flight[i].decision.allowed) << i;
    }
    // what is left bounds the reservation; the cost, when larger, wins
    rl_check_t spent = r.arrive("partial", kT0 + 2);
    r.end(spent, kT0 + 2, 70);
    rl_check_t rest = r.arrive("partial", kT0 + 2);
    EXPECT_TRUE(rest.decision.allowed);
    EXPECT_EQ(rest.reserved, 30u);
    rl_check_t big = r.arrive("big", kT0 + 2, 80);
    EXPECT_EQ(big.reserved, 80u);
    // the charge replaces the reservation: 30 reserved, 10 charged
    r.end(rest, kT0 + 2, 10);
    EXPECT_EQ(r.left("partial", kT0 + 2), 20u);
    // a request of cost 0 is charged too when it ends: it reserves as well
    EXPECT_EQ(r.arrive("partial", kT0 + 2, 0).reserved, 20u);
    EXPECT_TABLE_VALID(r.zone.table());
}

// The estimate is the largest charge of the last two epochs of 8: a large
// charge counts until the epoch after its own is over (8 to 16 charges
// later); a charge counts at most as the capacity.
TEST(Reserve, TheEstimateIsTheLargestOfTheLast8To16Charges)
{
    Counted r("algorithm=fixed_window limit=1000 period=1h charge=$t name=w");
    int64_t now = kT0;
    auto charge = [&](uint64_t units) {
        rl_check_t c = r.arrive("k" + std::to_string(now), now);
        r.end(c, now, units);
        now++;
    };
    charge(400);  // the first of its epoch: counts for 15 more
    for (int i = 0; i < 15; i++) {
        charge(10);
    }
    EXPECT_EQ(r.estimate(), 400u);
    charge(10);
    EXPECT_EQ(r.estimate(), 10u);
    for (int i = 0; i < 6; i++) {
        charge(10);
    }
    charge(300);  // the last of its epoch: counts for 8 more
    for (int i = 0; i < 8; i++) {
        charge(10);
    }
    EXPECT_EQ(r.estimate(), 300u);
    charge(10);
    EXPECT_EQ(r.estimate(), 10u);
    charge(5000);  // beyond the limit: counts as the limit
    EXPECT_EQ(r.estimate(), 1000u);
}

// Whatever the charges and the order requests end in, what a key's
// requests in flight together spend beyond what it had left is at most the
// last admitted one's charge plus what charges above the estimate exceed
// it: random bursts of requests of fresh keys, every algorithm with charge=.
TEST(Reserve, ParallelRequestsOverrunAtMostTheBound)
{
    std::mt19937_64 g(11);
    for (const char *alg : kCharged) {
        Counted r(std::string(alg) + " limit=100 period=1h charge=$t name=b");
        const std::string name = alg;
        int64_t now = kT0;
        for (int round = 0; round < 200; round++) {
            const uint64_t typical = 1 + g() % 60;
            // the rule's recent charges
            for (int i = 0; i < 2 * RL_CHARGES_EPOCH; i++) {
                rl_check_t c = r.arrive("w" + std::to_string(round) + "_" + std::to_string(i), now);
                r.end(c, now, typical);
            }
            const uint64_t estimate = r.estimate();
            const std::string key = "burst" + std::to_string(round);
            const uint64_t left = r.left(key, now);
            std::vector<rl_check_t> in;
            for (int i = 0; i < 30; i++) {
                rl_check_t c = r.arrive(key, now);
                if (c.decision.allowed) {
                    in.push_back(c);
                }
            }
            ASSERT_FALSE(in.empty()) << name;
            uint64_t reserved = 0, spent = 0, above = 0;
            std::shuffle(in.begin(), in.end(), g);
            const uint64_t last = in.size();
            for (rl_check_t &c : in) {
                reserved += c.reserved;
                const uint64_t units = g() % 8 == 0 ? typical + g() % 40 : g() % (typical + 1);
                above += units > estimate ? units - estimate : 0;
                spent += units;
                r.end(c, now, units);
            }
            EXPECT_LE(reserved, left) << name << " round " << round;
            EXPECT_LE(in.size(), left / std::max<uint64_t>(estimate, 1) + 1) << name << " round " << round;
            const uint64_t most = typical + 40;  // any one charge
            EXPECT_LE(spent, left + most + above) << name << " round " << round << ", " << last << " in flight";
            now += 3600000;  // every key full again
        }
        EXPECT_TABLE_VALID(r.zone.table());
    }
}

// A request its client abandoned keeps its reservation unless the rule
// says abandoned=charge; a request of a rule without charge= has none to
// evaluate.
TEST(Reserve, AnAbandonedRequestKeepsWhatItReserved)
{
    Counted keep("algorithm=sliding_log limit=5 period=15m charge=$failed name=keep");
    Counted give("algorithm=sliding_log limit=5 period=15m charge=$failed abandoned=charge name=give");
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
