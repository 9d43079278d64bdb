
/*
 * ngx-ratelimit: a directive of one value, a word or a number
 * (ngx_ratelimit_choice.c), whatever the protocol's block.
 */

#ifndef NGX_RATELIMIT_CHOICE_H
#define NGX_RATELIMIT_CHOICE_H


#include "ngx_ratelimit_types.h"


/*
 * What a directive of one value takes: words (values, NULL: none), or a
 * number from min to max (max 0: none); allowed, for its error message.
 */
typedef struct {
    ngx_conf_enum_t             *values;
    ngx_int_t                    min;
    ngx_int_t                    max;
    char                        *allowed;
} ngx_ratelimit_choice_t;


/* ratelimit_log_level off */
#define NGX_RATELIMIT_LOG_OFF  0


extern ngx_ratelimit_choice_t  ngx_ratelimit_combine_choice;
extern ngx_ratelimit_choice_t  ngx_ratelimit_log_level_choice;

char *ngx_ratelimit_set_choice(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* NGX_RATELIMIT_CHOICE_H */
