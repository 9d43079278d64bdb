#!/usr/bin/perl
# redis_sync=TIME: three nginx servers with two workers each, one Redis.
# A flood of 20,000 requests spread over the three: the exact Redis zone
# admits exactly 1,000 a window of fixed_window limit=1000 period=10s; the
# redis_sync=100ms zone at least 1,000 and at most 1,000 plus what the
# fleet admits in an interval and an exchange's lag (README's bound, from
# the rate this test measured, its own clock).  The same of a
# sliding_window limit=1000 period=10s, whose ring is merged tick by tick,
# and Redis holds every unit admitted.  A Redis restart gives back
# no more than what Redis held; Redis down: requests answered at once,
# locally, and their units sent when it is back; nginx -t refuses the
# algorithms whose state is not a count, naming why.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use POSIX qw(floor);
use Time::HiRes qw(time sleep);
use RLTest;
use RLRedis;

my $redis = RLRedis->new->start;
my $rport = $redis->port;
my $interval = 0.1;

my @fleet = map { RLTest->new() } 1 .. 3;
for my $t (@fleet) {
    $t->write_conf(<<"EOF", workers => 2);
ratelimit_zone exact 4m redis=127.0.0.1:$rport redis_prefix=x: redis_timeout=2s;
ratelimit_zone flood 4m redis=127.0.0.1:$rport redis_prefix=f: redis_sync=100ms redis_timeout=2s;
ratelimit_zone slide 4m redis=127.0.0.1:$rport redis_prefix=w: redis_sync=100ms redis_timeout=2s;
ratelimit_zone down 1m redis=127.0.0.1:$rport redis_prefix=d: redis_sync=100ms redis_timeout=2s;
ratelimit_zone restart 1m redis=127.0.0.1:$rport redis_prefix=r: redis_sync=100ms redis_timeout=2s;
log_format sync '\$msec \$status \$uri';

server {
    listen 127.0.0.1:%%PORT%%;
    access_log %%PREFIX%%/sync.log sync;
    keepalive_requests 100000;

@{[ RLTest::locations(
    '/exact' => 'ratelimit zone=exact key=$http_x_key algorithm=fixed_window limit=1000 period=10s name=w;',
    '/flood' => 'ratelimit zone=flood key=$http_x_key algorithm=fixed_window limit=1000 period=10s name=w;',
    '/slide' => 'ratelimit zone=slide key=$http_x_key algorithm=sliding_window limit=1000 period=10s buckets=10 name=w;',
    '/down' => 'ratelimit zone=down key=$http_x_key algorithm=fixed_window limit=1000 period=1h name=w;',
    '/restart' => 'ratelimit zone=restart key=$http_x_key algorithm=quota limit=1000 reset=daily name=q;') ]}
    location = /stats { ratelimit_stats; }
}
EOF
    $t->start();
}

# $total requests of one key over the fleet, on two connections a server,
# in batches of 5 pipelined, paced to last about $seconds.
sub flood {
    my ($path, $key, $total, $seconds) = @_;
    my @ports = map { $_->port } @fleet;
    my $conns = 2 * @ports;
    RLTest::parallel(map {
        my ($port, $n) = ($ports[ $_ % @ports ], int($total / $conns) + ($_ < $total % $conns ? 1 : 0));
        sub {
            my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port) or die "connect: $!\n";
            my ($start, $sent, $gap) = (time, 0, $seconds / ($n / 5));
            while ($sent < $n) {
                my $b = $n - $sent < 5 ? $n - $sent : 5;
                $sent += $b;
                print $s "GET $path HTTP/1.1\r\nHost: t\r\nX-Key: $key\r\n\r\n" x $b;
                my ($buf, $seen) = ('', 0);
                while ($seen < $b) {
                    sysread($s, $buf, 65536, length $buf) or die "read: $!\n";
                    $seen = () = $buf =~ /^HTTP\/1\.1 \d+/mg;
                }
                my $next = $start + $sent / 5 * $gap;
                sleep($next - time) if $next > time;
            }
            return 1;
        };
    } 0 .. $conns - 1);
}

# Waits for the start of a 10 s window, so that a flood of a few seconds
# fills one (nginx logs a request decided in Redis after its reply: one
# decided at a window's end may be logged in the next).
sub window_start {
    sleep 0.01 while time - 10 * floor(time / 10) > 0.3;
}

# The servers' access logs of a location: [time, admitted] of each request.
sub logged {
    my ($uri) = @_;
    my @r;
    for my $t (@fleet) {
        for (split /\n/, $t->file('sync.log')) {
            my ($ms, $status, $u) = split / /;
            push @r, [ $ms, $status == 200 ] if $u eq $uri;
        }
    }
    return sort { $a->[0] <=> $b->[0] } @r;
}

# For each 10 s window (epoch-aligned, as the rule's): [window, requests,
# admitted].
sub windows {
    my %w;
    for (@_) {
        my $win = floor($_->[0] / 10);
        $w{$win}[0]++;
        $w{$win}[1] += $_->[1];
    }
    return map { [ $_, $w{$_}[0], $w{$_}[1] ] } sort { $a <=> $b } keys %w;
}

# The most requests the fleet answered within any $span seconds.
sub busiest {
    my ($span, @r) = @_;
    my ($most, $j) = (0, 0);
    for my $i (0 .. $#r) {
        $j++ while $r[$i][0] - $r[$j][0] > $span;
        $most = $i - $j + 1 if $i - $j + 1 > $most;
    }
    return $most;
}

sub figures { $_[0]->zone_stats($_[1])->{sync} }

# ---- exact mode: exactly 1,000 a window ----

window_start();
flood('/exact', 'e', 20_000, 4);
my @w = windows(logged('/exact'));
ok(@w >= 1, 'exact: the flood ran in ' . scalar(@w) . ' window(s)');
for my $w (@w) {
    my $want = $w->[1] < 1000 ? $w->[1] : 1000;
    is($w->[2], $want, "exact: window $w->[0]: $w->[2] of $w->[1] admitted (min(requests, 1,000))");
}

# ---- redis_sync=100ms: at least 1,000, at most the bound ----

window_start();
flood('/flood', 'f', 20_000, 7);
my $lag = 0;
for my $t (@fleet) {
    my $f = figures($t, 'flood');
    $lag = $f->{lag_ms} / 1000 if $f->{lag_ms} / 1000 > $lag;
}
# README: at most the limit and what the fleet admits within one interval
# and an exchange's lag; nginx fires a timer up to a turn of its event loop
# late, counted as another 50 ms.  The fleet's requests in the busiest such
# span, from the servers' own logs.
my $span = $interval + $lag + 0.05;
my @flood = logged('/flood');
my $busiest = busiest($span, @flood);
my $bound = 1000 + $busiest;
my $rate = @flood / ($flood[-1][0] - $flood[0][0]);
@w = windows(@flood);
for my $w (@w) {
    my $least = $w->[1] < 1000 ? $w->[1] : 1000;
    ok($w->[2] >= $least, "sync: window $w->[0]: $w->[2] admitted of $w->[1], at least min(requests, 1,000)");
    ok($w->[2] <= $bound, sprintf('sync: window %d: %d admitted, at most the bound %d (1,000 + the %d requests '
                                  . 'of the busiest %.3f s)', $w->[0], $w->[2], $bound, $busiest, $span));
}
diag(sprintf('sync flood: %.0f requests/s over the fleet; windows (requests, admitted): %s; bound %d',
             $rate, join(' ', map { "($_->[1], $_->[2])" } @w), $bound));
my $keys = 0;
for my $t (@fleet) {
    my $f = figures($t, 'flood');
    ok($f->{exchanges} > 0 && $f->{keys} > 0 && $f->{units} > 0,
       "stats: server exchanged ($f->{exchanges} exchanges, $f->{keys} keys, $f->{units} units, lag $f->{lag_ms} ms)");
    $keys += $f->{keys};
}

# ---- sliding_window, redis_sync=100ms: the ring merged tick by tick ----

# A flood of 7 s (less than 9 s) spans at most 10 ticks of 1 s: every unit
# it admits is in the window's 10 newest ticks until it ends, so the fleet
# admits at least 1,000 and at most 1,000 plus the busiest span's requests
# (the same bound).
flood('/slide', 's', 20_000, 7);
my @slide = logged('/slide');
my $slid = grep { $_->[1] } @slide;
my $sbusiest = busiest($span, @slide);
ok($slide[-1][0] - $slide[0][0] < 9, sprintf('sliding: the flood lasted %.1f s, within 10 ticks',
                                               $slide[-1][0] - $slide[0][0]));
ok($slid >= 1000, "sliding: $slid admitted of " . scalar(@slide) . ', at least 1,000');
ok($slid <= 1000 + $sbusiest, sprintf('sliding: %d admitted, at most the bound %d (1,000 + the %d requests '
                                      . 'of the busiest %.3f s)', $slid, 1000 + $sbusiest, $sbusiest, $span));
my $ticks;
RLTest::wait_until(sub {
    $ticks = 0;
    for my $k (@{ $redis->cmd('KEYS', 'w:s:*') }) {
        my %h = @{ $redis->cmd('HGETALL', $k) };
        $ticks += $_ for values %h;
    }
    return $ticks == $slid;
}, 10);
is($ticks, $slid, "sliding: Redis's ticks hold every unit the fleet admitted ($slid)");

# 100 keys in one exchange: calls of fewer keys (a key's answer is its 11
# ticks), every one answered and folded
$fleet[1]->get('/slide', { 'X-Key' => "many$_" }) for 1 .. 100;
my $many;
RLTest::wait_until(sub { $many = @{ $redis->cmd('KEYS', 'w:s:*') }; $many == 101 }, 10);
is($many, 101, 'sliding: 100 more keys sent in one exchange, each a hash in Redis');
is(figures($fleet[1], 'slide')->{failures}, 0, 'sliding: and every call answered and judged good');

# ---- Redis down: requests answered at once, units sent when it is back ----

$redis->stop;
my ($slowest, %st) = (0);
for (1 .. 300) {
    my $s = time;
    my $r = $fleet[0]->get('/down', { 'X-Key' => 'd' });
    $st{ $r->{status} }++;
    $slowest = time - $s if time - $s > $slowest;
}
is($st{200}, 300, 'Redis down: 300 requests admitted, decided locally');
ok($slowest < 1, sprintf('and none waited for Redis (redis_timeout 2 s): the slowest took %.3f s', $slowest));
is($fleet[0]->get('/down', { 'X-Key' => 'd2' })->{status}, 200, 'another key too');
sleep 3 * $interval;
ok(figures($fleet[0], 'down')->{failures} > 0, 'stats: the exchanges that failed are counted');
$redis->start;
my $held;
RLTest::wait_until(sub {
    my @k = @{ $redis->cmd('KEYS', 'd:s:*') };
    $held = join ' ', sort map { (split / /, $redis->cmd('GET', $_))[-1] } @k;
    return $held eq '1 300';
}, 10);
is($held, '1 300', 'Redis back: it holds the 300 units spent while it was down, and the other key\'s 1: none lost');
# a window the same on every server (align=epoch) is a counter named by its
# end, the fleet's total a plain integer INCRBY adds to, expiring after it
my @named = grep { /^d:s:[0-9a-f]{32}:(\d+)$/ && $1 % 3_600_000 == 0 } @{ $redis->cmd('KEYS', 'd:s:*') };
is(scalar(@named), 2, 'Redis: each key\'s counter named by its 1 h window\'s end');
my $pttl = $redis->cmd('PTTL', $named[0]);
ok($pttl > 0 && $pttl <= 3_601_000, "and it expires a second after its window ($pttl ms)");

# ---- a Redis restart: what Redis held given back, no more ----

my $first = 0;
for my $t (@fleet[0, 1]) {
    $first += $t->get('/restart', { 'X-Key' => 'r' })->{status} == 200 for 1 .. 300;
}
is($first, 600, 'restart: 600 of a quota of 1,000 spent over two servers');
RLTest::wait_until(sub { my $k = $redis->cmd('KEYS', 'r:s:*')->[0];
                         $k && (split / /, $redis->cmd('GET', $k))[-1] == 600 }, 10);
sleep 3 * $interval;   # every server has folded the total in
$redis->stop;
$redis->start;
my $restarted = time;
flood('/restart', 'r', 6000, 3);
my @after = grep { $_->[0] > $restarted } logged('/restart');
my $admitted = grep { $_->[1] } @after;
$busiest = busiest($span, @after);
ok($admitted >= 400, "restart: the quota's last 400 admitted at least ($admitted)");
ok($admitted <= 400 + 600 + $busiest,
   "restart: $admitted admitted, at most the 400 left + the 600 Redis held + the $busiest requests of the busiest "
   . sprintf('%.3f s', $span));

# ---- nginx -t: algorithms that keep no count are refused, saying why ----

my $t = $fleet[0];
for my $alg (qw(gcra token_bucket leaky_bucket sliding_log concurrency)) {
    $t->conf_refused(<<"EOF", qr/rule "w" in zone=s: redis_sync merges counts: algorithm=$alg .*use fixed_window, sliding_window or quota, or exact Redis mode/, "algorithm=$alg");
ratelimit_zone s 1m redis=127.0.0.1:$rport redis_sync=100ms;
server { listen 127.0.0.1:%%PORT%%; location / { ratelimit zone=s key=\$remote_addr algorithm=$alg limit=10 name=w; } }
EOF
}
$t->conf_refused(<<"EOF", qr/ratelimit_zone.*invalid "redis_sync=5ms" of zone "s": expected redis_sync=10ms\.\.60s/, 'redis_sync=5ms');
ratelimit_zone s 1m redis=127.0.0.1:$rport redis_sync=5ms;
EOF
$t->conf_refused(<<"EOF", qr/"redis_sync" of zone "s" needs redis=HOST:PORT/, 'redis_sync without redis=');
ratelimit_zone s 1m redis_sync=1s;
EOF
# an exchange's call holds keys of many slots, and its marker
$t->conf_refused(<<"EOF", qr/"redis_sync" of zone "s" with redis_cluster=on: an exchange sends many keys in one script call/, 'redis_sync with redis_cluster=on');
ratelimit_zone s 1m redis=127.0.0.1:$rport redis_cluster=on redis_sync=100ms;
EOF
$t->conf_refused(<<"EOF", qr/charge= is not supported/, 'charge= with redis_sync');
ratelimit_zone s 1m redis=127.0.0.1:$rport redis_sync=100ms;
server { listen 127.0.0.1:%%PORT%%; location / { ratelimit zone=s key=\$remote_addr algorithm=fixed_window limit=10 charge=1 name=w; } }
EOF

is(join('', map { $_->error_log =~ /\[(alert|crit|emerg)\]/ ? $_->error_log : '' } @fleet), '',
   'no alert in the servers\' logs');

$_->stop() for @fleet;
done_testing();
