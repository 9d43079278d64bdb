// libFuzzer target: what a zone's overrides file and the key API's
// override requests may hold, hostile.  The input is split at its first
// NUL into a file's text and a request's body; the file's first line also
// serves as a range=.  A line is read or refused (never a read past it); a
// line read is written back and reads the same; a body is read or refused
// with a message; an override read is checked against rules of each
// algorithm, and its JSON is valid.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../json_check.h"
#include "ratelimit.h"
#include "ratelimit_render.h"

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            std::fprintf(stderr, "fuzz_overrides: %s failed at line %d\n", #cond, __LINE__);                           \
            std::abort();                                                                                              \
        }                                                                                                              \
    } while (0)

namespace {

const char *const kRules[] = {
    "limit=10 period=1h name=per_key",
    "algorithm=sliding_log limit=10 period=1h name=log",
    "algorithm=quota limit=10 reset=daily name=q",
    "algorithm=leaky_bucket limit=10 period=1s name=lb",
    "algorithm=concurrency limit=3 name=c",
};

void checked(const rl_override_t &ov)
{
    char err[RL_ERR_MAX];
    for (const char *text : kRules) {
        rl_rule_t rule;
        char name[RL_NAME_MAX];
        CHECK(rl_rule_parse(&rule, name, text, err, sizeof(err)) == RL_OK);
        rule.key_addr = RL_KEY_ADDR_BINARY;
        for (int redis = 0; redis < 2; redis++) {
            if (rl_override_check(&ov, &rule, redis, err, sizeof(err)) == RL_OK) {
                rl_rule_t out;
                rl_override_apply(&rule, &ov, &out);
                CHECK(out.limit >= 1 && out.burst >= 1 && out.period_ms >= 1);
            } else {
                CHECK(err[0] != '\0');
            }
        }
    }
    std::string json(1024, '\0');
    json.resize(rl_override_json(&ov, 0, &json[0], json.size()));
    CHECK(json_check::json_valid(json));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = static_cast<const uint8_t *>(std::memchr(data, 0, size));
    const size_t flen = nul ? (size_t) (nul - data) : size;
    char err[RL_ERR_MAX];

    // the file, a line at a time, each in a copy of exactly its bytes
    for (size_t at = 0; at < flen;) {
        const uint8_t *nl = static_cast<const uint8_t *>(std::memchr(data + at, '\n', flen - at));
        const size_t len = nl ? (size_t) (nl - data) - at : flen - at;
        std::vector<char> line(data + at, data + at + len);
        rl_override_t ov;
        const int rc = rl_overrides_file_read(line.data(), line.size(), &ov, err, sizeof(err));
        CHECK(rc == RL_OK || rc == RL_DECLINED || rc == RL_ERROR);
        if (rc == RL_OK) {
            char out[RL_OVERRIDE_LINE_MAX];
            const size_t n = rl_overrides_file_line(&ov, out);
            CHECK(n > 0 && n <= RL_OVERRIDE_LINE_MAX && out[n - 1] == '\n');
            rl_override_t back;
            CHECK(rl_overrides_file_read(out, n - 1, &back, err, sizeof(err)) == RL_OK);
            CHECK(std::memcmp(&back, &ov, sizeof(ov)) == 0);
            checked(ov);
        }
        if (at == 0) {
            rl_override_target_t t;
            if (rl_override_target(&t, nullptr, 0, nullptr, 0, line.data(), line.size(), err, sizeof(err)) == RL_OK) {
                CHECK(t.family == 4 || t.family == 6);
                CHECK(t.prefix <= (t.family == 6 ? 128u : 32u));
            }
        }
        at += len + 1;
    }

    // the body
    if (nul != nullptr) {
        std::vector<char> body(nul + 1, data + size);
        rl_override_t ov{};
        if (rl_override_body(&ov, body.data(), body.size(), 1767225600000, err, sizeof(err)) == RL_OK) {
            checked(ov);
        } else {
            CHECK(err[0] != '\0');
        }
    }
    return 0;
}
