#!/usr/bin/perl
# redis_sync with more distinct keys than its journal holds (a 64 KB zone
# notes 256 keys): half full, the journal is taken before its interval (10 s
# here), so a flood of 1,000 keys, a request each, reaches Redis long
# before the interval, where a journal taken only each interval would drop
# 744 keys' units (each key then shared by no server, held by each to the
# limit on its own).  While Redis is away the
# journal waits for its interval: no request takes it.
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

my $t = RLTest->new();
$t->start(<<"EOF", workers => 2);
ratelimit_zone keys 64k redis=127.0.0.1:$rport redis_prefix=k: redis_sync=10s redis_timeout=2s;
server {
    listen 127.0.0.1:%%PORT%%;
    keepalive_requests 100000;
@{[ RLTest::locations('/k' => 'ratelimit zone=keys key=$http_x_key algorithm=fixed_window limit=5 period=1h name=w;') ]}
    location = /stats { ratelimit_stats; }
}
EOF

sub figures { $t->zone_stats('keys')->{sync} }
sub in_redis { scalar @{ $redis->cmd('KEYS', 'k:s:*') } }

# the exchange of the first interval (10 s after the workers started)
# has not come when the flood ends: what reaches Redis was taken early
my $start = time;
my %st;
$st{ $t->get('/k', { 'X-Key' => "key-$_" })->{status} }++ for 1 .. 1000;
is($st{200}, 1000, '1,000 keys, a request each: admitted');
my $f = figures();
# a key is dropped only if half a journal comes while both workers await
# Redis's replies: on this loopback, none or a few, whatever the load
ok($f->{dropped} <= 100, "$f->{dropped} dropped (a journal taken each interval drops 744): the journal (256 keys) "
   . 'taken whenever half full');
ok($f->{exchanges} >= 1000 / 256, "exchanges before the interval: $f->{exchanges}");
ok(RLTest::wait_until(sub { in_redis() >= 1000 - 128 - $f->{dropped} }, 5),
   sprintf('Redis holds %d of the keys %.1f s after the flood began (the interval: 10 s): all but what is under '
           . 'half a journal', in_redis(), time - $start));

# Redis away: a flood of keys does not take the journal at each request;
# the units wait in it for the interval's exchange
$redis->stop;
my $before = figures();
$st{ $t->get('/k', { 'X-Key' => "away-$_" })->{status} }++ for 1 .. 600;
my $away = figures();
my $tries = $away->{failures} - $before->{failures};
ok($tries <= 4, "Redis away, 600 more keys: $tries calls tried (not one a request)");
ok($away->{dropped} > 0, "the journal full meanwhile: $away->{dropped} units dropped, counted");
$redis->start;
$t->stop;
done_testing();
