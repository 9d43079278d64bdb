/*
 * ngx-ratelimit core: a request checked against every rule that
 * applies to it, decided as a whole, settled when it ends; a refused gRPC
 * call answered in gRPC's terms.
 */

#ifndef RATELIMIT_REQUEST_H
#define RATELIMIT_REQUEST_H

#include "ratelimit_rule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- deciding a request ------------------------------------------------- */

/*
 * A request is checked against every rule that applies to it, and decided
 * as a whole: rl_request_hash() outside the locks, then, holding the lock
 * of every table involved, rl_decide() decides each rule, combines them,
 * commits all that consume or none, and concludes (the verdict, the rule
 * the response's headers describe, the delay, each rule's outcome to
 * count).  Redis-decided requests are concluded by rl_redis_answer() from
 * the script's reply instead.  nginx and ratelimit-replay call these.
 */

enum rl_combine {
    RL_COMBINE_ALL = 0,         /* every rule must allow */
    RL_COMBINE_ANY              /* one allowing rule is enough */
};

/*
 * What the caller does with a request once it is decided (out of
 * rl_decide(), rl_redis_answer() and rl_request_fail()), a dry run
 * included: it passes; it is held for delay_ms first; it is refused; or it
 * waits for a slot (RL_VERDICT_QUEUED).
 */
enum rl_action {
    RL_ACTION_PASS = 0,
    RL_ACTION_DELAY,
    RL_ACTION_REFUSE,
    RL_ACTION_WAIT
};

/* What became of a request, as $ratelimit_status shows it (0: nothing yet,
   or the request's zones could not decide it and it passed or was refused
   without a decision to describe: no binding rule then). */
enum rl_status {
    RL_STATUS_NONE = 0,
    RL_STATUS_PASSED,
    RL_STATUS_DELAYED,
    RL_STATUS_REJECTED,
    RL_STATUS_DELAYED_DRY_RUN,
    RL_STATUS_REJECTED_DRY_RUN,
    RL_STATUS_EXEMPT,
    RL_STATUS_REJECTED_IN_FLIGHT  /* refused only because the key's
                                   requests in flight (charge=) hold what
                                   it has left: what their charges have
                                   left it would admit it; starts no ban */
};

enum rl_verdict {
    RL_VERDICT_PASSED = 0,
    RL_VERDICT_DELAYED,         /* admitted, to be held delay_ms first */
    RL_VERDICT_REJECTED,
    RL_VERDICT_EXEMPT,          /* every rule's key was empty */
    RL_VERDICT_QUEUED           /* waits for a slot (concurrency with
                                   max_wait): decide it again, with the
                                   same checks, when one may be free */
};

typedef struct {
    void                *table;     /* in: a table's memory */
    const rl_rule_t     *rule;      /* in */
    uint64_t             identity;  /* in: rl_rule_identity() */
    const void          *key;       /* in: key bytes (any length); none
                                       (key_len 0): the rule does not
                                       apply, the request is exempt */
    size_t               key_len;
    uint64_t             cost;      /* in */
    void                *data;      /* in: the caller's (its rule) */
    int                  counters;  /* in: its rule's counters in the table
                                       (rl_table_rule_slot()) plus 1, where
                                       its outcome counts, and its
                                       refusals among the top keys; 0:
                                       not counted */
    /* (the inputs above; a caller may zero the fields from here on) */
    uint64_t             tag;       /* out of rl_request_hash(), */
    uint64_t             hash;      /*   and the key's hash in its table,
                                       which tag is of, with the rule's
                                       identity */
    rl_decision_t        decision;  /* out of rl_decide(): this rule's;
                                       of a check other than the binding
                                       one, available_ms may be its
                                       reset_ms (a sliding window of a
                                       stack: worked out only where the
                                       headers may show it) */
    int                  outcome;   /* out: enum rl_outcome to count for
                                       the rule, or -1 */
    rl_state_t           before;    /* out: the head before */
    rl_state_t           after;     /*   and after a commit (for a refund) */
    int64_t              at;        /*   and the time it decided at */
    uint64_t             reserved;  /* out: what an admission spends when
                                       it is decided: the cost; for a rule
                                       with charge= and no cost=, at least
                                       a third of what a key can hold
                                       (check.cpp's reserve), at most what
                                       the key has left (the request's end
                                       gives it back and spends the
                                       charge) */
    int32_t              banning;   /* out: this refusal starts a ban
                                       (ban=; a dry run's would, and
                                       stores none) */
    int32_t              in_flight; /* out: a charge= rule refused it only
                                       for what the key's requests in
                                       flight reserved (it starts no ban) */
    uint64_t             charge;    /* in, for rl_request_end(): the units
                                       a charge= rule spends (RL_NO_CHARGE:
                                       none, the reservation stands) */
    uint64_t             charged;   /* out of rl_request_end(): units spent
                                       (the charge, capped) */
    uint32_t             slot;      /* concurrency: the slot the request
                                       holds in its zone's table, plus 1
                                       (0: none), in a Redis zone too (its
                                       server's own count of the key's
                                       requests in flight:
                                       rl_request_hold_here()); */
    uint32_t             klass;     /*   in: the request's class of a
                                       rule with priority= (rl_class_of()),
                                       0 the highest; */
    uint32_t             tenant;    /*   in: its tenant (fair=,
                                       rl_tenant_of()), 0: none; */
    uint32_t             shed;      /*   out: why it
                                       was not admitted (enum rl_shed,
                                       ratelimit_classes.h), out of
                                       rl_decide(); */
    uint32_t             ticket;    /*   its place in the key's queue while
                                       it waits (0: none).  Both out of
                                       rl_decide(), in to the next
                                       rl_decide() of a waiting request
                                       and to rl_request_end() */
    uint32_t             lease;     /* a Redis zone's concurrency: its
                                       lease's number in its worker (set
                                       before the call; 0 after it unless a
                                       lease was taken, or the request was
                                       admitted by on_redis_error=local,
                                       its lease then written into Redis
                                       once it answers again) */
    int32_t              full_here; /*   out of rl_request_hold_here(): its
                                       server held limit requests of the
                                       key already, and the script refuses
                                       it, whatever Redis holds */
    int32_t              capped;    /*   the charge exceeded the debt bound */
    int32_t              in_debt;   /*   the key owes more than its budget */
    /* an override (ratelimit_override.h), out of rl_decide(): */
    uint32_t             override;  /* the one that applied: enum
                                       rl_override_kind, with
                                       RL_OVERRIDE_EVERY_RULE for one of
                                       every rule, and a range's prefix
                                       length + 1 << 8; 0: none */
    uint32_t             key_held;  /* allow: key_len, kept while the
                                       check is exempt (key_len 0) */
    int64_t              until;     /* deny: when it ends (0: never) */
    int64_t              since;     /* a limit override's: when it was
                                       written (what a Redis zone's key
                                       carries its state over from) */
    const rl_rule_t     *configured; /* a limit override's: the rule as
                                       configured, `rule` being the rule
                                       with the override's limits, in
                                       memory from rq->room (the rule of
                                       an rl_rule_room_t) */
} rl_check_t;

/*
 * A rule as a limit override makes it, and what it was made from: memory
 * the caller gives (rl_request_t's room) and may give again as it was left
 * (a context reused by the next request): the core makes the rule again
 * only when the override, its configured rule or the zone's overrides
 * changed since.  Zeroed memory holds none.
 */
typedef struct {
    const rl_rule_t     *configured;
    const void          *entry;     /* the override's, in the zone */
    uint64_t             change;    /* the zone's overrides' change then */
    rl_rule_t            rule;
} rl_rule_room_t;

#define RL_OVERRIDE_EVERY_RULE  0x10

typedef struct rl_request_s  rl_request_t;

struct rl_request_s {
    rl_check_t          *checks;    /* in: one for each rule, in order */
    size_t               n;         /* in: at most RL_RULES_MAX */
    int                  combine;   /* in: enum rl_combine */
    int                  dry_run;   /* in: decide and commit what is
                                       admitted, but the caller neither
                                       rejects nor delays (outcomes say
                                       so) */
    int                  verdict;   /* out: enum rl_verdict (a dry run's:
                                       what it would have been) */
    size_t               binding;   /* out: the check the response's
                                       headers describe: the fewest
                                       remaining when passed, the longest
                                       delay when delayed, the longest
                                       wait when rejected; the first of
                                       equals; n: none (exempt, or a
                                       request no zone decided) */
    int                  action;    /* out: enum rl_action */
    int                  status;    /* out: enum rl_status */
    int64_t              delay_ms;  /* out: RL_VERDICT_DELAYED; QUEUED: the
                                       longest it may wait (max_wait) */
    uint32_t             holder;    /* in: who holds the slots it takes
                                       (concurrency): a process id */
    int                (*alive)(uint32_t holder);  /* in: 0 if a holder
                                       no longer exists: its slots and
                                       places are given back; NULL: every
                                       holder is */
    uint64_t             lease;     /* in, a Redis zone's concurrency:
                                       who holds its leases, unique in the
                                       fleet (a random number of the
                                       worker's); with server, holder and
                                       each check's slot it names a lease */
    uint64_t             server;    /*   and the server it is of: one
                                       random number for all the workers of
                                       one nginx (rl_redis_server_id(), kept
                                       in the zone), the first part of its
                                       leases' names; a peek counts the
                                       key's live leases of this server */
    int                  last;      /* in: it may wait no longer: a
                                       decision that would queue it
                                       refuses it, and it leaves the
                                       queues */
    uint32_t             overridden; /* out of rl_decide(): checks that
                                       met an override (the caller zeroes
                                       it first) */
    rl_rule_room_t      *room;      /* in: memory for the rule a limit
                                       override makes, living as long as
                                       the request, for the first check
                                       that meets one (taken: NULL); */
    rl_rule_room_t    *(*more_room)(rl_request_t *rq); /* and for the
                                       next (NULL, or NULL returned: their
                                       limit overrides are not applied) */
    int64_t              latency_ms;/* in, for rl_request_end(): how long
                                       the upstream took to answer it (the
                                       request's own time where no
                                       upstream ran); -1: unknown, the time
                                       since it was admitted */
    uint32_t             end_status;/*   and the status it ended with (0:
                                       unknown): algorithm=adaptive learns
                                       from both */
    uint8_t              order[RL_RULES_MAX]; /* out of rl_request_hash():
                                       one check of each table the request
                                       uses, in the order to lock them (by
                                       address, so that two requests never
                                       wait for each other); */
    uint32_t             locks;     /*   how many (0: exempt from every
                                       rule) */
};

/* Hashes every key with its table's secret, and orders the tables to lock
   (order, locks); needs no lock.  The key of a rule keyed on the client's
   address that is an IPv4-mapped IPv6 address is made its IPv4 address
   first (key and key_len moved past the mapped prefix): one client, one
   key, whichever way it came. */
RL_API void rl_request_hash(rl_request_t *rq);

/*
 * A request its zones could not decide (a Redis zone whose server does not
 * answer, with on_redis_error=allow or deny): it passes, or is refused (a
 * dry run: passes), with no binding rule and no outcome counted.
 */
RL_API void rl_request_fail(rl_request_t *rq, int refuse);

/*
 * The Retry-After of a decision, in whole seconds as the headers, the
 * variables and the key API show it: 0 for an admission, or a refusal
 * with no time to wait for (a concurrency slot); else its wait rounded up,
 * at least 1.
 */
RL_API uint64_t rl_retry_after_seconds(const rl_decision_t *d);

/* Milliseconds as whole seconds, rounded up (headers never promise too
   early); 0 for none. */
RL_API uint64_t rl_seconds(int64_t ms);

/*
 * The RateLimit-Policy field of n rules (the IETF draft, revision 10): each
 * rule's policy, "name";q=QUOTA;w=SECONDS (no w for a policy with no
 * window: concurrency), ", " between, as at now_ms.  Writes at most cap
 * bytes, whole items only (RL_POLICY_ITEM_MAX a rule is always enough);
 * returns how many.
 */
#define RL_POLICY_ITEM_MAX  (RL_NAME_MAX + 64)
RL_API size_t rl_policy_field(const rl_rule_t *const *rules, size_t n,
    int64_t now_ms, char *out, size_t cap);

/* 1 if a rule's policy is the same for every request (no variable limit
   or burst, no monthly quota): the field can be written once. */
RL_API int rl_rule_policy_fixed(const rl_rule_t *rule);

/*
 * A Redis zone's request, before it is sent: the overrides its checks meet
 * (rl_decide finds them itself), under its zone's lock.  Returns 1 if a deny
 * override refuses it (with combine any: every rule that applies), or
 * allow overrides exempt it from every rule: it is concluded, and not sent;
 * else 0, a limit override's rule in
 * rq->room's memory, the checks an override exempts (allow; deny, with
 * combine any) exempt for the call.
 */
RL_API int rl_request_overrides(rl_request_t *rq, int64_t now_ms);

/* Decides and commits the request; returns its verdict (see above). */
RL_API int rl_decide(rl_request_t *rq, int64_t now_ms);

/*
 * The check whose override a decided request reports ($ratelimit_override):
 * the binding rule's, else the first that met one; rq->n if none met one.
 * (Inline: each request that met an override asks, and a call cost it a
 * fifth of what meeting the override costs.)
 */
static inline size_t
rl_request_override_check(const rl_request_t *rq)
{
    size_t  i;

    if (rq->binding < rq->n && rq->checks[rq->binding].override != 0) {
        return rq->binding;
    }

    for (i = 0; i < rq->n && rq->checks[i].override == 0; i++) {
        /* the first that met one */
    }

    return i;
}


/*
 * Gives back what an admitted request reserved, when it is abandoned before
 * it was served (a delayed request whose client left, or that another module
 * finalized): each rule's state moves back by the request's cost, never to
 * before now_ms (gcra, token_bucket, leaky_bucket: the requests queued
 * behind keep their slots, the next one waits only for those), and a window
 * uncounts it if it still holds it.  Call it once per request.  The caller
 * holds the locks.
 */
RL_API void rl_request_refund(rl_request_t *rq, int64_t now_ms);

/*
 * The end of a request (nginx's log phase), whatever ended it: each
 * concurrency rule's slot it holds, and its place in a queue, are given
 * back (returns the slots freed, for the requests waiting for them); and
 * each check of a rule with charge= that admitted it gives back the cost
 * it reserved and spends its charge instead (RL_NO_CHARGE: the reservation
 * stands),
 * even beyond the key's budget: the key then owes (is in debt) and is
 * refused until time repays it.  A key owes at most one limit beyond an
 * empty budget: a larger charge is capped there, and `capped` says so.  A
 * request refused, or not admitted by the rule (combine any), is never
 * charged.  Call it once per request; the caller holds the locks
 * (rq->order).
 */
#define RL_NO_CHARGE  UINT64_MAX
RL_API int rl_request_end(rl_request_t *rq, int64_t now_ms);

/* 1 if rl_request_end() spends a charge for this check (its rule has
   charge= and admitted the request) when its charge is given. */
RL_API int rl_check_charges(const rl_check_t *check);

/*
 * 1 if a request that ended so spends its charge= value for this check
 * (evaluate it then); 0 if what it reserved stands (RL_NO_CHARGE): a check
 * that charges nothing, or a request its client abandoned (abandoned: it
 * ended with 499, the client gone before the response) of a rule with
 * abandoned=keep, the default, so that a client cannot make its attempts
 * free by leaving before their answer.
 */
RL_API int rl_check_charge_wanted(const rl_check_t *check, int abandoned);

/*
 * What a refusal answers where the location does not say
 * (ratelimit_status, ratelimit_grpc_status): 429 and RESOURCE_EXHAUSTED, the
 * client's own excess; 503 and UNAVAILABLE when the binding rule refuses for
 * its upstream's sake (algorithm=adaptive: the upstream is overloaded, which
 * a client may retry elsewhere).  No binding rule: the first.
 */
RL_API void rl_request_refusal(const rl_request_t *rq, uint32_t *status,
    uint32_t *grpc_status);

/* 1 if the rule's requests hold slots while they run (requests in flight,
   algorithm=concurrency): its request's end gives them back. */
RL_API int rl_rule_holds_slots(const rl_rule_t *rule);

/* 1 if the rule's limit follows what its upstream shows (algorithm=
   adaptive): its key names the upstream, a constant one too. */
RL_API int rl_rule_per_upstream(const rl_rule_t *rule);

/* Bytes of the block a rule's state needs beyond the table's slot (0 for
   most algorithms): what a table's layout is planned from. */
RL_API uint32_t rl_rule_block_size(const rl_rule_t *rule);



/*
 * A Redis zone's request, before its call: each concurrency check takes one
 * of its key's slots in this server's zone (slot), as a local decision
 * would, or, if none is free, is marked full_here (the script refuses it);
 * a key the zone has no room for takes none, and Redis decides alone.  So
 * the zone counts every request of the server in flight, whoever decided
 * it: a decision by on_redis_error=local while Redis is away counts those
 * holding leases, and one in Redis when it answers again those it admitted
 * meanwhile, before their leases are back in Redis.  Returns the slots the
 * request holds there.  The caller holds the locks.
 */
RL_API int rl_request_hold_here(rl_request_t *rq, int64_t now_ms);

/*
 * Gives back the slots rl_request_hold_here() took: every one (all: the
 * request ended, or is decided again by on_redis_error), or those of the
 * checks that hold no lease (once Redis decided: a refusal takes none).
 * Returns the slots the request still holds there.  The caller holds the
 * locks.
 */
RL_API int rl_request_free_here(rl_request_t *rq, int64_t now_ms, int all);

/*
 * Counts a request decided elsewhere (rl_redis_answer()) as rl_decide()
 * counts its own: each rule's outcome in its counters, a lease it holds
 * (rl_redis_holds_lease()) among its rule's slots in flight, and a refusal
 * among the keys its rules refuse most.  The caller holds the locks.
 */
RL_API void rl_request_count(rl_request_t *rq, int64_t now_ms);

/*
 * A request decided elsewhere ends: the leases rl_request_count() counted
 * in flight given back.  Needs no lock.
 */
RL_API void rl_request_count_leases_end(const rl_request_t *rq);

/*
 * Counts what a request's end charged elsewhere (a settle's reply, judged by
 * rl_redis_answer()) as rl_request_end() counts its own: each settled
 * check's units, and whether it left its key in debt, in its rule's
 * counters.  The caller holds the locks.
 */
RL_API void rl_request_count_charges(const rl_request_t *rq);



/* ---- gRPC: a refused call answered in gRPC's terms ---------------------- */

/*
 * A refused gRPC call gets a gRPC answer (ratelimit_grpc_status), not an
 * HTTP error that gRPC would read as UNAVAILABLE and retry at once: a
 * Trailers-Only response (HTTP 200, no body) whose grpc-status says why,
 * grpc-message what happened and when to come back, and
 * grpc-retry-pushback-ms the wait (gRFC A6: a client with a retry policy
 * waits exactly that, a negative value tells it not to retry, none lets it
 * use its own backoff).  gRPC-Web carries the same trailers in its body.
 */

enum rl_grpc_kind {
    RL_GRPC_NONE = 0,           /* not a gRPC call */
    RL_GRPC_NATIVE,             /* application/grpc[+fmt] */
    RL_GRPC_WEB,                /* application/grpc-web[+fmt] */
    RL_GRPC_WEB_TEXT            /* application/grpc-web-text[+fmt]: the
                                   body is base64 */
};

#define RL_GRPC_STATUS_MIN         1    /* CANCELLED */
#define RL_GRPC_STATUS_MAX         16   /* UNAUTHENTICATED */
#define RL_GRPC_RESOURCE_EXHAUSTED 8    /* the default */
#define RL_GRPC_UNAVAILABLE        14   /*   of an overload (adaptive) */

/*
 * What a request is: a gRPC call is a POST (post set) whose Content-Type is
 * application/grpc, application/grpc-web or application/grpc-web-text (any
 * case), alone or with a "+format" suffix, then optional parameters (";"),
 * as gRPC's PROTOCOL-HTTP2 and PROTOCOL-WEB write them.  *type_len is the
 * length of the type with its suffix (no parameters): the response's
 * Content-Type.  Any other request, a GET too (a 200 of a GET could be
 * cached), is RL_GRPC_NONE.
 */
RL_API int rl_grpc_kind(int post, const char *content_type, size_t len,
    size_t *type_len);

#define RL_GRPC_MESSAGE_MAX   256
#define RL_GRPC_PUSHBACK_MAX  12

typedef struct {
    char    message[RL_GRPC_MESSAGE_MAX];   /* grpc-message, percent-encoded */
    size_t  message_len;
    char    pushback[RL_GRPC_PUSHBACK_MAX]; /* grpc-retry-pushback-ms */
    size_t  pushback_len;                   /*   0: none */
} rl_grpc_answer_t;

/*
 * The answer to a refused call, from the binding rule's decision (NULL: a
 * refusal with no decision, on_redis_error=deny): "rate limit exceeded,
 * retry in N s" (N: Retry-After's seconds) with the exact wait in ms as the
 * pushback; a wait beyond a signed 32-bit pushback (24.8 days), or a cost
 * the rule can never admit, "-1": do not retry; no time to wait for (a
 * concurrency slot; no decision), no pushback: the client's own backoff.
 * No key, no limit, no name of a rule.
 */
RL_API void rl_grpc_answer(const rl_decision_t *d, rl_grpc_answer_t *out);

/*
 * len bytes percent-encoded as grpc-message must be: every byte but
 * printable ASCII (0x20-0x7e) and '%' itself as %XX.  Writes at most 3 * len
 * bytes; returns how many.
 */
RL_API size_t rl_grpc_percent_encode(char *out, const void *in, size_t len);

/*
 * The body of a refused gRPC-Web call (kind RL_GRPC_WEB or
 * RL_GRPC_WEB_TEXT): one trailers frame (flags 0x80, a 32-bit big-endian
 * length, then "grpc-status: S\r\n" and the answer's grpc-message and
 * grpc-retry-pushback-ms as lines of an HTTP/1 header block), in base64 for
 * RL_GRPC_WEB_TEXT.  Writes at most RL_GRPC_WEB_BODY_MAX bytes; returns how
 * many.
 */
#define RL_GRPC_WEB_BODY_MAX  512
RL_API size_t rl_grpc_web_body(char *out, int kind, unsigned status,
    const rl_grpc_answer_t *a);

#ifdef __cplusplus
}
#endif

#endif /* RATELIMIT_REQUEST_H */
