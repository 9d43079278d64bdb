# nginx addon make script, sourced by configure after config: rules it adds
# to objs/Makefile.  Nothing is written outside $NGX_OBJS.

# --- the dashboard page -------------------------------------------------
# dashboard/dashboard.html becomes the bytes of a C array in
# $NGX_OBJS/ngx_http_ratelimit_dashboard_page.h (dashboard/embed.sh: sh, od,
# sed), which ngx_http_ratelimit_dashboard.c includes ($NGX_OBJS is on the
# include path).  Made again when the page or the script changes.

rl_dashboard_page=$NGX_OBJS/ngx_http_ratelimit_dashboard_page.h
rl_dashboard_obj=$NGX_OBJS/addon/ngx_module/ngx_http_ratelimit_dashboard.$ngx_objext

cat << END                                                    >> $NGX_MAKEFILE

$rl_dashboard_page:	$ngx_addon_dir/dashboard/dashboard.html \\
		$ngx_addon_dir/dashboard/embed.sh
	sh $ngx_addon_dir/dashboard/embed.sh \\
		$ngx_addon_dir/dashboard/dashboard.html \$@ \\
		ngx_http_ratelimit_dashboard_page

$rl_dashboard_obj:	$rl_dashboard_page

END
# --- end of the dashboard page ------------------------------------------
