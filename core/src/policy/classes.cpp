// Priority classes: priority=, classes=, class_default= and fair= parsed
// and checked (rule.cpp hands them here), and a request's value of priority=
// read as a class.  How a key's slots go to the classes is slots.cpp's.
#include <cstdio>
#include <cstring>

#include "algorithms/algorithm.h"
#include "policy/classes.h"
#include "ratelimit.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/siphash.h"

namespace rl {

namespace {

bool class_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

// The class named name (len bytes), or n if none is.
uint32_t find_class(const rl_classes_t &k, const char *name, size_t len)
{
    for (uint32_t i = 0; i < k.n; i++) {
        if (k.name_len[i] == len && std::memcmp(k.name[i], name, len) == 0) {
            return i;
        }
    }
    return k.n;
}

// One class of classes=: NAME or NAME:N%.
int read_class(rl_classes_t &k, const char *p, size_t len, const char *whole, int wlen, char *err, size_t errlen)
{
    const char *colon = static_cast<const char *>(std::memchr(p, ':', len));
    const size_t nlen = colon != nullptr ? (size_t) (colon - p) : len;
    bool ok = nlen > 0 && nlen < RL_CLASS_NAME_MAX;
    for (size_t i = 0; ok && i < nlen; i++) {
        ok = class_char(p[i]);
    }
    if (!ok) {
        return fail(err, errlen,
                    "invalid \"%.*s\": a class \"%.*s\" is not 1 to %d letters, digits, \"_\", \"-\" or \".\" "
                    "(classes=NAME[:SHARE%%],..., highest first, like classes=critical:20%%,standard,best_effort)",
                    wlen, whole, (int) nlen, p, RL_CLASS_NAME_MAX - 1);
    }
    if (find_class(k, p, nlen) < k.n) {
        return fail(err, errlen, "invalid \"%.*s\": class \"%.*s\" is named twice", wlen, whole, (int) nlen, p);
    }
    uint64_t share = 0;
    if (colon != nullptr) {
        const size_t slen = len - nlen - 1;
        if (slen < 2 || colon[slen] != '%' || !decimal(colon + 1, slen - 1, 100, &share) || share == 0) {
            return fail(err, errlen,
                        "invalid \"%.*s\": the share of class \"%.*s\" is \"%.*s\": expected a percentage from 1%% "
                        "to 100%% of the key's slots, like %.*s:20%%",
                        wlen, whole, (int) nlen, p, (int) slen, colon + 1, (int) nlen, p);
        }
    }
    std::memcpy(k.name[k.n], p, nlen);
    k.name[k.n][nlen] = '\0';
    k.name_len[k.n] = (uint32_t) nlen;
    k.share[k.n++] = (uint32_t) share;
    return RL_OK;
}

int read_classes(rl_classes_t &k, const char *v, size_t len, const char *whole, int wlen, char *err, size_t errlen)
{
    const char *p = v, *end = v + len;
    while (p <= end) {
        const char *comma = static_cast<const char *>(std::memchr(p, ',', (size_t) (end - p)));
        const char *stop = comma != nullptr ? comma : end;
        if (k.n == RL_CLASSES_MAX) {
            return fail(err, errlen, "invalid \"%.*s\": at most %d classes", wlen, whole, RL_CLASSES_MAX);
        }
        if (read_class(k, p, (size_t) (stop - p), whole, wlen, err, errlen) != RL_OK) {
            return RL_ERROR;
        }
        p = stop + 1;
    }
    uint32_t sum = 0;
    for (uint32_t i = 0; i < k.n; i++) {
        sum += k.share[i];
    }
    if (sum > 100) {
        return fail(err, errlen,
                    "invalid \"%.*s\": the shares add up to %u%%: at most 100%% of the key's slots can be kept", wlen,
                    whole, sum);
    }
    return RL_OK;
}

}  // namespace

int class_param(rl_rule_t &rule, uint32_t bit, const char *v, size_t len, const char *whole, size_t wlen, char *err,
                size_t errlen)
{
    const int w = (int) wlen;
    if (rule.classes == nullptr) {
        return fail(err, errlen, "\"%.*s\": priority classes are not available here", w, whole);
    }
    rl_classes_t &k = *rule.classes;
    k.given |= bit;
    if (bit == P_PRIORITY || bit == P_FAIR) {
        if (len < 2 || v[0] != '$') {
            return fail(err, errlen,
                        bit == P_PRIORITY ? "invalid \"%.*s\": expected a $variable whose value names a request's "
                                            "class, like priority=$request_class"
                                          : "invalid \"%.*s\": expected a $variable whose value names a request's "
                                            "tenant, like fair=$http_x_tenant",
                        w, whole);
        }
        return RL_DECLINED;  // the glue evaluates it per request
    }
    if (bit == P_CLASSES) {
        return read_classes(k, v, len, whole, w, err, errlen);
    }
    // P_CLASS_DEFAULT: a name of classes=, checked once the rule is read
    if (len == 0 || len >= RL_CLASS_NAME_MAX) {
        return fail(err, errlen, "invalid \"%.*s\": expected a class of classes=", w, whole);
    }
    std::memcpy(k.fallback_name, v, len);
    k.fallback_name[len] = '\0';
    return RL_OK;
}

int classes_finish(rl_rule_t &rule, char *err, size_t errlen)
{
    if (rule.classes == nullptr) {
        return RL_OK;
    }
    rl_classes_t &k = *rule.classes;
    if (k.given == 0) {
        return RL_OK;
    }
    if (k.given == P_FAIR) {
        // fairness alone: one class, every request's
        std::memcpy(k.name[0], "all", 4);
        k.name_len[0] = 3;
        k.n = 1;
        return RL_OK;
    }
    if (!(k.given & P_PRIORITY)) {
        return fail(err, errlen,
                    "\"%s=\" applies with priority=$variable only: the variable names each request's class",
                    (k.given & P_CLASSES) ? "classes" : "class_default");
    }
    if (!(k.given & P_CLASSES)) {
        return fail(err, errlen,
                    "missing \"classes=\" for priority=: the classes, highest first, each with the share of the "
                    "slots kept for it if any, like classes=critical:20%%,standard,best_effort");
    }
    k.fallback = k.n - 1;
    if (k.given & P_CLASS_DEFAULT) {
        k.fallback = find_class(k, k.fallback_name, std::strlen(k.fallback_name));
        if (k.fallback == k.n) {
            char list[RL_CLASSES_MAX * (RL_CLASS_NAME_MAX + 2)] = "";
            size_t at = 0;
            for (uint32_t i = 0; i < k.n && at < sizeof(list); i++) {
                at += (size_t) std::snprintf(list + at, sizeof(list) - at, "%s%s", i ? ", " : "", k.name[i]);
            }
            return fail(err, errlen, "invalid \"class_default=%s\": expected a class of classes=: %s", k.fallback_name,
                        list);
        }
    }
    return RL_OK;
}

uint32_t class_reserved(const rl_classes_t &k, uint32_t klass, uint32_t open)
{
    return (uint32_t) (((uint64_t) open * k.share[klass] + 99) / 100);
}

}  // namespace rl

extern "C" {

uint32_t rl_class_of(const rl_rule_t *rule, const char *value, size_t len)
{
    const rl_classes_t *k = rule->classes;
    if (k == nullptr || k->n == 0) {
        return 0;
    }
    const uint32_t i = rl::find_class(*k, value, len);
    return i < k->n ? i : k->fallback;
}

const char *rl_class_name(const rl_rule_t *rule, uint32_t klass)
{
    const rl_classes_t *k = rule->classes;
    return k != nullptr && klass < k->n ? k->name[klass] : "?";
}

uint32_t rl_tenant_of(const char *value, size_t len)
{
    // a fixed key: a client who chooses its tenant's value may name any
    // tenant already, and gains nothing from a collision
    static const uint8_t k[16] = {'n', 'g', 'x', '-', 'r', 'a', 't', 'e', 'l', 'i', 'm', 'i', 't', 'f', 'a', 'i'};
    rl::SipHash h(k);
    h.update(value, len);
    return (uint32_t) h.finish() | 1;
}

const char *rl_shed_name(uint32_t shed)
{
    static const char *const names[] = {"", "full", "share", "queue", "waited", "fair"};
    return shed < sizeof(names) / sizeof(names[0]) ? names[shed] : "?";
}

}  // extern "C"
