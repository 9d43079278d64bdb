
/*
 * ngx-ratelimit: requests waiting for a slot (algorithm=concurrency with
 * max_wait).
 *
 * The core keeps the key's queue in the zone, first come first served
 * across every worker (rl_decide answers RL_VERDICT_QUEUED and gives the
 * request a ticket).  Here a worker holds its waiting requests without
 * blocking: each is decided again, in the order they came, when a slot is
 * given back in this worker (at once), on a timer every
 * NGX_HTTP_RATELIMIT_WAIT_POLL ms for slots given back in other workers,
 * and a last time when its max_wait is over (then it is refused, and leaves
 * the queue).  A client that goes away while waiting leaves the queue with
 * its request (the context's cleanup).
 */


#include "ngx_http_ratelimit_module.h"


#define NGX_HTTP_RATELIMIT_WAIT_POLL  20


static void ngx_http_ratelimit_wait_timer(ngx_http_request_t *r);
static void ngx_http_ratelimit_wait_poll(ngx_event_t *ev);
static void ngx_http_ratelimit_wait_retry(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_uint_t last);


/* This worker's waiting requests, oldest first, and its poll. */
static ngx_queue_t  ngx_http_ratelimit_waiting;
static ngx_event_t  ngx_http_ratelimit_poll_event;


/*
 * RL_VERDICT_QUEUED: the request waits, at most rq.delay_ms from the first
 * time it was queued.
 */

ngx_int_t
ngx_http_ratelimit_wait(ngx_http_request_t *r, ngx_http_ratelimit_ctx_t *ctx)
{
    ngx_msec_t  left;

    if (!ctx->in_wait) {
        if (ngx_http_ratelimit_poll_event.handler == NULL) {
            ngx_queue_init(&ngx_http_ratelimit_waiting);
            ngx_http_ratelimit_poll_event.handler =
                                                 ngx_http_ratelimit_wait_poll;
            ngx_http_ratelimit_poll_event.log = ngx_cycle->log;
        }

        ngx_queue_insert_tail(&ngx_http_ratelimit_waiting, &ctx->wait_link);
        ctx->in_wait = 1;
        ctx->wait_until = ngx_current_msec + (ngx_msec_t) ctx->rq.delay_ms;

        if (r->connection->read->ready) {
            ngx_post_event(r->connection->read, &ngx_posted_events);

        } else if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        r->read_event_handler = ngx_http_test_reading;
        r->write_event_handler = ngx_http_ratelimit_wait_timer;

        left = ctx->wait_until - ngx_current_msec;
        r->connection->write->delayed = 1;
        ngx_add_timer(r->connection->write, left);
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
    if (ctx->in_wait) {
        ngx_queue_remove(&ctx->wait_link);
        ctx->in_wait = 0;
    }

    if (ngx_http_ratelimit_poll_event.handler != NULL
        && ngx_queue_empty(&ngx_http_ratelimit_waiting))
    {
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
    ngx_event_t               *wev;
    ngx_http_ratelimit_ctx_t  *ctx;

    wev = r->connection->write;

    if (wev->delayed) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

        return;
    }

    ctx = ngx_http_ratelimit_get_ctx(r);
    if (ctx != NULL && ctx->in_wait) {
        ngx_http_ratelimit_wait_retry(r, ctx, 1);
    }
}


/* Every waiting request decided again, oldest first. */

static void
ngx_http_ratelimit_wait_poll(ngx_event_t *ev)
{
    ngx_queue_t               *q, *next;
    ngx_connection_t          *c;
    ngx_http_request_t        *r;
    ngx_http_ratelimit_ctx_t  *ctx;

    for (q = ngx_queue_head(&ngx_http_ratelimit_waiting);
         q != ngx_queue_sentinel(&ngx_http_ratelimit_waiting);
         q = next)
    {
        next = ngx_queue_next(q);
        ctx = ngx_queue_data(q, ngx_http_ratelimit_ctx_t, wait_link);
        r = ctx->request;
        c = r->connection;

        ngx_http_ratelimit_wait_retry(r, ctx, 0);
        ngx_http_run_posted_requests(c);
    }

    if (!ngx_queue_empty(&ngx_http_ratelimit_waiting) && !ev->timer_set) {
        ngx_add_timer(ev, NGX_HTTP_RATELIMIT_WAIT_POLL);
    }
}


/*
 * Decides a waiting request again (last: it may wait no longer, so that
 * a decision that would queue it refuses it); unless it still waits, it
 * leaves the list and the phases run on with the verdict.
 */

static void
ngx_http_ratelimit_wait_retry(ngx_http_request_t *r,
    ngx_http_ratelimit_ctx_t *ctx, ngx_uint_t last)
{
    ngx_int_t  rc;

    ctx->rq.last = last;

    rc = ngx_http_ratelimit_decide_again(r, ctx);

    if (ctx->rq.verdict == RL_VERDICT_QUEUED) {
        return;
    }

    ngx_http_ratelimit_wait_leave(ctx);

    if (r->connection->write->timer_set) {
        ngx_del_timer(r->connection->write);
    }

    r->connection->write->delayed = 0;

    ngx_http_ratelimit_resume(r, ctx, rc);
}
