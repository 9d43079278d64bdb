# nginx addon make script (sourced by configure after config): rules in
# objs/Makefile that build the C++ core into $RL_CORE_LIB, which config
# links into the module, and the dashboard page.  Nothing is written
# outside $NGX_OBJS.

RL_CXXFLAGS="$RL_CORE_CXXFLAGS ${CPPFLAGS:-} ${CXXFLAGS:-}"

mkdir -p $RL_CORE_DIR

cat << END                                                    >> $NGX_MAKEFILE

RL_CXX = $RL_CXX
RL_CXXFLAGS = $RL_CXXFLAGS
RL_AR = ${AR:-ar}
RL_CORE_INCS = -I $ngx_addon_dir/core/include -I $ngx_addon_dir/core/src
RL_CORE_DEPS = $RL_CORE_HDRS $ngx_addon_dir/config.make \\
	$ngx_addon_dir/core/build.conf

$RL_CORE_DIR/redis_script.cpp: $ngx_addon_dir/core/src/redis/ratelimit.lua \\
		$ngx_addon_dir/core/src/redis/embed.sh \\
		$ngx_addon_dir/core/include/ratelimit_rule.h
	sh $ngx_addon_dir/core/src/redis/embed.sh \\
		$ngx_addon_dir/core/src/redis/ratelimit.lua \$@

$RL_CORE_DIR/redis_script.o: $RL_CORE_DIR/redis_script.cpp
	\$(RL_CXX) -c \$(RL_CXXFLAGS) -o \$@ $RL_CORE_DIR/redis_script.cpp

END

rl_objs=$RL_CORE_DIR/redis_script.o

for rl_src in $RL_CORE_SOURCES
do
    rl_obj=$RL_CORE_DIR/`echo $rl_src | sed 's/\.cpp$//; s|/|_|g'`.o
    rl_src=$ngx_addon_dir/core/src/$rl_src
    rl_objs="$rl_objs $rl_obj"

    cat << END                                                >> $NGX_MAKEFILE
$rl_obj: \$(RL_CORE_DEPS) $rl_src
	\$(RL_CXX) -c \$(RL_CXXFLAGS) \$(RL_CORE_INCS) -o \$@ $rl_src

END
done

cat << END                                                    >> $NGX_MAKEFILE
$RL_CORE_LIB: $rl_objs
	rm -f \$@
	\$(RL_AR) rcs \$@ $rl_objs

END

# --- the dashboard page -------------------------------------------------
# dashboard/dashboard.html becomes the bytes of a C array in
# $NGX_OBJS/ngx_http_ratelimit_dashboard_page.h (dashboard/embed.sh: sh, od,
# sed), which ngx_http_ratelimit_dashboard.c includes ($NGX_OBJS is on the
# include path).  Made again when the page or the script changes.

rl_dashboard_page=$NGX_OBJS/ngx_http_ratelimit_dashboard_page.h
# (nginx puts an addon's object in addon/ and its folder's name)
rl_dashboard_obj=$NGX_OBJS/addon/api/ngx_http_ratelimit_dashboard.$ngx_objext

cat << END                                                    >> $NGX_MAKEFILE

$rl_dashboard_page:	$ngx_addon_dir/dashboard/dashboard.html \\
		$ngx_addon_dir/dashboard/embed.sh
	sh $ngx_addon_dir/dashboard/embed.sh \\
		$ngx_addon_dir/dashboard/dashboard.html \$@ \\
		ngx_http_ratelimit_dashboard_page

$rl_dashboard_obj:	$rl_dashboard_page

END
# --- end of the dashboard page ------------------------------------------
