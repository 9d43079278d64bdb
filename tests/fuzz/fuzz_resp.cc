// libFuzzer target: the RESP reader, which reads whatever a Redis server (or
// anything listening on its port) sends.  On any bytes it never reads past
// them; a reply it accepts is accepted again from exactly its own bytes and
// from any longer buffer; a strict prefix of a reply is never an error; and
// the script's reply is judged (rl_redis_answer) without a fault: whatever
// it takes as a decision, or as a charge settled, is within the rule's
// range.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ratelimit.h"

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            std::fprintf(stderr, "fuzz_resp: %s failed at line %d\n", #cond, __LINE__);                                \
            std::abort();                                                                                              \
        }                                                                                                              \
    } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    // a copy of exactly size bytes: ASan catches any read past them
    std::vector<char> buf(data, data + size);
    rl_resp_t r;
    const long used = rl_resp_parse(buf.data(), buf.size(), &r);
    CHECK(used >= RL_RESP_TOO_LONG && used <= (long) size && used <= RL_RESP_REPLY_MAX);

    if (used > 0) {
        rl_resp_t again;
        CHECK(rl_resp_parse(buf.data(), (size_t) used, &again) == used);
        CHECK(again.type == r.type);
        for (long n = 0; n < used; n++) {
            CHECK(rl_resp_parse(buf.data(), (size_t) n, &again) == 0);
        }
        if (r.type == RL_RESP_ARRAY) {
            CHECK(r.nitems <= RL_RESP_ITEMS_MAX);
        }
        rl_rule_t rule;
        char err[RL_ERR_MAX], name[RL_NAME_MAX];
        CHECK(rl_rule_parse(&rule, name, "limit=5 charge=$c ban=1m", err, sizeof(err)) == RL_OK);
        rl_check_t c[3] = {};
        for (size_t n = 0; n <= 3; n++) {
            for (size_t i = 0; i < n; i++) {
                c[i].rule = &rule;
                c[i].key = "k";
                c[i].key_len = 1;
            }
            rl_request_t rq{};
            rq.checks = c;
            rq.n = n;
            rq.binding = 99;
            rl_redis_answer_t a;
            for (int call = RL_REDIS_DECIDE; call <= RL_REDIS_SETTLE; call++) {
                for (size_t i = 0; i < n; i++) {
                    c[i].outcome = RL_OUTCOME_ALLOWED;  // a charge= check that reserved its cost
                    c[i].charge = 7;
                    c[i].charged = 0;
                }
                const int kind = rl_redis_answer(&rq, call, &r, &a);
                CHECK(kind >= RL_REDIS_DECIDED && kind <= RL_REDIS_NO_FUNCTIONS);
                CHECK(kind == RL_REDIS_DECIDED || kind == RL_REDIS_REDIRECT || kind == RL_REDIS_NOSCRIPT ||
                      std::strlen(a.why) > 0);
                CHECK(kind != RL_REDIS_READONLY || (r.type == RL_RESP_ERROR && r.str_len >= 8));
                CHECK(kind != RL_REDIS_REDIRECT || (a.slot < 16384 && a.port > 0 && a.port < 65536 && a.host_len > 0));
                CHECK(call != RL_REDIS_DECIDE || kind != RL_REDIS_DECIDED ||
                      (a.verdict >= 0 && a.verdict <= RL_VERDICT_EXEMPT && rq.binding < (n ? n : 1)));
                for (size_t i = 0; kind == RL_REDIS_DECIDED && call < RL_REDIS_RESET && i < n; i++) {
                    CHECK(c[i].decision.remaining <= 5 && c[i].decision.delay_ms == 0);
                    CHECK(c[i].decision.banned_ms >= 0 && c[i].decision.banned_ms <= 60000 + RL_REDIS_CLOCK_SLACK_MS);
                }
                for (size_t i = 0; kind == RL_REDIS_DECIDED && call == RL_REDIS_SETTLE && i < n; i++) {
                    CHECK(c[i].charged <= 7 && (c[i].capped || c[i].charged == 7));
                }
            }
            CHECK(rl_redis_answer(nullptr, RL_REDIS_DECIDE, &r, &a) != RL_REDIS_REDIRECT);
        }
        // concurrency: a decision keeps a check's lease only when it took
        // one; a release or a renewal accounts for exactly the leases sent
        rl_rule_t slots;
        char slots_name[RL_NAME_MAX];
        CHECK(rl_rule_parse(&slots, slots_name, "algorithm=concurrency limit=3 lease=10s", err, sizeof(err)) == RL_OK);
        for (size_t n = 0; n <= 3; n++) {
            for (size_t i = 0; i < n; i++) {
                c[i] = rl_check_t{};
                c[i].rule = i == 1 ? &rule : &slots;
                c[i].key = "k";
                c[i].key_len = 1;
                c[i].cost = 1;
            }
            rl_request_t rq{};
            rq.checks = c;
            rq.n = n;
            rq.binding = 99;
            rl_redis_answer_t a;
            for (int call : {RL_REDIS_DECIDE, RL_REDIS_RELEASE, RL_REDIS_RENEW, RL_REDIS_RESTORE}) {
                size_t leases = 0;
                for (size_t i = 0; i < n; i++) {
                    c[i].lease = (uint32_t) i + 1;
                    leases += rl_redis_holds_lease(&c[i]);
                }
                const int kind = rl_redis_answer(&rq, call, &r, &a);
                CHECK(kind >= RL_REDIS_DECIDED && kind <= RL_REDIS_NO_FUNCTIONS);
                CHECK(call == RL_REDIS_DECIDE || kind != RL_REDIS_DECIDED || a.leases_done + a.leases_gone == leases);
                for (size_t i = 0; kind == RL_REDIS_DECIDED && call == RL_REDIS_DECIDE && i < n; i++) {
                    CHECK(c[i].rule != &slots || c[i].lease == 0 ||
                          (c[i].decision.allowed && a.verdict == RL_VERDICT_PASSED));
                    CHECK(c[i].rule != &slots || c[i].decision.remaining <= 3);
                }
            }
        }
    }
    return 0;
}
