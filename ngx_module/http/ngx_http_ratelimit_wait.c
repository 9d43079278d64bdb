
/*
 * ngx-ratelimit: requests held on timers, without blocking the worker.
 *
 * A request a shaping rule delays (leaky_bucket) is held for its delay, as
 * limit_req holds one: the worker serves others meanwhile, and a client
 * that closes is noticed; what it reserved is given back if it is
 * finalized before its release (the context's cleanup).
 *
 * A request that waits for a slot (algorithm=concurrency with max_wait) is
 * in the key's queue, which the core keeps in the zone, first come first
 * served across every worker (RL_VERDICT_QUEUED, with a ticket).  Here a
 * worker holds its waiting requests and has them decided again (by the
 * handler's retry), in the order they came: when a slot is given back in
 * this worker (at once), on a timer every NGX_HTTP_RATELIMIT_WAIT_POLL ms
 * for slots given back in other workers, and a last time when a request's
 * max_wait is over.  A client that goes away while waiting leaves the queue
 * with its request (the context's cleanup).
 */


#include "ngx_http_ratelimit_wait.h"


#define NGX_HTTP_RATELIMIT_WAIT_POLL  20


static ngx_int_t ngx_http_ratelimit_held_over(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t **ctx);
static void ngx_http_ratelimit_delayed(ngx_http_request_t *r);
static void ngx_http_ratelimit_wait_timer(ngx_http_request_t *r);
static void ngx_http_ratelimit_wait_poll(ngx_event_t *ev);
static void ngx_http_ratelimit_wait_retry(ngx_http_ratelimit_ctx_t *ctx,
    ngx_uint_t last);
static ngx_int_t ngx_http_ratelimit_hold(ngx_http_request_t *r,
    ngx_http_event_handler_pt handler, ngx_msec_t timer);


/* This worker's waiting requests, oldest first, and its poll. */
static ngx_queue_t  ngx_http_ratelimit_waiting;
static ngx_event_t  ngx_http_ratelimit_poll_event;


/*
 * RL_ACTION_DELAY: held for rq.delay_ms, then the phases run on (its
 * checks are in its pool, for a refund).
 */

ngx_int_t
ngx_http_ratelimit_delay(ngx_http_request_t *r, ngx_http_ratelimit_ctx_t *ctx)
{
    ctx->delayed = 1;
    ctx->refund = ctx->decided_by != NGX_RATELIMIT_BY_REDIS;

    return ngx_http_ratelimit_hold(r, ngx_http_ratelimit_delayed,
                                   (ngx_msec_t) ctx->rq.delay_ms);
}


/*
 * A held request's timer fired: NGX_AGAIN while its write event is still
 * delayed (the event is rearmed), else NGX_OK and its context (held, the
 * request was not redirected: the context is in place), or NULL.
 */

static ngx_int_t
ngx_http_ratelimit_held_over(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t **ctx)
{
    ngx_event_t  *wev = r->connection->write;

    if (wev->delayed) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

        return NGX_AGAIN;
    }

    *ctx = ngx_http_get_module_ctx(r->main, ngx_http_ratelimit_module);

    return NGX_OK;
}


static void
ngx_http_ratelimit_delayed(ngx_http_request_t *r)
{
    ngx_http_ratelimit_ctx_t  *ctx;

    if (ngx_http_ratelimit_held_over(r, &ctx) != NGX_OK) {
        return;
    }

    if (ctx != NULL) {
        ctx->delayed = 0;
    }

    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;

    ngx_http_core_run_phases(r);
}


/*
 * RL_ACTION_WAIT: the request waits, at most rq.delay_ms from the first
 * time it was queued; retry decides it again.
 */

ngx_int_t
ngx_http_ratelimit_wait(ngx_http_request_t *r, ngx_http_ratelimit_ctx_t *ctx,
    ngx_http_ratelimit_retry_pt retry)
{
    if (!ctx->in_wait) {
        if (ngx_http_ratelimit_poll_event.handler == NULL) {
            ngx_queue_init(&ngx_http_ratelimit_waiting);
            ngx_http_ratelimit_poll_event.handler =
                                                 ngx_http_ratelimit_wait_poll;
            ngx_http_ratelimit_poll_event.log = ngx_cycle->log;
        }

        ngx_queue_insert_tail(&ngx_http_ratelimit_waiting, &ctx->wait_link);
        ctx->in_wait = 1;
        ctx->retry = retry;
        ctx->wait_until = ngx_current_msec + (ngx_msec_t) ctx->rq.delay_ms;

        if (ngx_http_ratelimit_hold(r, ngx_http_ratelimit_wait_timer,
                                    (ngx_msec_t) ctx->rq.delay_ms)
            != NGX_AGAIN)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    if (!ngx_http_ratelimit_poll_event.timer_set) {
        ngx_add_timer(&ngx_http_ratelimit_poll_event,
                      NGX_HTTP_RATELIMIT_WAIT_POLL);
    }

    return NGX_AGAIN;
}


/* A slot was given back in this worker: the waiting requests, at once. */

void
ngx_http_ratelimit_wait_wake(void)
{
    if (ngx_http_ratelimit_poll_event.handler != NULL
        && !ngx_queue_empty(&ngx_http_ratelimit_waiting)
        && !ngx_http_ratelimit_poll_event.posted)
    {
        ngx_post_event(&ngx_http_ratelimit_poll_event, &ngx_posted_events);
    }
}


/* The request leaves this worker's list (it ends, or waits no more). */

void
ngx_http_ratelimit_wait_leave(ngx_http_ratelimit_ctx_t *ctx)
{
    if (!ctx->in_wait) {
        return;
    }

    ngx_queue_remove(&ctx->wait_link);
    ctx->in_wait = 0;

    if (ngx_queue_empty(&ngx_http_ratelimit_waiting)) {
        if (ngx_http_ratelimit_poll_event.timer_set) {
            ngx_del_timer(&ngx_http_ratelimit_poll_event);
        }

        if (ngx_http_ratelimit_poll_event.posted) {
            ngx_delete_posted_event(&ngx_http_ratelimit_poll_event);
        }
    }
}


/* The request's own timer: its max_wait is over, a last decision. */

static void
ngx_http_ratelimit_wait_timer(ngx_http_request_t *r)
{
    ngx_http_ratelimit_ctx_t  *ctx;

    if (ngx_http_ratelimit_held_over(r, &ctx) != NGX_OK) {
        return;
    }

    if (ctx != NULL && ctx->in_wait) {
        ngx_http_ratelimit_wait_retry(ctx, 1);
    }
}


/* Every waiting request decided again, oldest first. */

static void
ngx_http_ratelimit_wait_poll(ngx_event_t *ev)
{
    ngx_queue_t               *q, *next;
    ngx_connection_t          *c;
    ngx_http_ratelimit_ctx_t  *ctx;

    for (q = ngx_queue_head(&ngx_http_ratelimit_waiting);
         q != ngx_queue_sentinel(&ngx_http_ratelimit_waiting);
         q = next)
    {
        next = ngx_queue_next(q);
        ctx = ngx_queue_data(q, ngx_http_ratelimit_ctx_t, wait_link);
        c = ctx->request->connection;

        ngx_http_ratelimit_wait_retry(ctx, 0);
        ngx_http_run_posted_requests(c);
    }

    if (!ngx_queue_empty(&ngx_http_ratelimit_waiting) && !ev->timer_set) {
        ngx_add_timer(ev, NGX_HTTP_RATELIMIT_WAIT_POLL);
    }
}


/*
 * A waiting request decided again (the handler's retry, which lets it go on
 * unless it waits still): its own timer is off meanwhile, so that a verdict
 * that delays it may set its own; one that waits still gets the rest of
 * its max_wait.
 */

static void
ngx_http_ratelimit_wait_retry(ngx_http_ratelimit_ctx_t *ctx, ngx_uint_t last)
{
    ngx_msec_int_t  left;
    ngx_event_t    *wev;

    wev = ctx->request->connection->write;

    if (wev->timer_set) {
        ngx_del_timer(wev);
    }

    wev->delayed = 0;

    ctx->retry(ctx->request, ctx, last);

    if (ctx->in_wait) {
        left = (ngx_msec_int_t) (ctx->wait_until - ngx_current_msec);
        wev->delayed = 1;
        ngx_add_timer(wev, left > 0 ? (ngx_msec_t) left : 1);
    }
}


/*
 * Holds a request on its write event's timer: reading goes on (a client
 * that closes is noticed), and handler runs when the timer fires.
 */

static ngx_int_t
ngx_http_ratelimit_hold(ngx_http_request_t *r,
    ngx_http_event_handler_pt handler, ngx_msec_t timer)
{
    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events);

    } else if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = handler;

    r->connection->write->delayed = 1;
    ngx_add_timer(r->connection->write, timer);

    return NGX_AGAIN;
}


/* A call to Redis that r waits for: its owner, whose log its lines use. */

void
ngx_http_ratelimit_redis_owner(ngx_ratelimit_redis_wait_t *w,
    ngx_http_request_t *r)
{
    w->owner = r;
    w->log = r->connection->log;
}


/*
 * The answer of a call a request waits for (answer NULL: Redis failed it)
 * handed to done, then the requests nginx posted meanwhile on its
 * connection run, as after any event of the connection's.
 */

void
ngx_http_ratelimit_redis_answered(ngx_ratelimit_redis_wait_t *w,
    rl_redis_answer_t *answer, ngx_ratelimit_redis_done_pt done)
{
    ngx_connection_t  *c;

    c = ((ngx_http_request_t *) w->owner)->connection;

    done(w, answer);

    ngx_http_run_posted_requests(c);
}
