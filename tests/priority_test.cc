// Priority classes of a rule of requests in flight, through the core as
// nginx uses it: which class is refused and why, the shares kept,
// borrowing, the queue's order by class then arrival.
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "helpers.h"

namespace {

const uint8_t kSecret[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 7, 6, 5, 4, 3, 2};

std::set<uint32_t> g_dead;
int alive(uint32_t pid)
{
    return g_dead.count(pid) ? 0 : 1;
}

std::string parse_error(const std::string &text)
{
    rl_rule_t r;
    rl_classes_t k;
    char err[RL_ERR_MAX] = "";
    if (rl_rule_parse_classes(&r, name_room(), &k, text.c_str(), err, sizeof(err)) == RL_OK) {
        return "OK";
    }
    return err;
}

// A zone with one rule with classes.
struct Zone {
    rl_classes_t classes;
    rl_rule_t rule;
    TestZone zone;

    explicit Zone(const std::string &text)
        : rule(parsed(text, &classes)), zone(1 << 20, std::vector<rl_rule_t>{rule}, kSecret)
    {
    }
    Zone(const Zone &) = delete;  // its rule points into it

    static rl_rule_t parsed(const std::string &text, rl_classes_t *k)
    {
        rl_rule_t r;
        char err[RL_ERR_MAX];
        if (rl_rule_parse_classes(&r, name_room(), k, text.c_str(), err, sizeof(err)) != RL_OK) {
            ADD_FAILURE() << "rule \"" << text << "\": " << err;
        }
        return r;
    }
    uint32_t klass(const std::string &name) const { return rl_class_of(&rule, name.data(), name.size()); }
};

// A request of the key "k" of a class, held by a process.
struct Request {
    std::string key = "k";
    rl_check_t check;
    rl_request_t rq;

    Request(Zone &z, const std::string &klass, uint32_t holder = 10)
    {
        check = check_of(z.zone.mem, &z.rule, 100, key, 1, 1 + rl_table_rule_slot(z.zone.mem, z.rule.name));
        rq = hashed(request_of(&check, 1, RL_COMBINE_ALL));
        rq.holder = holder;
        rq.alive = alive;
        check.klass = z.klass(klass);
    }
    Request(const Request &) = delete;  // its check is in it

    int decide(int64_t now, bool last = false)
    {
        rq.last = last;
        return rl_decide(&rq, now);
    }
    int end(int64_t now) { return rl_request_end(&rq, now); }
    const char *shed() const { return rl_shed_name(check.shed); }
};

// n requests of a class decided at now: how many were admitted.
int admit(Zone &z, std::deque<Request> &held, const std::string &klass, int n, int64_t now)
{
    int passed = 0;
    for (int i = 0; i < n; i++) {
        held.emplace_back(z, klass);
        passed += held.back().decide(now) == RL_VERDICT_PASSED;
    }
    return passed;
}

// n more requests (Request or Tenant, made of args) decided at now, each
// with the verdict expected.
template <class R, class... Args>
void fill(std::deque<R> &into, int n, int64_t now, int verdict, Zone &z, const Args &...args)
{
    for (int i = 0; i < n; i++) {
        into.emplace_back(z, args...);
        EXPECT_EQ(into.back().decide(now), verdict) << i;
    }
}

}  // namespace

TEST(Priority, RuleParameters)
{
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 priority=$c classes=critical:20%,standard,best_effort"),
              "OK");
    EXPECT_EQ(parse_error("algorithm=adaptive limit=100 priority=$c classes=a,b class_default=a"), "OK");
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 classes=a,b"),
              "\"classes=\" applies with priority=$variable only: the variable names each request's class");
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 priority=$c"),
              "missing \"classes=\" for priority=: the classes, highest first, each with the share of the slots "
              "kept for it if any, like classes=critical:20%,standard,best_effort");
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 priority=critical classes=critical"),
              "invalid \"priority=critical\": expected a $variable whose value names a request's class, like "
              "priority=$request_class");
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 priority=$c classes=a:20,b"),
              "invalid \"classes=a:20,b\": the share of class \"a\" is \"20\": expected a percentage from 1% to "
              "100% of the key's slots, like a:20%");
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 priority=$c classes=a:0%,b"),
              "invalid \"classes=a:0%,b\": the share of class \"a\" is \"0%\": expected a percentage from 1% to "
              "100% of the key's slots, like a:20%");
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 priority=$c classes=a:60%,b:50%"),
              "invalid \"classes=a:60%,b:50%\": the shares add up to 110%: at most 100% of the key's slots can be "
              "kept");
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 priority=$c classes=a,b,a"),
              "invalid \"classes=a,b,a\": class \"a\" is named twice");
    EXPECT_NE(
        parse_error("algorithm=concurrency limit=10 priority=$c classes=a,,b").find("a class \"\" is not 1 to 31"),
        std::string::npos);
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 priority=$c classes=a,b,c,d,e,f,g,h,i"),
              "invalid \"classes=a,b,c,d,e,f,g,h,i\": at most 8 classes");
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 priority=$c classes=a,b class_default=z"),
              "invalid \"class_default=z\": expected a class of classes=: a, b");
    EXPECT_EQ(parse_error("limit=10 priority=$c classes=a,b"),
              "\"priority=\" does not apply to algorithm=gcra: priority is for concurrency and adaptive");
    // without room for classes (rl_rule_parse): refused, never ignored
    rl_rule_t r;
    char err[RL_ERR_MAX];
    EXPECT_EQ(rl_rule_parse(&r, name_room(), "algorithm=concurrency limit=1 priority=$c classes=a", err, sizeof(err)),
              RL_ERROR);

    // a Redis zone refuses them; a rule without stays as it was
    Zone z("algorithm=concurrency limit=10 priority=$c classes=critical:20%,standard,best_effort");
    EXPECT_EQ(rl_redis_rule_ok(&z.rule, err, sizeof(err)), RL_ERROR);
    EXPECT_NE(std::string(err).find("\"priority=\" does not apply in a Redis zone"), std::string::npos) << err;
    Zone plain("algorithm=concurrency limit=10");
    EXPECT_EQ(plain.rule.classes, nullptr);
    EXPECT_EQ(rl_redis_rule_ok(&plain.rule, err, sizeof(err)), RL_OK) << err;
}

TEST(Priority, AValueNamingNoClassIsTheDefaultOrTheLowest)
{
    Zone z("algorithm=concurrency limit=10 priority=$c classes=critical,standard,best_effort");
    EXPECT_EQ(z.klass("critical"), 0u);
    EXPECT_EQ(z.klass("standard"), 1u);
    EXPECT_EQ(z.klass("best_effort"), 2u);
    EXPECT_EQ(z.klass(""), 2u);
    EXPECT_EQ(z.klass("Critical"), 2u);  // exactly as written
    EXPECT_EQ(z.klass(std::string("critical\0", 9)), 2u);
    EXPECT_EQ(z.klass(std::string(5000, 'a')), 2u);
    Zone d("algorithm=concurrency limit=10 priority=$c classes=critical,standard,best_effort class_default=standard");
    EXPECT_EQ(d.klass("bogus"), 1u);
    EXPECT_EQ(d.klass(""), 1u);
    EXPECT_STREQ(rl_class_name(&d.rule, 0), "critical");
    EXPECT_STREQ(rl_class_name(&d.rule, 9), "?");
}

TEST(Priority, AShareIsKeptFromOtherClassesAndTheRestIsBorrowed)
{
    // 10 slots, 3 kept for critical: best effort takes 7, the 8th is shed
    // for critical's share; critical then takes its 3, and no more
    Zone z("algorithm=concurrency limit=10 priority=$c classes=critical:30%,best_effort name=p");
    std::deque<Request> held;
    EXPECT_EQ(admit(z, held, "best_effort", 7, kT0), 7);
    Request be(z, "best_effort");
    EXPECT_EQ(be.decide(kT0), RL_VERDICT_REJECTED);
    EXPECT_STREQ(be.shed(), "share");
    EXPECT_EQ(admit(z, held, "critical", 3, kT0), 3);
    Request crit(z, "critical");
    EXPECT_EQ(crit.decide(kT0), RL_VERDICT_REJECTED);
    EXPECT_STREQ(crit.shed(), "full");
    rl_peek_t pk;
    rl_table_peek(z.zone.mem, &z.rule, crit.check.tag, 1, kT0, &pk);
    EXPECT_EQ(pk.class_in_flight[0], 3u);
    EXPECT_EQ(pk.class_in_flight[1], 7u);
    EXPECT_EQ(pk.class_kept[0], 3u);
    EXPECT_EQ(pk.class_kept[1], 0u);

    // critical alone borrows every slot best effort (no share) leaves
    Zone alone("algorithm=concurrency limit=10 priority=$c classes=critical:30%,best_effort name=q");
    std::deque<Request> h2;
    EXPECT_EQ(admit(alone, h2, "critical", 11, kT0), 10);
    EXPECT_STREQ(h2.back().shed(), "full");
    // best effort cannot take critical's slots back when one frees: the
    // critical holding fewer than its 3 keeps the freed one
    for (int i = 0; i < 8; i++) {
        h2[(size_t) i].end(kT0 + 1);
    }
    Request be2(alone, "best_effort");
    EXPECT_EQ(be2.decide(kT0 + 1), RL_VERDICT_PASSED);  // 2 critical held: 1 kept, 8 free
    EXPECT_EQ(be2.check.decision.remaining, 6u);

    // both with a share: critical alone leaves best effort's 2 of 10
    Zone both("algorithm=concurrency limit=10 priority=$c classes=critical:30%,best_effort:20% name=r");
    std::deque<Request> h3;
    EXPECT_EQ(admit(both, h3, "critical", 10, kT0), 8);
    EXPECT_STREQ(h3.back().shed(), "share");
    EXPECT_EQ(admit(both, h3, "best_effort", 3, kT0), 2);
    EXPECT_STREQ(h3.back().shed(), "full");
    for (auto &r : h3) {
        r.end(kT0 + 2);
    }
    rl_peek_t p;
    rl_table_peek(both.zone.mem, &both.rule, h3[0].check.tag, 1, kT0 + 2, &p);
    EXPECT_EQ(p.in_flight, 0u);
    EXPECT_TABLE_VALID(both.zone.table());
}

TEST(Priority, TheQueueServesHigherClassesFirstThenByArrival)
{
    Zone z("algorithm=concurrency limit=1 max_wait=5s priority=$c classes=critical,standard,best_effort");
    Request a(z, "standard"), be1(z, "best_effort"), std1(z, "standard"), crit(z, "critical"), be2(z, "best_effort"),
        std2(z, "standard");
    EXPECT_EQ(a.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(be1.decide(kT0 + 1), RL_VERDICT_QUEUED);
    EXPECT_STREQ(be1.shed(), "full");
    EXPECT_EQ(std1.decide(kT0 + 2), RL_VERDICT_QUEUED);
    EXPECT_EQ(crit.decide(kT0 + 3), RL_VERDICT_QUEUED);
    EXPECT_EQ(be2.decide(kT0 + 4), RL_VERDICT_QUEUED);
    EXPECT_EQ(std2.decide(kT0 + 5), RL_VERDICT_QUEUED);
    a.end(kT0 + 6);
    // the freed slot: critical's, though it came third; the others wait on,
    // whatever order they are decided again in
    EXPECT_EQ(be1.decide(kT0 + 6), RL_VERDICT_QUEUED);
    EXPECT_STREQ(be1.shed(), "queue");
    EXPECT_EQ(std1.decide(kT0 + 6), RL_VERDICT_QUEUED);
    EXPECT_EQ(crit.decide(kT0 + 6), RL_VERDICT_PASSED);
    crit.end(kT0 + 7);
    EXPECT_EQ(std2.decide(kT0 + 7), RL_VERDICT_QUEUED);  // behind std1
    EXPECT_EQ(be1.decide(kT0 + 7), RL_VERDICT_QUEUED);
    EXPECT_EQ(std1.decide(kT0 + 7), RL_VERDICT_PASSED);
    std1.end(kT0 + 8);
    EXPECT_EQ(be1.decide(kT0 + 8), RL_VERDICT_QUEUED);
    EXPECT_EQ(std2.decide(kT0 + 8), RL_VERDICT_PASSED);
    std2.end(kT0 + 9);
    EXPECT_EQ(be2.decide(kT0 + 9), RL_VERDICT_QUEUED);  // behind be1
    EXPECT_EQ(be1.decide(kT0 + 9), RL_VERDICT_PASSED);
    // max_wait over: refused, and said so
    EXPECT_EQ(be2.decide(kT0 + 5004, true), RL_VERDICT_REJECTED);
    EXPECT_STREQ(be2.shed(), "waited");
    EXPECT_EQ(be2.check.ticket, 0u);
    be1.end(kT0 + 5005);
    EXPECT_TABLE_VALID(z.zone.table());
}

TEST(Priority, AFullQueueGivesTheLatestLowestPlaceToAHigherClass)
{
    // limit=1: a queue of 16 places
    Zone z("algorithm=concurrency limit=1 max_wait=5s priority=$c classes=critical,best_effort");
    Request a(z, "critical");
    EXPECT_EQ(a.decide(kT0), RL_VERDICT_PASSED);
    std::deque<Request> waiting;
    fill(waiting, 16, kT0 + 1, RL_VERDICT_QUEUED, z, "best_effort");
    Request more(z, "best_effort");
    EXPECT_EQ(more.decide(kT0 + 2), RL_VERDICT_REJECTED);  // no room, none lower
    EXPECT_STREQ(more.shed(), "full");
    Request crit(z, "critical");
    EXPECT_EQ(crit.decide(kT0 + 2), RL_VERDICT_QUEUED);
    // the latest best effort lost its place: decided again, it is refused
    EXPECT_EQ(waiting.back().decide(kT0 + 3), RL_VERDICT_REJECTED);
    EXPECT_EQ(waiting.front().decide(kT0 + 3), RL_VERDICT_QUEUED);
    a.end(kT0 + 4);
    EXPECT_EQ(waiting.front().decide(kT0 + 4), RL_VERDICT_QUEUED);
    EXPECT_EQ(crit.decide(kT0 + 4), RL_VERDICT_PASSED);
    rl_peek_t p;
    rl_table_peek(z.zone.mem, &z.rule, crit.check.tag, 1, kT0 + 4, &p);
    EXPECT_EQ(p.in_flight, 1u);
    EXPECT_EQ(p.waiting, 15u);
}

TEST(Priority, AWaiterOfAHigherClassNeverBlocksALowerClassFromItsShare)
{
    // 4 slots, 2 kept for best effort: critical holds 2 and waits for more;
    // best effort's kept slots are not critical's to wait for
    Zone z("algorithm=concurrency limit=4 max_wait=5s priority=$c classes=critical,best_effort:50%");
    std::deque<Request> held;
    EXPECT_EQ(admit(z, held, "critical", 2, kT0), 2);
    Request cw(z, "critical");
    EXPECT_EQ(cw.decide(kT0 + 1), RL_VERDICT_QUEUED);
    EXPECT_STREQ(cw.shed(), "share");
    Request be(z, "best_effort"), be2(z, "best_effort"), be3(z, "best_effort");
    EXPECT_EQ(be.decide(kT0 + 2), RL_VERDICT_PASSED);
    EXPECT_EQ(be2.decide(kT0 + 2), RL_VERDICT_PASSED);
    EXPECT_EQ(be3.decide(kT0 + 2), RL_VERDICT_QUEUED);
    // a critical slot freed: the critical waiter's, before best effort's
    held[0].end(kT0 + 3);
    EXPECT_EQ(be3.decide(kT0 + 3), RL_VERDICT_QUEUED);
    EXPECT_EQ(cw.decide(kT0 + 3), RL_VERDICT_PASSED);
    // a best effort slot freed, critical waiting: the share holds it for
    // best effort (1 held of 2 kept)
    Request cw2(z, "critical");
    EXPECT_EQ(cw2.decide(kT0 + 4), RL_VERDICT_QUEUED);
    be.end(kT0 + 5);
    EXPECT_EQ(cw2.decide(kT0 + 5), RL_VERDICT_QUEUED);
    EXPECT_EQ(be3.decide(kT0 + 5), RL_VERDICT_PASSED);
}

TEST(Priority, ADeadHoldersSlotsComeBackToTheirClass)
{
    Zone z("algorithm=concurrency limit=4 priority=$c classes=critical:50%,best_effort");
    std::deque<Request> held;
    held.emplace_back(z, "critical", 111);
    held.emplace_back(z, "critical", 111);
    EXPECT_EQ(held[0].decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(held[1].decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(admit(z, held, "best_effort", 3, kT0), 2);
    g_dead.insert(111);  // killed holding both critical slots
    // best effort finds none free: the dead holder's come back, and
    // critical's share keeps them
    Request be(z, "best_effort");
    EXPECT_EQ(be.decide(kT0 + 1), RL_VERDICT_REJECTED);
    EXPECT_STREQ(be.shed(), "share");
    Request c1(z, "critical"), c2(z, "critical"), c3(z, "critical");
    EXPECT_EQ(c1.decide(kT0 + 1), RL_VERDICT_PASSED);
    EXPECT_EQ(c2.decide(kT0 + 1), RL_VERDICT_PASSED);
    EXPECT_EQ(c3.decide(kT0 + 1), RL_VERDICT_REJECTED);
    g_dead.clear();
}

TEST(Priority, FairSharesAlone)
{
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 fair=$t"), "OK");
    EXPECT_EQ(parse_error("algorithm=concurrency limit=10 fair=tenant"),
              "invalid \"fair=tenant\": expected a $variable whose value names a request's tenant, like "
              "fair=$http_x_tenant");
    EXPECT_EQ(parse_error("limit=10 fair=$t"),
              "\"fair=\" does not apply to algorithm=gcra: fair is for concurrency and adaptive");
    Zone z("algorithm=concurrency limit=10 fair=$t");
    EXPECT_STREQ(rl_class_name(&z.rule, 0), "all");
    EXPECT_NE(rl_tenant_of("", 0), 0u);
    EXPECT_NE(rl_tenant_of("a", 1), rl_tenant_of("b", 1));
}

namespace {

struct Tenant : Request {
    Tenant(Zone &z, const std::string &tenant, const std::string &klass = "all") : Request(z, klass)
    {
        check.tenant = rl_tenant_of(tenant.data(), tenant.size());
    }
};

}  // namespace

TEST(Priority, AWaitingTenantUnderItsShareGoesBeforeOneOverIt)
{
    Zone z("algorithm=concurrency limit=4 max_wait=5s fair=$t");
    std::deque<Tenant> a;
    fill(a, 4, kT0, RL_VERDICT_PASSED, z, "flooder");
    std::deque<Tenant> aw;
    fill(aw, 6, kT0 + 1, RL_VERDICT_QUEUED, z, "flooder");
    Tenant b(z, "quiet"), b2(z, "quiet"), c(z, "third");
    EXPECT_EQ(b.decide(kT0 + 2), RL_VERDICT_QUEUED);
    EXPECT_EQ(b2.decide(kT0 + 2), RL_VERDICT_QUEUED);
    EXPECT_EQ(c.decide(kT0 + 3), RL_VERDICT_QUEUED);
    // a slot frees: the flooder holds 3, over its share of 4 among 3
    // tenants (2); third and quiet hold none, third with fewer waiting
    a[0].end(kT0 + 4);
    EXPECT_EQ(aw[0].decide(kT0 + 4), RL_VERDICT_QUEUED);
    EXPECT_STREQ(aw[0].shed(), "fair");
    EXPECT_EQ(b.decide(kT0 + 4), RL_VERDICT_QUEUED);
    EXPECT_EQ(c.decide(kT0 + 4), RL_VERDICT_PASSED);
    // the flooder at its share (2), third 1, quiet none: quiet's
    a[1].end(kT0 + 5);
    EXPECT_EQ(aw[0].decide(kT0 + 5), RL_VERDICT_QUEUED);
    EXPECT_EQ(b2.decide(kT0 + 5), RL_VERDICT_QUEUED);  // behind its own tenant's first
    EXPECT_EQ(b.decide(kT0 + 5), RL_VERDICT_PASSED);
    // each holds 1: quiet, with 1 waiting, before the flooder with 6
    a[2].end(kT0 + 6);
    EXPECT_EQ(aw[0].decide(kT0 + 6), RL_VERDICT_QUEUED);
    EXPECT_EQ(b2.decide(kT0 + 6), RL_VERDICT_PASSED);
    // the flooder alone again: every slot its own
    b.end(kT0 + 7);
    b2.end(kT0 + 7);
    c.end(kT0 + 7);
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ(aw[(size_t) i].decide(kT0 + 8), RL_VERDICT_PASSED) << i;
    }
    EXPECT_EQ(aw[3].decide(kT0 + 8), RL_VERDICT_QUEUED);
}

TEST(Priority, AFullQueueGivesAFloodersLatestPlaceToAnotherTenant)
{
    Zone z("algorithm=concurrency limit=1 max_wait=5s fair=$t");
    Tenant a(z, "flooder");
    EXPECT_EQ(a.decide(kT0), RL_VERDICT_PASSED);
    std::deque<Tenant> aw;
    fill(aw, 16, kT0 + 1, RL_VERDICT_QUEUED, z, "flooder");
    Tenant more(z, "flooder");
    EXPECT_EQ(more.decide(kT0 + 2), RL_VERDICT_REJECTED);
    Tenant b(z, "quiet");
    EXPECT_EQ(b.decide(kT0 + 2), RL_VERDICT_QUEUED);
    EXPECT_EQ(aw.back().decide(kT0 + 3), RL_VERDICT_REJECTED);  // its place given up
    a.end(kT0 + 4);
    EXPECT_EQ(aw[0].decide(kT0 + 4), RL_VERDICT_QUEUED);
    EXPECT_EQ(b.decide(kT0 + 4), RL_VERDICT_PASSED);
}

TEST(Priority, WithoutAQueueATenantLeavesRoomForOthers)
{
    Zone z("algorithm=concurrency limit=10 fair=$t");
    std::deque<Tenant> a;
    int passed = 0;
    for (int i = 0; i < 10; i++) {
        a.emplace_back(z, "flooder");
        passed += a.back().decide(kT0) == RL_VERDICT_PASSED;
    }
    EXPECT_EQ(passed, 9);  // a tenth kept for a tenant yet to come
    EXPECT_STREQ(a.back().shed(), "fair");
    Tenant b(z, "quiet"), b2(z, "quiet");
    EXPECT_EQ(b.decide(kT0 + 1), RL_VERDICT_PASSED);
    // quiet under its share of 5, the flooder over it: a freed slot stays
    // free for quiet
    a[0].end(kT0 + 2);
    Tenant a2(z, "flooder");
    EXPECT_EQ(a2.decide(kT0 + 2), RL_VERDICT_REJECTED);
    EXPECT_STREQ(a2.shed(), "fair");
    EXPECT_EQ(b2.decide(kT0 + 2), RL_VERDICT_PASSED);
}

TEST(Priority, FairSharesWithinAClassOnly)
{
    // fairness orders a class's own waiters; a higher class goes first
    Zone z("algorithm=concurrency limit=1 max_wait=5s priority=$c classes=critical,best_effort fair=$t");
    Tenant a(z, "x", "best_effort"), w(z, "y", "best_effort"), crit(z, "x", "critical");
    EXPECT_EQ(a.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(w.decide(kT0 + 1), RL_VERDICT_QUEUED);
    EXPECT_EQ(crit.decide(kT0 + 2), RL_VERDICT_QUEUED);
    a.end(kT0 + 3);
    EXPECT_EQ(w.decide(kT0 + 3), RL_VERDICT_QUEUED);
    EXPECT_EQ(crit.decide(kT0 + 3), RL_VERDICT_PASSED);
}

TEST(Priority, SharesRoundUpAndNeverLockEachOtherOut)
{
    // 10% of 8 slots keeps one; 50% and 50% of 1 slot keep one each: the
    // first class to ask takes it, neither waits for the other's share
    Zone z("algorithm=concurrency limit=8 priority=$c classes=critical,best_effort:10%");
    std::deque<Request> held;
    EXPECT_EQ(admit(z, held, "critical", 9, kT0), 7);
    EXPECT_STREQ(held.back().shed(), "share");
    EXPECT_EQ(admit(z, held, "best_effort", 2, kT0), 1);
    Zone one("algorithm=concurrency limit=1 priority=$c classes=a:50%,b:50%");
    Request a(one, "a"), b(one, "b");
    EXPECT_EQ(b.decide(kT0), RL_VERDICT_PASSED);
    EXPECT_EQ(a.decide(kT0), RL_VERDICT_REJECTED);
    EXPECT_STREQ(a.shed(), "full");
    b.end(kT0 + 1);
    EXPECT_EQ(a.decide(kT0 + 1), RL_VERDICT_PASSED);
}
