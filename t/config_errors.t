#!/usr/bin/perl
# Every invalid directive fails `nginx -t` with a message naming the
# directive, the parameter, the value and what is allowed; valid edge values
# pass.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $t = RLTest->new();

# [ what, http-level text, location-level text, message regex ]
my @bad = (
    [ 'unknown algorithm', '', 'ratelimit zone=z limit=5 algorithm=magic;',
      qr/"ratelimit" directive: invalid "algorithm=magic": expected algorithm=gcra, token_bucket, fixed_window, sliding_window, sliding_log, leaky_bucket, quota, concurrency or adaptive/ ],
    [ 'adaptive: min over limit', '', 'ratelimit zone=z key=b algorithm=adaptive limit=8 min=9;',
      qr/"ratelimit" directive: "min=9" exceeds limit=8: min= is the least limit, limit= the most/ ],
    [ 'adaptive: bad tolerance', '', 'ratelimit zone=z key=b algorithm=adaptive limit=8 tolerance=0.9;',
      qr/"ratelimit" directive: invalid "tolerance=0.9": expected a number from 1.05 to 10 with at most two decimals/ ],
    [ 'adaptive: interval too short', '', 'ratelimit zone=z key=b algorithm=adaptive limit=8 interval=10ms;',
      qr/"ratelimit" directive: invalid "interval=10ms": expected a time from 50ms to 1m/ ],
    [ 'adaptive: a period', '', 'ratelimit zone=z key=b algorithm=adaptive limit=8 period=1s;',
      qr/"ratelimit" directive: "period=" does not apply to algorithm=adaptive/ ],
    [ 'tolerance on gcra', '', 'ratelimit zone=z limit=8 tolerance=2;',
      qr/"ratelimit" directive: "tolerance=" does not apply to algorithm=gcra: tolerance is for adaptive/ ],
    [ 'limit zero', '', 'ratelimit zone=z limit=0;',
      qr/"ratelimit" directive: invalid "limit=0": expected an integer from 1 to 1000000000/ ],
    [ 'limit negative', '', 'ratelimit zone=z limit=-5;', qr/invalid "limit=-5": expected an integer from 1/ ],
    [ 'limit not a number', '', 'ratelimit zone=z limit=abc;', qr/invalid "limit=abc": expected an integer/ ],
    [ 'limit too large', '', 'ratelimit zone=z limit=1000000001;',
      qr/invalid "limit=1000000001": expected an integer from 1 to 1000000000/ ],
    [ 'bad period', '', 'ratelimit zone=z limit=5 period=fast;',
      qr/invalid "period=fast": expected a time from 1ms to 366d/ ],
    [ 'zero period', '', 'ratelimit zone=z limit=5 period=0s;', qr/invalid "period=0s": expected a time/ ],
    [ 'period too long', '', 'ratelimit zone=z limit=5 period=400d;', qr/invalid "period=400d"/ ],
    [ 'burst zero', '', 'ratelimit zone=z limit=5 burst=0;',
      qr/invalid "burst=0": expected an integer from 1 to 1000000000/ ],
    [ 'unknown parameter', '', 'ratelimit zone=z limit=5 colour=red;',
      qr/unknown parameter "colour=red": expected zone=, key=, algorithm=, limit=/ ],
    [ 'parameter without value', '', 'ratelimit zone=z limit=5 fast;',
      qr/invalid parameter "fast": expected name=value/ ],
    [ 'duplicate parameter', '', 'ratelimit zone=z limit=5 limit=6;',
      qr/duplicate parameter "limit=6": each parameter may be given once/ ],
    [ 'duplicate key', '', 'ratelimit zone=z key=$uri key=$host limit=5;',
      qr/duplicate parameter "key=\$host"/ ],
    [ 'missing zone', '', 'ratelimit limit=5;', qr/"ratelimit" directive: missing "zone=": expected zone=NAME/ ],
    [ 'empty zone', '', 'ratelimit zone= limit=5;', qr/"ratelimit" directive: invalid "zone=": expected one zone=NAME/ ],
    [ 'missing limit', '', 'ratelimit zone=z period=1s;',
      qr/"ratelimit" directive: missing "limit=": every rule needs one/ ],
    [ 'zone never declared', '', 'ratelimit zone=nope limit=5;',
      qr/"ratelimit" directive: zone=nope is not declared: expected a "ratelimit_zone nope SIZE;"/ ],
    [ 'zone too small', 'ratelimit_zone small 16k;', '',
      qr/"ratelimit_zone" directive: size "16k" of zone "small" is too small: the minimum is 32k/ ],
    [ 'zone size not a size', 'ratelimit_zone big lots;', '',
      qr/"ratelimit_zone" directive: invalid size "lots" of zone "big": expected bytes, k or m, like 32k or 10m/ ],
    [ 'zone size in g', 'ratelimit_zone big 2g;', '',
      qr/"ratelimit_zone" directive: invalid size "2g" of zone "big": nginx's sizes take k or m, not g: expected 2048m/ ],
    # zone names: what rule names may be, shown escaped when refused
    [ 'zone name with a slash', 'ratelimit_zone a/b 1m;', '',
      qr/"ratelimit_zone" directive: invalid zone name "a\/b": expected 1 to 63 letters, digits, "_", "-" or "\."/ ],
    [ 'zone name with a newline', qq{ratelimit_zone "a\nb" 1m;}, '',
      qr/"ratelimit_zone" directive: invalid zone name "a\\x0ab": expected 1 to 63 letters/ ],
    [ 'zone name not UTF-8', "ratelimit_zone a\xff\xfeb 1m;", '',
      qr/"ratelimit_zone" directive: invalid zone name "a\\xff\\xfeb": expected 1 to 63 letters/ ],
    [ 'zone name in UTF-8', "ratelimit_zone caf\xc3\xa9 1m;", '',
      qr/invalid zone name "caf\\xc3\\xa9": expected 1 to 63 letters/ ],
    [ 'zone name of 64 bytes', 'ratelimit_zone ' . ('n' x 64) . ' 1m;', '',
      qr/"ratelimit_zone" directive: invalid zone name "n{64}": expected 1 to 63 letters/ ],
    [ 'zone name with a quote', q{ratelimit_zone 'a"b' 1m;}, '',
      qr/invalid zone name "a\\x22b": expected 1 to 63 letters/ ],
    [ 'zone name empty', 'ratelimit_zone "" 1m;', '', qr/"ratelimit_zone" directive: invalid zone name "": expected 1 to 63/ ],
    [ 'zone= with a slash', '', 'ratelimit zone=a/b limit=5;',
      qr/"ratelimit" directive: invalid zone name "a\/b": expected 1 to 63 letters, digits, "_", "-" or "\."/ ],
    [ 'zone= with a newline', '', qq{ratelimit "zone=a\nb" limit=5;},
      qr/"ratelimit" directive: invalid zone name "a\\x0ab"/ ],
    [ 'zone declared twice with another size', 'ratelimit_zone z 2m;', '',
      qr/"ratelimit_zone" directive: zone "z" is already declared \(size 1048576\)/ ],
    [ 'zone with an unknown parameter', 'ratelimit_zone other 1m fast;', '',
      qr/"ratelimit_zone" directive: unknown parameter "fast"/ ],
    [ 'cost never admissible', '', 'ratelimit zone=z limit=5 cost=6;',
      qr/"cost=6" can never be admitted: it exceeds burst=5/ ],
    [ 'cost negative', '', 'ratelimit zone=z limit=5 cost=-1;',
      qr/invalid "cost=-1": expected an integer from 0 to 1000000000, or a \$variable/ ],
    [ 'burst with fixed_window', '', 'ratelimit zone=z algorithm=fixed_window limit=5 burst=3;',
      qr/"burst=3" does not apply to algorithm=fixed_window: burst is for gcra and token_bucket/ ],
    [ 'align with gcra', '', 'ratelimit zone=z limit=5 align=first;',
      qr/"align=" does not apply to algorithm=gcra: align is for fixed_window/ ],
    [ 'bad align', '', 'ratelimit zone=z algorithm=fixed_window limit=5 align=noon;',
      qr/invalid "align=noon": expected align=epoch or align=first/ ],
    [ 'bad name', '', 'ratelimit zone=z limit=5 name=a/b;',
      qr/invalid "name=a\/b": expected 1 to 63 letters, digits, "_", "-" or "\."/ ],
    [ 'status out of range', '', 'ratelimit_status 200;',
      qr/invalid value "200" in "ratelimit_status" directive: expected a status code from 400 to 599/ ],
    [ 'status not a number', '', 'ratelimit_status teapot;',
      qr/invalid value "teapot" in "ratelimit_status" directive: expected a status code from 400 to 599/ ],
    [ 'status duplicate', '', 'ratelimit_status 429; ratelimit_status 503;',
      qr/"ratelimit_status" directive is duplicate/ ],
    [ 'gRPC status zero', '', 'ratelimit_grpc_status 0;',
      qr/invalid value "0" in "ratelimit_grpc_status" directive: expected a gRPC status code from 1 to 16, or "off"/ ],
    [ 'gRPC status too large', '', 'ratelimit_grpc_status 17;',
      qr/invalid value "17" in "ratelimit_grpc_status" directive: expected a gRPC status code from 1 to 16/ ],
    [ 'gRPC status a name', '', 'ratelimit_grpc_status RESOURCE_EXHAUSTED;',
      qr/invalid value "RESOURCE_EXHAUSTED" in "ratelimit_grpc_status" directive: expected a gRPC status code/ ],
    [ 'gRPC status duplicate', '', 'ratelimit_grpc_status 8; ratelimit_grpc_status off;',
      qr/"ratelimit_grpc_status" directive is duplicate/ ],
    [ 'headers mode', '', 'ratelimit_headers loud;',
      qr/invalid value "loud" in "ratelimit_headers" directive: expected "off", "legacy", "ietf" or "both"/ ],
    [ 'log level', '', 'ratelimit_log_level debug;',
      qr/invalid value "debug" in "ratelimit_log_level" directive: expected "off", "info", "notice", "warn" or "error"/ ],
    [ 'combine', '', 'ratelimit_combine most;',
      qr/invalid value "most" in "ratelimit_combine" directive: expected "all" or "any"/ ],
    [ 'dry run', '', 'ratelimit_dry_run maybe;',
      qr/invalid value "maybe" in "ratelimit_dry_run" directive, it must be "on" or "off"/ ],
    [ 'zone in a location', '', 'ratelimit_zone inner 1m;', qr/"ratelimit_zone" directive is not allowed here/ ],
    [ 'no arguments', '', 'ratelimit;', qr/invalid number of arguments in "ratelimit" directive/ ],
    [ 'buckets out of range', '', 'ratelimit zone=z algorithm=sliding_window limit=5 buckets=0;',
      qr/invalid "buckets=0": expected an integer from 1 to 100/ ],
    [ 'sliding_log limit too large', '', 'ratelimit zone=z algorithm=sliding_log limit=20000;',
      qr/"limit=20000" is too large for algorithm=sliding_log: it keeps one time a unit, at most 10000/ ],
    [ 'max_delay with gcra', '', 'ratelimit zone=z limit=5 max_delay=1s;',
      qr/"max_delay=" does not apply to algorithm=gcra: max_delay is for leaky_bucket/ ],
    [ 'bad max_delay', '', 'ratelimit zone=z algorithm=leaky_bucket limit=5 max_delay=later;',
      qr/invalid "max_delay=later": expected a time from 0ms to 366d/ ],
    [ 'delay with gcra', '', 'ratelimit zone=z limit=5 delay=2;',
      qr/"ratelimit" directive: "delay=" does not apply to algorithm=gcra: delay is for leaky_bucket/ ],
    [ 'bad delay', '', 'ratelimit zone=z algorithm=leaky_bucket limit=5 delay=some;',
      qr/invalid "delay=some": expected an integer from 0 to 1000000000/ ],
    [ 'delay too large', '', 'ratelimit zone=z algorithm=leaky_bucket limit=1 period=366d delay=1000000000;',
      qr/limit=1 and delay=1000000000 with "period=366d" and max_delay are too large: \(limit \+ delay\) x period/ ],
    [ 'quota without reset', '', 'ratelimit zone=z algorithm=quota limit=5;',
      qr/missing "reset=" for algorithm=quota: expected reset=daily, weekly or monthly/ ],
    [ 'quota with period', '', 'ratelimit zone=z algorithm=quota limit=5 reset=daily period=1d;',
      qr/"period=" does not apply to algorithm=quota: its period is the calendar's/ ],
    [ 'bad utc_offset', '', 'ratelimit zone=z algorithm=quota limit=5 reset=weekly utc_offset=+15:00;',
      qr/invalid "utc_offset=\+15:00": expected \+HH:MM or -HH:MM, at most 14:00/ ],
    [ 'abandoned= without charge=', '', 'ratelimit zone=z limit=5 abandoned=charge;',
      qr/"ratelimit" directive: "abandoned=" applies to rules with charge= only: it says what a request its client abandoned spends/ ],
    [ 'a bad abandoned=', '', 'ratelimit zone=z limit=5 charge=\$status abandoned=free;',
      qr/invalid "abandoned=free": expected abandoned=keep or abandoned=charge/ ],
    [ 'zone too small for its sliding_log', 'ratelimit_zone small 64k;',
      'ratelimit zone=small algorithm=sliding_log limit=10000 period=1h;',
      qr/"ratelimit_zone" directive: zone "small" of size 65536 is too small for its rules' states of up to 40032 bytes a key: it needs at least 263k/ ],
    [ 'redis without port', 'ratelimit_zone r 1m redis=127.0.0.1;', '',
      qr/"ratelimit_zone" directive: invalid "redis=127.0.0.1" of zone "r": no port; expected redis=HOST:PORT/ ],
    [ 'redis bad port', 'ratelimit_zone r 1m redis=127.0.0.1:99999;', '',
      qr/invalid "redis=127.0.0.1:99999" of zone "r": invalid port; expected redis=HOST:PORT/ ],
    [ 'redis_timeout zero', 'ratelimit_zone r 1m redis=127.0.0.1:6379 redis_timeout=0;', '',
      qr/invalid "redis_timeout=0" of zone "r": expected redis_timeout=1ms..60s/ ],
    [ 'redis_timeout not a time', 'ratelimit_zone r 1m redis=127.0.0.1:6379 redis_timeout=soon;', '',
      qr/invalid "redis_timeout=soon" of zone "r"/ ],
    [ 'redis_pool too large', 'ratelimit_zone r 1m redis=127.0.0.1:6379 redis_pool=65;', '',
      qr/invalid "redis_pool=65" of zone "r": .*redis_pool=1..64/ ],
    [ 'redis_db negative', 'ratelimit_zone r 1m redis=127.0.0.1:6379 redis_db=-1;', '',
      qr/invalid "redis_db=-1" of zone "r": .*redis_db=0..65535/ ],
    [ 'redis_password empty', 'ratelimit_zone r 1m redis=127.0.0.1:6379 redis_password=;', '',
      qr/invalid "redis_password=" of zone "r": .*a non-empty redis_password/ ],
    [ 'redis_prefix too long', 'ratelimit_zone r 1m redis=127.0.0.1:6379 redis_prefix=' . ('p' x 257) . ';', '',
      qr/invalid "redis_prefix=p+" of zone "r": .*at most 256 bytes/ ],
    [ 'on_redis_error unknown', 'ratelimit_zone r 1m redis=127.0.0.1:6379 on_redis_error=retry;', '',
      qr/invalid "on_redis_error=retry" of zone "r": .*on_redis_error=local\|allow\|deny/ ],
    [ 'unknown redis parameter', 'ratelimit_zone r 1m redis=127.0.0.1:6379 redis_colour=red;', '',
      qr/unknown parameter "redis_colour=red" of zone "r": expected redis=, redis_timeout=/ ],
    [ 'redis parameter twice', 'ratelimit_zone r 1m redis=127.0.0.1:6379 redis_timeout=10ms redis_timeout=20ms;', '',
      qr/"ratelimit_zone" directive: duplicate parameter "redis_timeout=20ms" of zone "r": each parameter may be given once/ ],
    [ 'redis= twice', 'ratelimit_zone r 1m redis=127.0.0.1:6379 redis=127.0.0.1:6380;', '',
      qr/duplicate parameter "redis=127.0.0.1:6380" of zone "r"/ ],
    [ 'redis parameters without redis=', 'ratelimit_zone r 1m redis_timeout=10ms;', '',
      qr/zone "r" has Redis parameters but no redis=HOST:PORT/ ],
    [ 'local and Redis zones in one location', 'ratelimit_zone r 1m redis=127.0.0.1:6379;',
      'ratelimit zone=z limit=5; ratelimit zone=r limit=5;',
      qr/"ratelimit" directive: zone=z and zone=r in one location: a location's rules must all use the same Redis zone, or only local zones/ ],
    [ 'rule too fine for Redis', 'ratelimit_zone r 1m redis=127.0.0.1:6379;',
      'ratelimit zone=r limit=1000000000 period=1h;',
      qr/"ratelimit" directive: rule "gcra_1000000000_1h" in zone=r: limit x period of 1000000000 per 3600000 ms is too fine for a Redis zone: at most 2\^50/ ],
    [ 'redis_cluster unknown value', 'ratelimit_zone c 1m redis=127.0.0.1:6379 redis_cluster=yes;', '',
      qr/invalid "redis_cluster=yes" of zone "c": .*redis_cluster=on\|off/ ],
    [ 'cluster prefix with a brace', 'ratelimit_zone c 1m redis=127.0.0.1:6379 redis_cluster=on "redis_prefix={rl}:";', '',
      qr/invalid "redis_prefix=\{rl\}:" of zone "c": a Redis Cluster zone's prefix may not hold "\{" or "\}"/ ],
    [ 'cluster with a database', 'ratelimit_zone c 1m redis=127.0.0.1:6379 redis_cluster=on redis_db=2;', '',
      qr/"redis_db=2" of zone "c": Redis Cluster has database 0 only/ ],
    [ 'cluster rules with different keys', 'ratelimit_zone c 1m redis=127.0.0.1:6379 redis_cluster=on;',
      'ratelimit zone=c key=$remote_addr limit=5; ratelimit zone=c key=$http_x_key limit=50 name=b;',
      qr/"ratelimit" directive: key=\$remote_addr and key=\$http_x_key in one location of the Redis Cluster zone=c: its rules must have the same key/ ],
    [ 'zero_cost with a constant cost', '', 'ratelimit zone=z limit=5 cost=0 zero_cost=on;',
      qr/"ratelimit" directive: "zero_cost=" applies to cost=\$variable only/ ],
    [ 'zero_cost not on or off', '', 'ratelimit zone=z limit=5 cost=$arg_c zero_cost=yes;',
      qr/invalid "zero_cost=yes": expected zero_cost=on or zero_cost=off/ ],
    [ 'log_key not on or off', '', 'ratelimit zone=z limit=5 log_key=clear;',
      qr/invalid "log_key=clear": expected log_key=on or log_key=off/ ],
    [ 'limit variable without a default', '', 'ratelimit zone=z limit=$arg_plan period=1h;',
      qr/"ratelimit" directive: missing "limit_default=" for limit=\$variable: the limit a request gets when the variable's value is not a valid limit, e.g. limit_default=100/ ],
    [ 'limit_default with a constant limit', '', 'ratelimit zone=z limit=5 limit_default=3;',
      qr/"ratelimit" directive: "limit_default=" applies to limit=\$variable only/ ],
    [ 'limit_max with no variable', '', 'ratelimit zone=z limit=5 limit_max=30;',
      qr/"ratelimit" directive: "limit_max=" applies to limit=\$variable or burst=\$variable only/ ],
    [ 'sliding_log limit variable without limit_max', '',
      'ratelimit zone=z algorithm=sliding_log limit=$arg_p limit_default=5;',
      qr/missing "limit_max=" for algorithm=sliding_log with limit=\$variable: its state keeps one time a unit, sized by the largest limit, e.g. limit_max=1000 \(at most 10000\)/ ],
    [ 'sliding_log limit_max too large', '',
      'ratelimit zone=z algorithm=sliding_log limit=$arg_p limit_default=5 limit_max=10001;',
      qr/"limit_max=10001" is too large for algorithm=sliding_log: it keeps one time a unit, at most 10000/ ],
    [ 'limit_default above limit_max', '', 'ratelimit zone=z limit=$arg_p limit_default=50 limit_max=10;',
      qr/"ratelimit" directive: "limit_default=50" exceeds limit_max=10/ ],
    [ 'limit_default zero', '', 'ratelimit zone=z limit=$arg_p limit_default=0;',
      qr/invalid "limit_default=0": expected an integer from 1 to 1000000000/ ],
    [ 'burst variable on a window', '', 'ratelimit zone=z algorithm=fixed_window limit=5 burst=$arg_b;',
      qr/"burst=" does not apply to algorithm=fixed_window: burst is for gcra and token_bucket/ ],
    [ 'limit variable too fine for Redis', 'ratelimit_zone r 1m redis=127.0.0.1:1;',
      'ratelimit zone=r limit=$arg_p limit_default=5 period=1d;',
      qr/limit_max x period of 1000000000 per 86400000 ms is too fine for a Redis zone: at most 2\^50 .*: set a lower limit_max=/ ],
    [ 'ratelimit off after rules', '', 'ratelimit zone=z limit=5; ratelimit off;',
      qr/"ratelimit off" with rules at the same level: "off" removes the inherited rules, write it alone or not at all/ ],
    [ 'rules after ratelimit off', '', 'ratelimit off; ratelimit zone=z limit=5;',
      qr/"ratelimit" directive: rules after "ratelimit off" at the same level/ ],
    [ 'too many rules', '', join(' ', map { "ratelimit zone=z limit=5 name=r$_;" } 1 .. 33),
      qr/"ratelimit" directive: too many rules: at most 32 apply to one request/ ],
);

for my $case (@bad) {
    my ($what, $http, $loc, $re) = @$case;
    my $out = $t->conf_refused("ratelimit_zone z 1m;\n$http\n" . RLTest::one_location($loc), $re, $what);
    like($out, qr/ in \S+\.conf:\d+/, "$what: names the file and line");
}

# valid edge values
my @good = (
    'ratelimit zone=z limit=1 period=1ms;',
    'ratelimit zone=z limit=1000000000 period=1s;',
    'ratelimit zone=z limit=1 period=366d;',
    'ratelimit zone=z limit=3 period=1m30s burst=1000000000;',
    'ratelimit zone=z limit=5 cost=0;',
    'ratelimit zone=z limit=5 burst=9 cost=9;',
    'ratelimit zone=z algorithm=token_bucket limit=5 burst=2 cost=2;',
    'ratelimit zone=z algorithm=fixed_window limit=5 cost=5 align=first;',
    'ratelimit zone=later limit=5;',
    'ratelimit zone=z limit=5 cost=$arg_cost key=$http_x_user$uri;',
    'ratelimit zone=z limit=5 name=' . ('n' x 63) . ';',
    'ratelimit_status 400;', 'ratelimit_status 599;',
    'ratelimit_grpc_status 1;', 'ratelimit_grpc_status 16;', 'ratelimit_grpc_status off;',
    'ratelimit_headers off;', 'ratelimit_headers BOTH;',
    'ratelimit_combine any;', 'ratelimit_dry_run on;', 'ratelimit_log_level info;', 'ratelimit_log_level off;',
    'ratelimit zone=z limit=5 cost=$arg_c zero_cost=on log_key=on;',
    'ratelimit zone=z limit=5 cost=$arg_c zero_cost=off log_key=off;',
    join(' ', map { "ratelimit zone=z limit=5 name=r$_;" } 1 .. 32),
    'ratelimit zone=z limit=$arg_p limit_default=5;',
    'ratelimit zone=z limit=$arg_p burst=$arg_b limit_default=5 limit_max=100 cost=$arg_c;',
    'ratelimit zone=z algorithm=token_bucket limit=5 burst=$arg_b;',
    'ratelimit zone=fits algorithm=sliding_log limit=$arg_p limit_default=5 limit_max=10000 period=1h;',
    'ratelimit zone=z algorithm=quota limit=$arg_p limit_default=5 limit_max=1000000000 reset=monthly;',
    'ratelimit zone=r limit=$arg_p limit_default=5 limit_max=1000 period=1h;',
    'ratelimit off;',
    'ratelimit zone=later algorithm=sliding_window limit=5 buckets=1;',
    'ratelimit zone=later algorithm=sliding_log limit=1000 period=24d;',
    'ratelimit zone=fits algorithm=sliding_log limit=10000 period=1h;',
    'ratelimit zone=later algorithm=leaky_bucket limit=5 max_delay=0;',
    'ratelimit zone=later algorithm=leaky_bucket limit=5 delay=0; ratelimit zone=later algorithm=leaky_bucket limit=5 delay=1000000000 period=1ms max_delay=0;',
    'ratelimit zone=z algorithm=quota limit=5 reset=monthly utc_offset=-14:00;',
    'ratelimit zone=z algorithm=quota limit=5 reset=weekly utc_offset=+05:45; ratelimit_combine any;',
    'ratelimit zone=r limit=5; ratelimit zone=r algorithm=sliding_log limit=10000 period=24d name=b;',
    'ratelimit zone=r2 limit=1000000 period=1d; ratelimit zone=r2 algorithm=quota limit=1000000000 reset=monthly;',
    'ratelimit zone=c key=$http_x_key limit=5; ratelimit zone=c key=$http_x_key limit=50 period=1h name=b;',
);

for my $loc (@good) {
    my ($rc, $out) = $t->test_conf(
        "ratelimit_zone z 32k;\n"
        . RLTest::one_location($loc)
        . "ratelimit_zone later 1m;\nratelimit_zone fits 260k;\n"
        # Redis need not be up for nginx -t (nor for nginx to start)
        . "ratelimit_zone r 1m redis=127.0.0.1:1;\n"
        . "ratelimit_zone r2 1m redis=localhost:6379 redis_timeout=1ms redis_pool=64 redis_db=65535 "
        . "redis_password=secret redis_prefix= on_redis_error=deny;\n"
        . "ratelimit_zone c 1m redis=127.0.0.1:1 redis_cluster=on;\n");
    is($rc, 0, "valid: " . substr($loc, 0, 70)) or diag($out);
}

# zone names at their bounds, and names a script would trip on (the
# dashboard shows them: t/dashboard.t)
for my $name ('n' x 63, 'a', 'per_ip-v1.2', '__proto__', 'constructor', 'hasOwnProperty') {
    my ($rc, $out) = $t->test_conf("ratelimit_zone $name 32k;\n" . RLTest::one_location("ratelimit zone=$name limit=5;"));
    is($rc, 0, 'valid zone name: ' . substr($name, 0, 20)) or diag($out);
}

# Every size a zone-size message suggests, pasted back, passes nginx -t:
# [ what, zone size, rules ].
my @sizes = (
    [ 'not a size', 'lots', 'limit=5' ],
    [ 'in g', '1g', 'limit=5' ],
    [ 'in G', '3G', 'limit=5' ],
    [ 'a fraction', '1.5m', 'limit=5' ],
    [ 'below the minimum', '16k', 'limit=5' ],
    [ 'too small for a sliding_log', '64k', 'algorithm=sliding_log limit=10000 period=1h' ],
    [ 'too small for a limit_max', '64k', 'algorithm=sliding_log limit=$arg_p limit_default=5 limit_max=10000 period=1h' ],
    [ 'too small for several state sizes', '32k',
      join(' ', map { "algorithm=sliding_log limit=${\ (10001 - 1000 * $_)} period=1h name=r$_;" } 1 .. 8) ],
    [ 'too small for small states', '32k',
      join(' ', map { "algorithm=sliding_log limit=${\ (50 * $_)} period=1h name=r$_;" } 1 .. 8) ],
);
for my $case (@sizes) {
    my ($what, $size, $rules) = @$case;
    my $conf = sub {
        my ($zone_size) = @_;
        my $rl = join ' ', map { "ratelimit zone=s $_" . (/;$/ ? '' : ';') } split /(?<=;) /, $rules;
        return "ratelimit_zone s $zone_size;\n" . RLTest::one_location($rl);
    };
    my ($rc, $out) = $t->test_conf($conf->($size));
    isnt($rc, 0, "size $what ($size): nginx -t fails");
    my ($message) = $out =~ /("ratelimit_zone" directive: .*?)(?:, declared)? in \S+\.conf:\d+/;
    my ($advice) = ($message // '') =~ /((?:expected|minimum is|at least) .*)/;
    my @suggested = ($advice // '') =~ /\b(\d+[a-z]?)\b/gi;
    ok(@suggested, "size $what: a size suggested: " . ($message // $out));
    for my $s (@suggested) {
        my ($rc2, $out2) = $t->test_conf($conf->($s));
        is($rc2, 0, "size $what: the suggested $s passes nginx -t") or diag($out2);
    }
}

# a key with no variable is almost always a missing "$": nginx -t says so,
# naming the rule, and still accepts it (a global limit)
for my $case ([ 'key=http_x_api_key', qr/\[warn\] "ratelimit" directive: rule "gcra_5_1s": key="http_x_api_key" has no variable, so every request shares one budget \(a global limit\); write key=\$NAME for one budget per value of a variable in \S+\.conf:\d+/ ],
              [ 'key=', qr/\[warn\] "ratelimit" directive: rule "gcra_5_1s": key="" has no variable, and an empty key exempts every request/ ]) {
    my ($key, $re) = @$case;
    my ($rc, $out) = $t->test_conf("ratelimit_zone z 1m;\n" . RLTest::one_location("ratelimit zone=z $key limit=5;"));
    is($rc, 0, "$key: accepted");
    like($out, $re, "$key: warned, naming the rule");
}
# a zone counts every rule name: 1,000 names in 1m, said nothing; a zone
# too small for its names' counters (about 200 bytes a name, and a quarter
# more room) is refused with the size it needs
{
    my $locs = join "\n", map { "location /l$_/ { ratelimit zone=z limit=5 name=r$_; }" } 1 .. 1000;
    my ($rc, $out) = $t->test_conf(
        "ratelimit_zone z 1m;\nratelimit_zone y 1m;\nserver {\n    listen 127.0.0.1:%%PORT%%;\n$locs\n"
        . "location / { ratelimit zone=y limit=5 name=only; }\n}\n");
    is($rc, 0, '1,000 rule names in a zone: accepted');
    unlike($out, qr/ratelimit_zone "z"|not counted/, 'and every name counted: nothing said');
    ($rc, $out) = $t->test_conf(
        "ratelimit_zone z 256k;\nserver {\n    listen 127.0.0.1:%%PORT%%;\n$locs\n}\n");
    isnt($rc, 0, '1,000 rule names in a 256k zone: refused');
    like($out, qr/\[emerg\] "ratelimit_zone" directive: zone "z" of size 262144 is too small for the counters of its rules' names: it needs at least \d+k/,
        'naming the size it needs');
}

my (undef, $quiet) = $t->test_conf("ratelimit_zone z 1m;\n" . RLTest::one_location('ratelimit zone=z key=$http_x_a limit=5;'));
unlike($quiet, qr/no variable/, 'a key with a variable: no warning');

done_testing();
