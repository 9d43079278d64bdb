#!/usr/bin/perl
# Redis failures: stopped (each on_redis_error mode, within redis_timeout),
# restarted (decisions go back to Redis), SCRIPT FLUSH (NOSCRIPT, then EVAL),
# slow (DEBUG SLEEP: the timeout path), a connection reset in the middle of
# a reply (a fake server).  No request hangs, no worker dies, stats count.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use POSIX ();
use Socket qw(SOL_SOCKET SO_LINGER);
use Time::HiRes qw(time sleep);
use RLTest;
use RLRedis;

my $redis = RLRedis->new;   # started after nginx
my $rport = $redis->port;

# a "Redis" that reads a command, sends half a reply and resets the connection
my $fake = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, ReuseAddr => 1)
    or die "listen: $!";
my $fport = $fake->sockport;
my $fake_pid = fork() // die;
if ($fake_pid == 0) {
    while (my $c = $fake->accept) {
        my $buf;
        sysread($c, $buf, 65536);
        syswrite($c, "*8\r\n:1\r\n:0\r\n:4");
        setsockopt($c, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0));
        close $c;
    }
    POSIX::_exit(0);
}
close $fake;

my $t = RLTest->new->start(<<"EOF");
log_format rl '\$uri \$status \$ratelimit_decided_by';
access_log %%PREFIX%%/rl.log rl;
ratelimit_zone rlocal 1m redis=127.0.0.1:$rport redis_timeout=100ms;
ratelimit_zone rallow 1m redis=127.0.0.1:$rport redis_timeout=100ms on_redis_error=allow;
ratelimit_zone rdeny 1m redis=127.0.0.1:$rport redis_timeout=100ms on_redis_error=deny redis_pool=1;
ratelimit_zone rfake 1m redis=127.0.0.1:$fport redis_timeout=100ms on_redis_error=local;
server {
    listen 127.0.0.1:%%PORT%%;
    location /local/ { ratelimit zone=rlocal key=\$http_x_key limit=2 period=1h; alias %%PREFIX%%/html/; }
    location /allow/ { ratelimit zone=rallow key=\$http_x_key limit=2 period=1h; alias %%PREFIX%%/html/; }
    location /deny/  { ratelimit zone=rdeny key=\$http_x_key limit=2 period=1h; alias %%PREFIX%%/html/; }
    location /fake/  { ratelimit zone=rfake key=\$http_x_key limit=2 period=1h; alias %%PREFIX%%/html/; }
    location = /stats { ratelimit_stats; }
}
EOF
my ($worker) = $t->worker_pids;

# One request: (status, decided by, seconds taken).
my $n = 0;
sub hit {
    my ($where, $key) = @_;
    my $lines = sub { my @l = split /\n/, $t->file('rl.log'); @l };
    my $before = () = $lines->();
    my $start = time;
    my $r = $t->get("/$where/index.html", { 'X-Key' => $key });
    my $took = time - $start;
    # its access log line: written once the response is sent
    RLTest::wait_until(sub { $lines->() > $before }, 5);
    my ($by) = (($lines->())[-1] // '') =~ /(\S+)$/;
    return ($r->{status}, $by, $took);
}

sub stats { $t->zone_stats($_[0])->{redis} }

# nginx starts while Redis is down, and decides locally
is_deeply([ (hit('local', 'early'))[0, 1] ], [ 200, 'fallback_local' ], 'Redis not started: nginx runs, decides locally');
$redis->start();
ok(RLTest::wait_until(sub { (hit('local', 'up'))[1] eq 'redis' }, 15), 'Redis up: decided in Redis');

# Redis stopped: each mode, at once (connection refused) or within the timeout
$redis->stop();
my @s = map { [ hit('local', 'down') ] } 1 .. 3;
is_deeply([ map { "$_->[0] $_->[1]" } @s ], [ '200 fallback_local', '200 fallback_local', '429 fallback_local' ],
          'on_redis_error=local: the same rule decided in the local zone');
is_deeply([ map { (hit('allow', 'down'))[0, 1] } 1 .. 3 ], [ ('200', 'fallback_allow') x 3 ],
          'on_redis_error=allow: fail open');
is_deeply([ map { (hit('deny', 'down'))[0, 1] } 1 .. 2 ], [ ('429', 'fallback_deny') x 2 ],
          'on_redis_error=deny: fail closed with ratelimit_status');
my $slowest = 0;
for (1 .. 10) {
    my $took = (hit('local', "down-$_"))[2];
    $slowest = $took if $took > $slowest;
}
cmp_ok($slowest, '<', 0.1 + 0.4, "Redis down: every request answered within redis_timeout + slack (slowest ${slowest}s)");
my $st = stats('rlocal');
cmp_ok($st->{fallbacks}, '>=', 14, "stats count the fallbacks ($st->{fallbacks})");
cmp_ok($st->{errors} + $st->{timeouts}, '>=', 1, 'stats count the errors');

# Redis back: decisions return to Redis once the backoff has passed
$redis->start();
ok(RLTest::wait_until(sub { (hit('local', 'back'))[1] eq 'redis' }, 15), 'Redis restarted: decided in Redis again');
cmp_ok(stats('rlocal')->{reconnects}, '>=', 2, 'stats count the reconnections');

# SCRIPT FLUSH: the next call gets NOSCRIPT and is retried with EVAL
$redis->cmd('SCRIPT', 'FLUSH');
is_deeply([ (hit('local', 'flushed'))[0, 1] ], [ 200, 'redis' ], 'after SCRIPT FLUSH: still decided in Redis');
is_deeply([ (hit('local', 'flushed'))[0, 1] ], [ 200, 'redis' ], 'and loaded again');

# slow Redis: DEBUG SLEEP holds it for 1.5 s; requests take the timeout path
my $timeouts = stats('rlocal')->{timeouts};
my $sleeper = RLTest::spawn(sub { eval { $redis->cmd('DEBUG', 'SLEEP', '1.5') }; return });
sleep 0.2;
my @slow = map { [ hit('local', "slow-$_") ] } 1 .. 3;
is($slow[0][1], 'fallback_local', 'slow Redis: decided locally');
cmp_ok($slow[0][2], '<', 0.1 + 0.4, "slow Redis: answered after about redis_timeout ($slow[0][2]s)");
cmp_ok($_->[2], '<', 0.5, 'and so is every following request') for @slow[1, 2];
cmp_ok(stats('rlocal')->{timeouts}, '>', $timeouts, 'stats count the timeout');
$sleeper->wait;
ok(RLTest::wait_until(sub { (hit('local', 'awake'))[1] eq 'redis' }, 15), 'after the sleep: decided in Redis again');

# a connection reset in the middle of a reply
my @reset = map { [ hit('fake', 'reset') ] } 1 .. 3;
is_deeply([ map { "$_->[0] $_->[1]" } @reset ], [ '200 fallback_local', '200 fallback_local', '429 fallback_local' ],
          'reset mid-reply: decided locally, the limit still holds');
cmp_ok(stats('rfake')->{errors}, '>=', 1, 'stats count the reset');

is_deeply([ $t->worker_pids ], [ $worker ], 'the worker never died');

# a reload while a request waits on a paused Redis: the old worker answers it
# (after the timeout) and then exits; the counters stay with the zone
my $fallbacks = stats('rlocal')->{fallbacks};
$redis->pause();
my $kid = RLTest::spawn(sub { $t->get('/local/index.html', { 'X-Key' => 'reload' })->{status} });
sleep 0.03;
$t->reload();
is(($kid->result)[0], 200, 'reload: the waiting request is answered');
cmp_ok(stats('rlocal')->{fallbacks}, '>', $fallbacks, 'reload: the Redis counters are kept');
$redis->resume();
ok(RLTest::wait_until(sub { (hit('local', 'reloaded'))[1] eq 'redis' }, 15), 'reload: new workers decide in Redis');
like($t->error_log, qr/ratelimit: redis 127\.0\.0\.1:$rport: .*reconnecting in \d+ ms/, 'the error log says what failed');

$t->stop();
kill 'TERM', $fake_pid;
waitpid($fake_pid, 0);
done_testing();
