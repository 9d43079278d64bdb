
/*
 * ngx-ratelimit: a directive of one value, a word or a number, by one
 * table-driven handler for every protocol's module.
 */


#include "ngx_ratelimit_choice.h"


/* what every protocol's ratelimit_combine and ratelimit_log_level take */

static ngx_conf_enum_t  ngx_ratelimit_combine_values[] = {
    { ngx_string("all"), RL_COMBINE_ALL },
    { ngx_string("any"), RL_COMBINE_ANY },
    { ngx_null_string, 0 }
};

ngx_ratelimit_choice_t  ngx_ratelimit_combine_choice = {
    ngx_ratelimit_combine_values, 0, 0, "\"all\" or \"any\""
};


static ngx_conf_enum_t  ngx_ratelimit_log_levels[] = {
    { ngx_string("off"), NGX_RATELIMIT_LOG_OFF },
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};

ngx_ratelimit_choice_t  ngx_ratelimit_log_level_choice = {
    ngx_ratelimit_log_levels, 0, 0,
    "\"off\", \"info\", \"notice\", \"warn\" or \"error\""
};


/*
 * A directive of one value, a word or a number (cmd->post says which it
 * takes), whose error names the directive, the value and what it takes.
 */

char *
ngx_ratelimit_set_choice(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_int_t                n;
    ngx_str_t               *value;
    ngx_uint_t              *np, i;
    ngx_conf_enum_t         *e;
    ngx_ratelimit_choice_t  *choice;

    np = (ngx_uint_t *) (p + cmd->offset);

    if (*np != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    choice = cmd->post;

    for (e = choice->values, i = 0; e != NULL && e[i].name.len != 0; i++) {
        if (e[i].name.len == value[1].len
            && ngx_strcasecmp(e[i].name.data, value[1].data) == 0)
        {
            *np = e[i].value;
            return NGX_CONF_OK;
        }
    }

    n = ngx_atoi(value[1].data, value[1].len);

    if (choice->max > 0 && n >= choice->min && n <= choice->max) {
        *np = n;
        return NGX_CONF_OK;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive: expected %s",
                       &value[1], &cmd->name, choice->allowed);

    return NGX_CONF_ERROR;
}
