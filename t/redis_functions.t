#!/usr/bin/perl
# The script as a library of Redis Functions (Redis 7, Valkey): loaded once
# (FUNCTION LOAD, by the first call that finds it missing on its
# connection), called with FCALL; loaded again when Redis lost it (FUNCTION
# FLUSH, a restart without persistence) with no request decided by
# on_redis_error; and where FCALL is missing (Redis 6, here FCALL renamed
# away) or the ACL user may not FCALL or FUNCTION LOAD, the script is
# called instead (EVALSHA), exact all the same.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;
use RLRedis;

my $redis = RLRedis->new->start;
my $rport = $redis->port;
# Redis 6 has no FCALL: it answers as to a command it does not know
my $old = RLRedis->new(args => [ '--rename-command', 'FCALL', '' ])->start;
my $oport = $old->port;
# an ACL user allowed FCALL but not FUNCTION LOAD
is($redis->cmd(qw(ACL SETUSER noload on >n0load resetkeys ~ratelimit:* -@all +fcall +evalsha +eval +get +mget +set
                  +time)), 'OK', 'ACL user noload');

my @fleet = map { RLTest->new() } 1 .. 2;
my $conf = <<"EOF";
log_format rl '\$uri \$status \$ratelimit_decided_by';
access_log %%PREFIX%%/rl.log rl;
ratelimit_zone fn 1m redis=127.0.0.1:$rport redis_timeout=5s on_redis_error=deny;
ratelimit_zone old 1m redis=127.0.0.1:$oport redis_timeout=5s on_redis_error=deny;
ratelimit_zone noload 1m redis=127.0.0.1:$rport redis_timeout=5s on_redis_error=deny redis_user=noload
                      redis_password=n0load;
server {
    listen 127.0.0.1:%%PORT%%;
    keepalive_requests 100000;
    location /fn/ { ratelimit zone=fn key=\$http_x_key limit=100 period=1h; alias %%PREFIX%%/html/; }
    location /old/ { ratelimit zone=old key=\$http_x_key limit=100 period=1h; alias %%PREFIX%%/html/; }
    location /noload/ { ratelimit zone=noload key=\$http_x_key limit=100 period=1h; alias %%PREFIX%%/html/; }
    location = /stats { ratelimit_stats; }
}
EOF
$_->start($conf, workers => 2) for @fleet;
my ($one, $two) = @fleet;

sub calls {
    my ($r, $cmd) = @_;
    return ($r->cmd('INFO', 'commandstats') =~ /^cmdstat_\Q$cmd\E:calls=(\d+)/m)[0] // 0;
}
sub libraries { scalar @{ $_[0]->cmd('FUNCTION', 'LIST', 'LIBRARYNAME', 'ratelimit_*') } }

# 130 requests of a key of limit 100 over the two servers, sequential or
# 30 at once: how many were admitted, and how many decided by Redis
sub flood {
    my ($path, $key, $conns) = @_;
    my ($ok, $refused, $other) = RLTest::burst(ports => [ map { $_->port } @fleet ], path => "$path/index.html",
                                               key => $key, total => 130, conns => $conns);
    return ($ok, $refused, $other);
}
sub fallbacks { my ($z) = @_; my $n = 0; $n += $_->zone_stats($z)->{redis}{fallbacks} for @fleet; $n }

# ---- loaded once, called with FCALL ----
is(libraries($redis), 0, 'no library before the first call');
my @s = map { $fleet[ $_ % 2 ]->get('/fn/index.html', { 'X-Key' => 'seq' })->{status} } 1 .. 130;
is(scalar(grep { $_ == 200 } @s), 100, 'limit 100 across two servers, sequential: 100 admitted');
is(scalar(grep { $_ == 429 } @s), 30, 'the 30 after them refused');
is(libraries($redis), 1, 'the library loaded');
# (refusals remembered need no call)
ok(calls($redis, 'fcall') >= 100, 'every decision an FCALL (' . calls($redis, 'fcall') . ')');
is(calls($redis, 'evalsha') + calls($redis, 'eval'), 0, 'no script call');
my $loads = calls($redis, 'function|load');
ok($loads >= 1 && $loads <= 4, "FUNCTION LOAD sent $loads times (a call that found it missing on a connection)");
my ($ok) = flood('/fn', 'burst', 30);
is($ok, 100, 'limit 100 across two servers, 30 at once: 100 admitted');

# ---- Redis lost its functions: loaded again, no request failing ----
is($redis->cmd('FUNCTION', 'FLUSH'), 'OK', 'FUNCTION FLUSH');
is(libraries($redis), 0, 'no library');
my ($admitted, $refused, $other) = flood('/fn', 'flushed', 30);
is("$admitted $refused $other", '100 30 0', 'after FUNCTION FLUSH, 30 at once: 100 admitted, 30 refused');
is(fallbacks('fn'), 0, 'none decided by on_redis_error');
is(libraries($redis), 1, 'the library loaded again');
ok(calls($redis, 'function|load') - $loads <= 8,
   'loaded again once a connection at most (' . (calls($redis, 'function|load') - $loads) . ' FUNCTION LOAD)');

# a restart without persistence: the connections are lost; once they are
# open again, the library is loaded again
$redis->stop;
$redis->start;
is($redis->cmd(qw(ACL SETUSER noload on >n0load resetkeys ~ratelimit:* -@all +fcall +evalsha +eval +get +mget +set
                  +time)), 'OK', 'ACL user noload again');
RLTest::wait_until(sub { $one->get('/fn/index.html', { 'X-Key' => 'probe' })->{status} == 200
                         && $two->get('/fn/index.html', { 'X-Key' => 'probe' })->{status} == 200 }, 10);
my $before = fallbacks('fn');
($admitted, $refused, $other) = flood('/fn', 'restarted', 30);
is("$admitted $refused $other", '100 30 0', 'after a restart, 30 at once: 100 admitted, 30 refused');
is(fallbacks('fn') - $before, 0, 'none decided by on_redis_error');
is(libraries($redis), 1, 'the library loaded again');

# ---- no FCALL (Redis 6): the script instead ----
($admitted, $refused, $other) = flood('/old', 'old', 30);
is("$admitted $refused $other", '100 30 0', 'no FCALL, 30 at once: 100 admitted, 30 refused');
is(fallbacks('old'), 0, 'none decided by on_redis_error');
# (a call decides the requests a worker sent together: one or a batch)
ok(calls($old, 'evalsha') >= 1 && calls($old, 'evalsha') <= 130,
   'decided by EVALSHA (' . calls($old, 'evalsha') . ' calls for 130 requests)');
is(libraries($old), 0, 'no library loaded');
$one->log_like(qr/\[notice\].*redis 127\.0\.0\.1:$oport: FCALL unknown or not allowed: the script called with EVALSHA/,
               'the log says the script is called instead');

# ---- an ACL user not allowed FUNCTION LOAD: the script instead ----
# (a library another user loaded serves it: none here)
is($redis->cmd('FUNCTION', 'FLUSH'), 'OK', 'FUNCTION FLUSH');
($admitted, $refused, $other) = flood('/noload', 'noload', 30);
is("$admitted $refused $other", '100 30 0', 'no FUNCTION LOAD, 30 at once: 100 admitted, 30 refused');
is(fallbacks('noload'), 0, 'none decided by on_redis_error');
$one->log_like(qr/\[warn\].*redis 127\.0\.0\.1:$rport: FUNCTION LOAD refused: "NOPERM/, 'the log shows the refusal');
$one->log_like(qr/\[notice\].*redis 127\.0\.0\.1:$rport: FUNCTION LOAD refused: the script called with EVALSHA/,
               'and says the script is called instead');
unlike($one->error_log . $two->error_log, qr/\[error\].*redis.*(?:refused|decided by on_redis_error)/,
       'no reply refused, nothing decided by on_redis_error');

$_->stop for @fleet;
done_testing();
