/*
 * ngx-ratelimit core: priority classes of a rule of requests in flight
 * (algorithm=concurrency and algorithm=adaptive): priority=$variable names
 * a request's class among classes=, highest first, each with the share of
 * the key's slots kept for it (classes=critical:20%,standard,best_effort).
 * A rule points at its classes (rl_rule_t.classes), in memory its reader
 * gives before the parameters are parsed; a rule without priority= or
 * fair= has none (NULL), and is decided as if the classes did not exist.
 * fair=$variable names each request's tenant: a class's slots are shared
 * equally by the tenants that want them.
 */

#ifndef RATELIMIT_CLASSES_H
#define RATELIMIT_CLASSES_H

#include "ratelimit_rule.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RL_CLASSES_MAX     8       /* classes of a rule */
#define RL_CLASS_NAME_MAX  32      /* a class's name, with its NUL */

typedef struct rl_classes_s {
    uint32_t  n;                 /* classes, highest first (0: none yet) */
    uint32_t  fallback;          /* the class of a request whose value
                                    names none (class_default=; the
                                    lowest) */
    uint32_t  share[RL_CLASSES_MAX]; /* the percentage of the key's open
                                    slots kept for the class: no other
                                    class takes them while it does not use
                                    them (0: none) */
    uint32_t  given;             /* internal: which of priority=,
                                    classes=, class_default=, fair= were
                                    given (fair= alone: one class, "all") */
    uint32_t  name_len[RL_CLASSES_MAX];
    char      name[RL_CLASSES_MAX][RL_CLASS_NAME_MAX];
    char      fallback_name[RL_CLASS_NAME_MAX]; /* class_default= as
                                    written, until the rule is finished */
} rl_classes_t;

/*
 * Why a request of a rule with classes was not admitted (rl_check_t.shed):
 * every open slot is held; the free ones are kept for other classes'
 * shares; the free ones go to requests waiting ahead of it (higher
 * classes, or its own class's earlier ones) and the queue has no room; it
 * waited max_wait for one; its tenant (fair=) holds its fair share of its
 * class's slots, and the rest are kept for the class's other tenants.
 */
enum rl_shed {
    RL_SHED_NONE = 0,
    RL_SHED_FULL,
    RL_SHED_SHARE,
    RL_SHED_QUEUE,
    RL_SHED_WAITED,
    RL_SHED_FAIR
};

/*
 * rl_rule_parse() (ratelimit_rule.h) with room for the rule's classes
 * (rule->classes points at it when it has any, else is NULL): for tools
 * and tests.  priority=$variable is accepted, its value given to
 * rl_class_of() by the caller.
 */
RL_API int rl_rule_parse_classes(rl_rule_t *rule, char name[RL_NAME_MAX],
    rl_classes_t *classes, const char *text, char *err, size_t errlen);

/*
 * The class a request's value of priority=$variable names (the class's
 * name, exactly): its index, highest first; a value that names none, an
 * empty one too, is the rule's class_default= or its lowest class.  0 for
 * a rule without classes.
 */
RL_API uint32_t rl_class_of(const rl_rule_t *rule, const char *value,
    size_t len);

/*
 * The tenant a request's value of fair=$variable names (rl_check_t's
 * tenant): never 0.
 */
RL_API uint32_t rl_tenant_of(const char *value, size_t len);

/* A class's name ("?" for none), and a reason's ("full", "share",
   "queue", "waited", "fair"; "" for RL_SHED_NONE). */
RL_API const char *rl_class_name(const rl_rule_t *rule, uint32_t klass);
RL_API const char *rl_shed_name(uint32_t shed);

#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_CLASSES_H */
