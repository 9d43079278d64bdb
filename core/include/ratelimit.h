/*
 * ngx-ratelimit core: the C API, the only way in, in one header by reader:
 * a rule (ratelimit_rule.h), the key table and the key API
 * (ratelimit_table.h), a request (ratelimit_request.h), Redis
 * (ratelimit_redis.h), overrides (ratelimit_override.h), bandwidth
 * (ratelimit_bandwidth.h).  What the stats
 * answer is ratelimit_render.h's, redis_sync's ratelimit_sync.h's.
 */

#ifndef RATELIMIT_H
#define RATELIMIT_H

#include "ratelimit_rule.h"
#include "ratelimit_classes.h"
#include "ratelimit_table.h"
#include "ratelimit_request.h"
#include "ratelimit_redis.h"
#include "ratelimit_override.h"
#include "ratelimit_bandwidth.h"

#endif /* RATELIMIT_H */
