#!/usr/bin/perl
# Refusals remembered on a Redis zone: a flood of a spent key costs Redis a
# handful of script calls (INFO commandstats), admits exactly the limit,
# serves Redis's Retry-After; a key API reset forgets it at once on its
# server, and a second server sharing Redis asks again within a second.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest;
use RLRedis;

my $redis = RLRedis->new->start;
my $rport = $redis->port;

my @fleet = map { RLTest->new() } 1 .. 2;
$_->write_conf(<<"EOF", workers => 2) for @fleet;
ratelimit_zone rc 1m redis=127.0.0.1:$rport redis_timeout=5s;
server {
    listen 127.0.0.1:%%PORT%%;
    add_header X-Decided \$ratelimit_decided_by always;
    location / { ratelimit zone=rc key=\$http_x_key limit=5 period=1h; alias %%PREFIX%%/html/; }
    location /short/ { ratelimit zone=rc key=\$http_x_key limit=1 period=3s name=short; alias %%PREFIX%%/html/; }
    location /rl/ { ratelimit_api write=on; }
    location = /stats { ratelimit_stats; }
}
EOF
$_->start for @fleet;
my ($one, $two) = @fleet;

# script calls Redis ran since the last CONFIG RESETSTAT
sub script_calls {
    my $info = $redis->cmd('INFO', 'commandstats');
    my $n = 0;
    $n += $1 while $info =~ /^cmdstat_(?:fcall|evalsha|eval):calls=(\d+)/mg;
    return $n;
}
sub get { my ($t, $path, $key) = @_; $t->get($path, { 'X-Key' => $key }) }

# ---- a flood of a spent key ----
$redis->cmd('CONFIG', 'RESETSTAT');
my $start = time;
my ($ok, $refused, $other) = RLTest::burst(ports => [ $one->port ], path => '/index.html', key => 'spent',
                                           total => 10_000, conns => 4);
my $took = time - $start;
my $calls = script_calls();
is($ok, 5, 'exactly the limit admitted');
is($refused, 9995, 'every other request refused, with Retry-After');
is($other, 0, 'nothing else');
# the first refusals in flight at once (4 connections, 2 workers), then,
# each second the flood lasts, a call a connection at most: a refusal is
# served a second, then every request asks Redis until one's answer is
# remembered anew, and each connection has one request on its way (more
# of them ask while a loaded machine makes the answer slow)
my $most = 5 + 8 + 4 * (int($took) + 1);
ok($calls <= $most, "Redis ran $calls script calls for 10,000 requests in ${took}s (at most $most)");
# a script call may carry several requests' decisions (requests waiting
# on one connection go to Redis together): each request is decided in
# Redis or refused from the cache, and the cache serves all but the few
# in flight at each call (4 connections)
my $zone = $one->zone_stats('rc')->{redis};
my ($cached, $decided) = @$zone{qw(cached decisions)};
is($cached + $decided, 10_000, "each request decided in Redis ($decided) or from the cache ($cached)");
ok($decided <= 4 * $calls, "at most a request a connection in each script call ($decided for $calls)");
diag(sprintf 'flood of a spent key: %.4f Redis calls a request (%d for 10,000; %d from the cache)',
     $calls / 10_000, $calls, $cached);

# ---- Retry-After as Redis gave it ----
get($one, '/index.html', 'ra') for 1 .. 5;
my $from_redis = get($one, '/index.html', 'ra');
my $from_cache = get($one, '/index.html', 'ra');
is($from_redis->{headers}{'x-decided'}, 'redis', 'the first refusal from Redis');
is($from_cache->{headers}{'x-decided'}, 'redis_cached', 'the next one from the cache');
is($from_cache->{status}, 429, 'refused');
my ($ra1, $ra2) = map { $_->{headers}{'retry-after'} } $from_redis, $from_cache;
ok($ra2 == $ra1 || $ra2 == $ra1 - 1, "the same Retry-After ($ra1 from Redis, $ra2 from the cache)");
is($from_cache->{headers}{'x-ratelimit-remaining'}, 0, 'remaining 0');

# ---- a key API reset: the next request admitted at once ----
my $r = $one->request(DELETE => '/rl/zones/rc/keys?key=spent');
is($r->{status}, 200, 'key API DELETE');
my $next = get($one, '/index.html', 'spent');
is($next->{status}, 200, 'admitted at once after the reset');
is($next->{headers}{'x-decided'}, 'redis', 'decided in Redis');

# ---- a second server sharing Redis ----
# limit 1 in 3 s: the key is spent until 3 s after its request, unless reset
get($one, '/short/index.html', 'fleet');
my $t0 = time;
is(get($two, '/short/index.html', 'fleet')->{status}, 429, 'the other server: refused by Redis');
is(get($two, '/short/index.html', 'fleet')->{headers}{'x-decided'}, 'redis_cached', 'then from its cache');
is($one->request(DELETE => '/rl/zones/rc/keys?key=fleet')->{status}, 200, 'reset on the first server');
# the bound (docs/redis.md): the other server's cache still refuses, a
# second at most after Redis's answer
my $soon = get($two, '/short/index.html', 'fleet');
ok($soon->{status} == 200 || ($soon->{status} == 429 && time < $t0 + 1),
   'the other server: refused from its cache only within the second');
sleep 0.02 while time < $t0 + 1.05;
my $after = get($two, '/short/index.html', 'fleet');
is($after->{status}, $soon->{status} == 200 ? 429 : 200,
   'then it asks Redis again, which admits the reset key (well before its 3 s)');
is($after->{headers}{'x-decided'}, 'redis', 'decided in Redis')
    or diag("soon: $soon->{status} $soon->{headers}{'x-decided'}; after ", time - $t0, " s");

$_->stop() for @fleet;

done_testing();
