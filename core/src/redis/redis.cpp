// Redis: the keys and the command that call the script for a request (its
// reply is read in resp.cpp and judged in redis_reply.cpp).  No I/O here:
// the glue owns the connections (nginx events), the conformance test a
// blocking socket.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>

#include "algorithms/algorithm.h"
#include "policy/request.h"
#include "redis/resp.h"
#include "table/table.h"
#include "util/error.h"
#include "util/random_id.h"
#include "util/sha256.h"

extern "C" const char rl_redis_script_text[];  // generated from core/src/redis/ratelimit.lua
extern "C" const size_t rl_redis_script_text_len;

namespace {

const char kHex[] = "0123456789abcdef";

char *hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        *out++ = kHex[b[i] >> 4];
        *out++ = kHex[b[i] & 15];
    }
    return out;
}

// "{" 16 hex characters of SHA-256(key) "}": one slot for one key value.
void key_tag(const void *key, size_t key_len, char *out)
{
    uint8_t digest[32];
    rl::Sha256 h;
    h.update(key, key_len);
    h.finish(digest);
    out[0] = '{';
    hex(digest, 8, out + 1);
    out[RL_REDIS_TAG_LEN - 1] = '}';
}

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), Redis Cluster's key
// hash; bit by bit, as it runs once per request.
unsigned crc16(const char *p, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned) (uint8_t) p[i] << 8;
        for (int b = 0; b < 8; b++) {
            crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
        }
    }
    return crc;
}

// Arguments per rule in the script's ARGV (its spec, what its request
// sends), and a settle's three more: the units to spend, the head's t after
// the admission and when it was decided.
const size_t kArgsPerRule = 2;
const size_t kSettleArgs = 3;

// The script as a library (FUNCTION LOAD): its text up to this line, which
// begins what only a script run by EVAL does; then the function's
// registration.
const char kScriptTail[] = "\n-- ---- as a script (EVAL, EVALSHA)";
const char kFunctionPrefix[] = "ratelimit_";  // and the script's SHA-1

size_t library_len()
{
    const char *text = rl_redis_script_text;
    const char *tail =
        static_cast<const char *>(memmem(text, rl_redis_script_text_len, kScriptTail, sizeof(kScriptTail) - 1));
    return tail != nullptr ? (size_t) (tail - text) + 1 : rl_redis_script_text_len;
}

// The identity of a key's ban (ban=), as the table's ban_tag: another name
// of the same key, in the same slot.
uint64_t ban_identity(uint64_t identity)
{
    const uint64_t b = identity << 32 | identity >> 32;
    return b != identity ? b : identity ^ 1;
}

// The identity of a key's reservations in flight (charge=, the table's
// flight_tag): another name of the same key, in the same slot.
uint64_t flight_identity(uint64_t identity)
{
    return ~identity;
}

// The checks a call sends: those that apply; for a settle, those that
// settle a charge, or end with their reservation standing (RL_NO_CHARGE:
// their reservations in flight end all the same).
bool sent(const rl_check_t &c, int call)
{
    if (call == RL_REDIS_RELEASE || call == RL_REDIS_RENEW || call == RL_REDIS_RESTORE) {
        return rl_redis_holds_lease(&c) != 0;
    }
    return call == RL_REDIS_SETTLE ? rl::charges(c) : rl::applies(c);
}

// Whether a call names the key's reservations in flight: a decision or a
// settle of a charge= rule.
bool flies(const rl_check_t &c, int call)
{
    return c.rule->charge && (call == RL_REDIS_DECIDE || call == RL_REDIS_SETTLE);
}

// A concurrency check's lease, as the script names its member: the
// server's id, the worker's random number, its process and the lease's
// number there.  A peek sends the server's part only ("SERVER:"), which
// the script counts the key's live leases of.
size_t lease_name(const rl_request_t &rq, const rl_check_t &c, int call, char *out, size_t cap)
{
    if (!rl::has(*c.rule, rl::kSlots)) {
        return 0;
    }
    int n = 0;
    if (call == RL_REDIS_PEEK) {
        if (rq.server == 0) {
            return 0;
        }
        n = std::snprintf(out, cap, "%016llx:", (unsigned long long) rq.server);
    } else if (c.lease != 0) {
        n = std::snprintf(out, cap, "%016llx:%016llx:%u:%u", (unsigned long long) rq.server,
                          (unsigned long long) rq.lease, (unsigned) rq.holder, (unsigned) c.lease);
    }
    return n > 0 && (size_t) n < cap ? (size_t) n : 0;
}

// The answer's longest bytes, for a batch's (rl_redis_batch_takes): its
// array's head, and each integer's ":" sign, 19 digits and CRLF.
const size_t kAnswerHead = 8;
const size_t kAnswerPerRule = 12;
const size_t kIntegerMax = 23;
const size_t kArgMax = 1 + 20 + 2 + 2;

// The calls that change no rate: no ban is read or written.
bool changes_no_rate(int call)
{
    return call == RL_REDIS_SETTLE || call == RL_REDIS_RELEASE || call == RL_REDIS_RENEW || call == RL_REDIS_RESTORE;
}

// What a request's call sends: its rules, and its keys (a state a rule, a
// ban a ban= rule, reservations in flight a charge= rule).
struct Sent {
    size_t n, keys;
};

Sent sent_of(const rl_request_t &rq, int call)
{
    const bool bare = changes_no_rate(call);
    Sent k{0, 0};
    for (size_t i = 0; i < rq.n; i++) {
        const rl_check_t &c = rq.checks[i];
        if (sent(c, call)) {
            k.n++;
            k.keys += 1 + (!bare && c.rule->ban_ms > 0) + flies(c, call);
        }
    }
    return k;
}

// FCALL of the library's function, or the script by EVALSHA or EVAL.
void name(rl::Writer &w, const char *script, size_t script_len, int via)
{
    if (via == RL_REDIS_FCALL) {
        w.arg("FCALL", 5);
        w.length_line('$', sizeof(kFunctionPrefix) - 1 + script_len);
        w.raw(kFunctionPrefix, sizeof(kFunctionPrefix) - 1);
        w.raw(script, script_len);
        w.raw("\r\n", 2);
    } else {
        w.arg(via == RL_REDIS_EVAL ? "EVAL" : "EVALSHA", via == RL_REDIS_EVAL ? 4 : 7);
        w.arg(script, script_len);
    }
}

// A request's keys: each rule's state, then each ban= rule's ban, then
// each charge= rule's reservations in flight.
void keys(rl::Writer &w, const rl_request_t &rq, int call, const char *prefix, size_t prefix_len, int cluster)
{
    const bool bare = changes_no_rate(call);
    const rl_check_t *c = rq.checks;
    char key[256 + RL_REDIS_TAG_LEN + RL_REDIS_HASH_LEN];
    const size_t plen = prefix_len < 256 ? prefix_len : 256;
    for (int pass = 0; pass < 3; pass++) {
        for (size_t i = 0; i < rq.n; i++) {
            if (!sent(c[i], call) || (pass == 1 && (bare || c[i].rule->ban_ms == 0)) ||
                (pass == 2 && !flies(c[i], call))) {
                continue;
            }
            const uint64_t id = pass == 0   ? c[i].identity
                                : pass == 1 ? ban_identity(c[i].identity)
                                            : flight_identity(c[i].identity);
            w.arg(key, rl_redis_key(key, prefix, plen, cluster, id, c[i].key, c[i].key_len));
        }
    }
}

// The script's clock: a test's, or "" for Redis's TIME.
void clock(rl::Writer &w, int64_t now_ms)
{
    if (now_ms >= 0) {
        w.arg(now_ms);
    } else {
        w.arg("", 0);
    }
}

// A decision's call: 0 all, 1 any; 2 more for a dry run (it bans nobody).
int64_t decision_call(const rl_request_t &rq)
{
    return (rq.combine == RL_COMBINE_ANY ? 1 : 0) + (rq.dry_run ? 2 : 0);
}

// Each rule's arguments: its spec, its request's, and a settle's.
void rule_args(rl::Writer &w, const rl_request_t &rq, int call)
{
    const bool settle = call == RL_REDIS_SETTLE;
    const rl_check_t *c = rq.checks;
    // a cost or a charge beyond what any rule admits is only ever compared
    // or capped: sent capped where Lua's doubles are still exact
    auto exact = [](uint64_t v) { return (int64_t) (v < RL_REDIS_UNITS_MAX ? v : RL_REDIS_UNITS_MAX); };
    for (size_t i = 0; i < rq.n; i++) {
        if (!sent(c[i], call)) {
            continue;
        }
        const rl_rule_t &r = *c[i].rule;
        // the rule's spec: what is the same for its every request, in the
        // order of the script's SPEC
        char spec[13 * 21];
        rl::Writer s{spec};
        int64_t own[rl::kSpecOwn];
        rl::spec_of(r, own);
        const int64_t fields[] = {r.algorithm,
                                  r.limit,
                                  r.burst,
                                  r.period_ms,
                                  own[rl::kSpecAlign],
                                  own[rl::kSpecBuckets],
                                  own[rl::kSpecMaxDelay],
                                  own[rl::kSpecReset],
                                  own[rl::kSpecUtcOffset],
                                  own[rl::kSpecDelay],
                                  r.ban_ms,
                                  r.charge ? 1 : 0,
                                  own[rl::kSpecLease]};
        for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
            if (f > 0) {
                s.raw(" ", 1);
            }
            s.number(fields[f]);
        }
        w.arg(spec, (size_t) (s.p - spec));

        // the request's: its cost (a settle gives back what the admission
        // reserved), and where any is not 0 or empty, charge='s share, what
        // a decision reserves at least within what the key has left
        // (check.cpp's reserve), an override's instant its limits as
        // applied began, concurrency's 1 where its server holds the limit
        // already (rl_request_hold_here), and its lease's name where it
        // takes, releases, renews or restores one
        const uint64_t share = call == RL_REDIS_DECIDE ? rl::charge_share(r) : 0;
        const int full = call == RL_REDIS_DECIDE && c[i].full_here ? 1 : 0;
        char lease[64];
        const size_t lease_len = lease_name(rq, c[i], call, lease, sizeof(lease));
        char req[4 * 21 + 1 + sizeof(lease)];
        rl::Writer q{req};
        q.number(exact(settle ? c[i].reserved : c[i].cost));
        if (share != 0 || c[i].since != 0 || full != 0 || lease_len > 0) {
            q.raw(" ", 1);
            q.number(exact(share));
            q.raw(" ", 1);
            q.number(c[i].since);
            q.raw(" ", 1);
            q.number(full);
            if (lease_len > 0) {
                q.raw(" ", 1);
                q.raw(lease, lease_len);
            }
        }
        w.arg(req, (size_t) (q.p - req));
        if (settle) {
            // -1: the reservation stands (RL_NO_CHARGE)
            w.arg(c[i].charge == RL_NO_CHARGE ? (int64_t) -1 : exact(c[i].charge));
            w.arg(c[i].after.t);
            w.arg(c[i].at);
        }
    }
}

}  // namespace

extern "C" {

int64_t rl_redis_lease_ms(const rl_rule_t *rule)
{
    int64_t own[rl::kSpecOwn];
    rl::spec_of(*rule, own);
    return own[rl::kSpecLease];
}

int rl_redis_holds_lease(const rl_check_t *c)
{
    return rl::applies(*c) && rl::has(*c->rule, rl::kSlots) && c->lease > 0;
}

uint64_t rl_redis_server_id(void)
{
    return rl::random_id();
}

const char *rl_redis_script(size_t *len)
{
    *len = rl_redis_script_text_len;
    return rl_redis_script_text;
}

int rl_redis_rule_ok(const rl_rule_t *rule, char *err, size_t errlen)
{
    const rl::Algorithm &a = rl::algorithm_of(*rule);
    if (a.no_redis != nullptr) {
        return rl::fail(err, errlen, "algorithm=%s is not decided in Redis: %s", a.name, a.no_redis);
    }
    if (a.redis_rule_ok != nullptr && a.redis_rule_ok(*rule, err, errlen) != RL_OK) {
        return RL_ERROR;
    }
    if (rule->classes != nullptr && rule->classes->n > 0) {
        return rl::fail(err, errlen,
                        "\"priority=\" does not apply in a Redis zone: a class's share of the fleet's slots would "
                        "need every server's classes in Redis; use a zone without redis= for priority classes "
                        "(each server keeps them for its own slots)");
    }
    if (a.redis_units == nullptr) {
        return RL_OK;  // counters and times only
    }
    // the largest count the rule may apply: limit_max when a variable sets it
    const bool var = rule->limit_var || rule->burst_var;
    const bool bucket = a.traits & rl::kBucket;
    uint64_t count = var ? rule->limit_max : bucket && rule->burst > rule->limit ? rule->burst : rule->limit;
    if (bucket && rule->charge) {
        count = var ? 2 * (uint64_t) rule->limit_max : (uint64_t) rule->burst + rule->limit;  // a limit of debt
    }
    if (a.redis_units(*rule, count) > RL_REDIS_UNITS_MAX) {
        return rl::fail(err, errlen,
                        "%s x period of %llu per %lld ms is too fine for a Redis zone: at most 2^50 (its script "
                        "computes in units of 1/limit ms, exactly only below 2^53)%s",
                        bucket && rule->charge ? "(burst + limit)"
                        : var                  ? "limit_max"
                                               : "limit",
                        (unsigned long long) count, (long long) rule->period_ms, var ? ": set a lower limit_max=" : "");
    }
    return RL_OK;
}

size_t rl_redis_key(char *out, const char *prefix, size_t prefix_len, int cluster, uint64_t identity, const void *key,
                    size_t key_len)
{
    uint8_t id[8], digest[32];
    char *p = out;
    std::memcpy(p, prefix, prefix_len);
    p += prefix_len;
    if (cluster) {
        key_tag(key, key_len, p);
        p += RL_REDIS_TAG_LEN;
    }
    for (int i = 0; i < 8; i++) {
        id[i] = (uint8_t) (identity >> (8 * i));
    }
    rl::Sha256 h;
    h.update(id, sizeof(id));
    h.update(key, key_len);
    h.finish(digest);
    p = hex(digest, RL_REDIS_HASH_LEN / 2, p);
    return (size_t) (p - out);
}

unsigned rl_redis_slot(const char *rkey, size_t len)
{
    // Redis Cluster: the part between the first '{' and the next '}', if
    // not empty, else the whole key (cluster-spec, "Hash tags")
    const char *open = static_cast<const char *>(std::memchr(rkey, '{', len));
    if (open != nullptr) {
        const char *from = open + 1;
        const char *close = static_cast<const char *>(std::memchr(from, '}', (size_t) (rkey + len - from)));
        if (close != nullptr && close > from) {
            return crc16(from, (size_t) (close - from)) & 16383;
        }
    }
    return crc16(rkey, len) & 16383;
}

unsigned rl_redis_key_slot(const void *key, size_t key_len)
{
    char tag[RL_REDIS_TAG_LEN];
    key_tag(key, key_len, tag);
    return rl_redis_slot(tag, sizeof(tag));
}

size_t rl_redis_command_size(size_t n, size_t prefix_len, size_t script_len)
{
    const size_t arg = 1 + 20 + 2 + 2;  // $<len>\r\n...\r\n around each argument
    // the script's name (FCALL: a prefix before its SHA-1); a state, a ban
    // and reservations in flight a rule; a spec of 13 numbers, a request's of 4 and a lease's
    // name, a settle's arguments
    return 1 + 20 + 2 + (arg + 7) + (arg + sizeof(kFunctionPrefix) + script_len) + (arg + 20) +
           3 * n * (arg + prefix_len + RL_REDIS_TAG_LEN + RL_REDIS_HASH_LEN) + 2 * (arg + 20) +
           n * ((arg + 13 * 21) + (arg + 4 * 21 + 64) + kSettleArgs * (arg + 20));
}

size_t rl_redis_load_size(void)
{
    const size_t arg = 1 + 20 + 2 + 2;
    return 1 + 20 + 2 + (arg + 8) + (arg + 4) + arg + library_len() + 2 * (sizeof(kFunctionPrefix) + 40) + 64;
}

size_t rl_redis_load_command(char *buf, const char *sha)
{
    static const char kHead[] = "#!lua name=";
    static const char kRegister[] = "redis.register_function('";
    static const char kRun[] = "', run)\n";
    const size_t name = sizeof(kFunctionPrefix) - 1 + 40, body = library_len();
    rl::Writer w{buf};
    w.length_line('*', 3);
    w.arg("FUNCTION", 8);
    w.arg("LOAD", 4);
    w.length_line('$', sizeof(kHead) - 1 + name + 1 + body + sizeof(kRegister) - 1 + name + sizeof(kRun) - 1);
    w.raw(kHead, sizeof(kHead) - 1);
    w.raw(kFunctionPrefix, sizeof(kFunctionPrefix) - 1);
    w.raw(sha, 40);
    w.raw("\n", 1);
    w.raw(rl_redis_script_text, body);
    w.raw(kRegister, sizeof(kRegister) - 1);
    w.raw(kFunctionPrefix, sizeof(kFunctionPrefix) - 1);
    w.raw(sha, 40);
    w.raw(kRun, sizeof(kRun) - 1);
    w.raw("\r\n", 2);
    return (size_t) (w.p - buf);
}

size_t rl_redis_command(char *buf, const char *script, size_t script_len, int via, int call, const char *prefix,
                        size_t prefix_len, int cluster, const rl_request_t *rq, int64_t now_ms)
{
    const Sent k = sent_of(*rq, call);
    rl::Writer w{buf};
    w.length_line('*', 3 + k.keys + 2 + k.n * (kArgsPerRule + (call == RL_REDIS_SETTLE ? kSettleArgs : 0)));
    name(w, script, script_len, via);
    w.arg((int64_t) k.keys);
    keys(w, *rq, call, prefix, prefix_len, cluster);
    clock(w, now_ms);
    if (call > RL_REDIS_DECIDE && call <= RL_REDIS_RESTORE) {
        static const char *const kCalls[] = {nullptr, "peek", "reset", "settle", "release", "renew", "restore"};
        w.arg(kCalls[call], std::strlen(kCalls[call]));
    } else {
        w.arg(decision_call(*rq));
    }
    rule_args(w, *rq, call);
    return (size_t) (w.p - buf);
}

size_t rl_redis_answer_max(const rl_request_t *rq)
{
    const size_t n = sent_of(*rq, RL_REDIS_DECIDE).n;
    return kAnswerHead + (2 + kAnswerPerRule * n) * kIntegerMax;
}

int rl_redis_batch_takes(size_t *bytes, size_t count, const rl_request_t *rq)
{
    const size_t more = rl_redis_answer_max(rq);
    if (count >= RL_REDIS_BATCH_MAX || *bytes + more > RL_RESP_REPLY_MAX - kAnswerHead) {
        return 0;
    }
    *bytes += more;
    return 1;
}

size_t rl_redis_batch_size(const rl_request_t *const *rqs, size_t n, size_t prefix_len, size_t script_len)
{
    size_t rules = 0;
    for (size_t i = 0; i < n; i++) {
        rules += rqs[i]->n;
    }
    return rl_redis_command_size(rules, prefix_len, script_len) + n * 2 * (kArgMax + 20);
}

size_t rl_redis_batch_command(char *buf, const char *script, size_t script_len, int via, const char *prefix,
                              size_t prefix_len, const rl_request_t *const *rqs, size_t n, int64_t now_ms)
{
    size_t keys_n = 0, args = 2;
    for (size_t i = 0; i < n; i++) {
        const Sent k = sent_of(*rqs[i], RL_REDIS_DECIDE);
        keys_n += k.keys;
        args += 2 + k.n * kArgsPerRule;
    }
    rl::Writer w{buf};
    w.length_line('*', 3 + keys_n + args);
    name(w, script, script_len, via);
    w.arg((int64_t) keys_n);
    for (size_t i = 0; i < n; i++) {
        keys(w, *rqs[i], RL_REDIS_DECIDE, prefix, prefix_len, 0);
    }
    clock(w, now_ms);
    w.arg("batch", 5);
    for (size_t i = 0; i < n; i++) {
        w.arg(decision_call(*rqs[i]));
        w.arg((int64_t) sent_of(*rqs[i], RL_REDIS_DECIDE).n);
        rule_args(w, *rqs[i], RL_REDIS_DECIDE);
    }
    return (size_t) (w.p - buf);
}

long rl_resp_batch(const char *p, size_t len, size_t n)
{
    // "*N\r\n": the array's head, its answers after it
    int64_t count = 0;
    size_t i = 1;
    if (len < 4 || p[0] != RL_RESP_ARRAY) {
        return -1;
    }
    while (i < len && i < 8 && p[i] >= '0' && p[i] <= '9') {
        count = count * 10 + (p[i++] - '0');
    }
    if (i == 1 || i + 2 > len || p[i] != '\r' || p[i + 1] != '\n' || count != (int64_t) n) {
        return -1;
    }
    return (long) (i + 2);
}

}  // extern "C"
