// libFuzzer target: the key API's request reader and its answers, on
// whatever a client sends.  The input is split at its first two NUL bytes
// into a URI, a method and a query string.  A request is read or refused
// with a 4xx whose answer is valid JSON inside its buffer; a request read
// has its key and rule within bounds, every error the glue may add is valid
// JSON too, and a key's answer (the key as asked) is valid JSON.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../json_check.h"
#include "ratelimit_render.h"

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            std::fprintf(stderr, "fuzz_api: %s failed at line %d\n", #cond, __LINE__);                                 \
            std::abort();                                                                                              \
        }                                                                                                              \
    } while (0)

namespace {

void check_error(const rl_api_request_t &q, int rc)
{
    CHECK(rc == 400 || rc == 403 || rc == 404 || rc == 405 || rc == 409);
    CHECK(q.status == rc);
    CHECK(q.error_len > 0 && q.error_len < sizeof(q.error));
    CHECK(json_check::json_valid(std::string(q.error, q.error_len)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    // copies of exactly their bytes: ASan catches any read past them
    std::vector<std::vector<char>> parts(3);
    size_t part = 0;
    for (size_t i = 0; i < size; i++) {
        if (data[i] == 0 && part < 2) {
            part++;
        } else {
            parts[part].push_back((char) data[i]);
        }
    }
    const rl_str_t uri{parts[0].data(), parts[0].size()};
    const rl_str_t method{parts[1].data(), parts[1].size()};
    const rl_str_t args{parts[2].data(), parts[2].size()};
    static const char prefix[] = "/rl/";

    rl_api_request_t *q = new rl_api_request_t;
    const int rc = rl_api_request(q, rl_str_t{prefix, 4}, uri, method, size % 2, args);
    if (rc != 0) {
        check_error(*q, rc);
        delete q;
        return 0;
    }
    CHECK(q->resource >= RL_API_ZONES && q->resource <= RL_API_OVERRIDES);
    CHECK(q->key_len <= RL_API_KEY_MAX && q->rule_len < RL_NAME_MAX);
    CHECK(q->resource == RL_API_ZONES || q->zone.len > 0);
    CHECK(!q->reset || q->resource == RL_API_KEYS);

    rl_rule_t rule;
    char err[RL_ERR_MAX], name[RL_NAME_MAX];
    CHECK(rl_rule_parse(&rule, name, "limit=3 period=1h", err, sizeof(err)) == RL_OK);
    rl_key_state_t st{};
    st.rule = rl_str_t{q->rule, q->rule_len};
    st.config = &rule;
    const rl_key_snapshot_t k{q->zone, q->has_key ? q->key : nullptr, q->key_len, q->fingerprint, q->reset, 1, &st};
    std::string out(rl_render_api_keys(&k, nullptr, 0), '\0');
    CHECK(rl_render_api_keys(&k, &out[0], out.size()) == out.size());
    CHECK(json_check::json_valid(out));

    for (int e = RL_API_NO_ZONE; e <= RL_API_NO_OVERRIDES; e++) {
        check_error(*q, rl_api_error(q, e));
    }
    delete q;
    return 0;
}
