#!/usr/bin/perl
# algorithm=concurrency on a Redis zone: three nginx (two workers each)
# share one Redis and a slow upstream that counts the requests it holds at
# once.  With limit=10 and clients that would hold 30, the upstream never
# holds more than 10 and holds 9 or more on average (measured from its own
# record of each request's start and end); a server killed with SIGKILL
# while it holds 5 slots loses them to the other two within the lease
# (measured); the key API says a key's slots held across the fleet and
# those of its own server (right across its workers and a reload), the
# stats each server's own; leases renewed for requests that outlive a
# third of theirs, released when they end, counted in the stats; a rate rule beside it takes
# nothing when the slot is refused; max_wait and redis_sync refused at
# nginx -t, saying why.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use HTTP::Tiny;
use Time::HiRes qw(time sleep);
use RLTest qw(statuses_of);
use RLRedis;
use RLSlowUpstream;

my $redis = RLRedis->new->start;
my $rport = $redis->port;
my $up = RLSlowUpstream->new->start;
my $uport = $up->port;

my $lease = 3;   # seconds: lease=3s, renewed every second

my $conf = <<"EOF";
keepalive_requests 100000000;
ratelimit_zone rc 1m redis=127.0.0.1:$rport redis_timeout=5s;
upstream slow { server 127.0.0.1:$uport; }
proxy_read_timeout 60s;
server {
    listen 127.0.0.1:%%PORT%%;
    add_header X-Decided \$ratelimit_decided_by always;
    location /c/ {
        ratelimit zone=rc key=\$http_x_key algorithm=concurrency limit=10 lease=${lease}s name=c;
        proxy_pass http://slow/;
    }
    location /rated/ {
        ratelimit zone=rc key=\$http_x_key algorithm=fixed_window limit=3 period=1h name=rate;
        ratelimit zone=rc key=\$http_x_key algorithm=concurrency limit=1 lease=${lease}s name=one;
        proxy_pass http://slow/;
    }
    location /rl/ { ratelimit_api; }
    location = /stats { ratelimit_stats; }
}
EOF

# The most requests at once at the upstream among those whose X-Seq
# matches (the upstream's record of each start and end).
sub most_at_once {
    my ($re) = @_;
    my ($in, $most) = (0, 0);
    for my $e (sort { $a->[2] <=> $b->[2] || ($a->[1] eq 'end' ? -1 : 1) } grep { $_->[0] =~ $re } $up->events) {
        $in += $e->[1] eq 'start' ? 1 : -1;
        $most = $in if $in > $most;
    }
    return $most;
}

my @fleet = map { RLTest->new() } 1 .. 3;
$_->write_conf($conf, workers => 2) for @fleet;
$_->start for @fleet;
my ($one, $two, $three) = @fleet;
my @ports = map { $_->port } @fleet;

# ---- refused at nginx -t, saying why ----
$one->conf_refused(
    "ratelimit_zone r 1m redis=127.0.0.1:$rport;\n"
    . RLTest::one_location('ratelimit zone=r key=$uri algorithm=concurrency limit=5 max_wait=2s; root html;'),
    qr/"max_wait=" does not apply to algorithm=concurrency in a Redis zone: a request would wait in its server's queue/,
    'max_wait on a Redis zone');
$one->conf_refused(
    "ratelimit_zone r 1m redis=127.0.0.1:$rport redis_sync=100ms;\n"
    . RLTest::one_location('ratelimit zone=r key=$uri algorithm=concurrency limit=5; root html;'),
    qr/algorithm=concurrency.*exchange of counts every interval cannot hold to a limit across servers/,
    'concurrency on a redis_sync zone');

# ---- a rate rule beside it: a refusal by either takes nothing of the other ----
{
    my @r = RLTest::parallel(map { my $t = $_; sub { $t->get('/rated/', { 'X-Key' => 'r', 'X-Hold' => 1500 }) } }
                             $one, $two);
    is(join(' ', sort map { $_->{status} } @r), '200 429', 'limit=1 across two servers: one served, one refused');
    is($one->key_rule('rc', 'r', 'rate')->{remaining}, 2, 'the refused request spent no rate (2 of 3 left)');
    # the key's slot free again (a release follows its response)
    my $slot_back = sub { RLTest::wait_until(sub { $one->key_rule('rc', 'r', 'one')->{remaining} == 1 }, 5) };
    $slot_back->();
    is($one->key_rule('rc', 'r', 'one')->{remaining}, 1, 'its slot is back once the served one ended');
    # one after another, each once the slot of the one before is back: a
    # release follows its response, and the next request may reach Redis
    # first (on another connection)
    my @after;
    for (1 .. 3) {
        push @after, $three->get('/rated/', { 'X-Key' => 'r' });
        $slot_back->();
    }
    is(statuses_of(@after), '200 200 429', 'then the rate refuses the fourth');
    # a lease is taken as a request is decided, and released as it ends
    # (after its response): the count of those taken says it at once
    is($three->zone_stats('rc')->{redis}{leases}, 2, 'and the rate\'s refusal took no slot (2 leases, 3 requests)');
    $slot_back->();
    is($two->key_rule('rc', 'r', 'one')->{remaining}, 1, 'the slot free again once they ended');
}

# ---- a key's slots held here and across the fleet ----
# 3 requests of a key held on server one, 2 on two, none on three: the key
# API of each says the fleet's 5 in flight and its own share (three none);
# each server's stats say its own in flight for the rule; all 0 once they
# end.
{
    my $key = 'share';
    my %on = (1 => $one, 2 => $one, 3 => $one, 4 => $two, 5 => $two);
    my @held = map { my $i = $_;
        RLTest::spawn(sub { $on{$i}->get('/c/', { 'X-Key' => $key, 'X-Hold' => 4000, 'X-Seq' => "share-$i" })->{status} })
    } sort keys %on;
    ok(RLTest::wait_until(sub { (grep { $_->[0] =~ /^share-/ && $_->[1] eq 'start' } $up->events) == 5 }, 10),
       'five requests of the key held at the upstream');
    my @k = map { $_->key_rule('rc', $key, 'c') } @fleet;
    is(join(' | ', map { "$_->{in_flight} $_->{in_flight_here}" } @k), '5 3 | 5 2 | 5 0',
       'key API: 5 in flight across the fleet; 3 of them on server one, 2 on two, none on three');
    is(join(' ', map { $_->rule_stats('rc', 'c')->{in_flight} } @fleet), '3 2 0',
       'stats: each server\'s own requests holding a slot of the rule (3, 2, 0)');
    # every lease of a server is named with the same id, whichever worker
    # holds it; the two servers' ids differ
    my @sets = grep { ref $_ eq 'ARRAY' && @$_ } map { $redis->cmd('ZRANGE', $_, 0, -1) } @{ $redis->cmd('KEYS', '*') };
    my %pids = map { my $t = $_; map { ($_ => $t) } $t->worker_pids } $one, $two;
    my (%ids, %workers);
    for my $m (map { @$_ } @sets) {
        my ($id, undef, $pid) = split /:/, $m;
        next unless $pids{$pid};
        $ids{ $pids{$pid}->port }{$id} = 1;
        $workers{ $pids{$pid}->port }{$pid} = 1;
    }
    is(join(' ', map { scalar keys %{ $ids{ $_->port } } } $one, $two), '1 1', 'one id in the names of a server\'s leases');
    isnt((keys %{ $ids{ $one->port } })[0], (keys %{ $ids{ $two->port } })[0], 'and another for the other server');
    diag(sprintf 'held by %d worker(s) of server one, %d of server two', scalar keys %{ $workers{ $one->port } },
         scalar keys %{ $workers{ $two->port } });
    is(join(' ', map { ($_->result)[0] } @held), '200 200 200 200 200', 'the five served');
    RLTest::wait_until(sub { !grep { $_->key_rule('rc', $key, 'c')->{in_flight} } @fleet }, 5);
    is(join(' | ', map { my $k = $_->key_rule('rc', $key, 'c'); "$k->{in_flight} $k->{in_flight_here}" } @fleet),
       '0 0 | 0 0 | 0 0', 'once they ended: none in flight, none here');
    is(join(' ', map { $_->rule_stats('rc', 'c')->{in_flight} } @fleet), '0 0 0', 'stats: none in flight');
}

# ---- limit=10, a load that would hold 30 ----
{
    my $hold = 2000;
    my $for = 10;
    $up->reset_most;
    my $start = time + 0.5;
    my @served = RLTest::parallel(map {
        my $i = $_;
        sub {
            my $http = HTTP::Tiny->new(keep_alive => 1, timeout => 30);
            my ($ok, $n) = (0, 0);
            sleep($start - time) if $start > time;
            while (time < $start + $for) {
                my $port = $ports[ ($i + $n++) % 3 ];
                my $r = $http->get("http://127.0.0.1:$port/c/", { headers => { 'X-Key' => 'load', 'X-Hold' => $hold,
                                                                               'X-Seq' => "load-$i-$n" } });
                if ($r->{status} == 200) { $ok++ } else { sleep 0.1 }
            }
            return $ok;
        }
    } 1 .. 30);
    my $most = most_at_once(qr/^load-/);
    ok($most <= 10, "the upstream never held more than 10 of the key at once (most $most)");
    # the time-weighted mean of the requests in flight, from the upstream's
    # record, over the steady part of the load (its first and last seconds
    # left out)
    my ($from, $to) = ($start + 2.5, $start + $for - 2.5);
    my ($in, $area, $at) = (0, 0, $from);
    for my $e (sort { $a->[2] <=> $b->[2] } grep { $_->[0] =~ /^load-/ } $up->events) {
        my ($seq, $what, $t) = @$e;
        last if $t >= $to;
        if ($t > $from) {
            $area += $in * ($t - $at);
            $at = $t;
        }
        $in += $what eq 'start' ? 1 : -1;
    }
    $area += $in * ($to - $at);
    my $mean = $area / ($to - $from);
    ok($mean >= 9, sprintf('the upstream held %.2f on average (at least 9)', $mean));
    my $total = 0;
    $total += $_ for @served;
    diag(sprintf 'limit=10, 30 clients on three servers for %d s: %d served, the upstream held %d at most and '
         . '%.2f on average', $for, $total, $most, $mean);
    RLTest::wait_until(sub { $one->key_rule('rc', 'load', 'c')->{remaining} == 10 }, 5);
    is($one->key_rule('rc', 'load', 'c')->{remaining}, 10, 'every slot back once the load is over');
}

# ---- a server killed while it holds 5 slots ----
{
    my $key = 'kill';
    my @held;
    # 5 on server three, 5 on servers one and two, each held 20 s
    for my $i (1 .. 10) {
        my $t = $i <= 5 ? $three : $fleet[ $i % 2 ];
        push @held, RLTest::spawn(sub { $t->get('/c/', { 'X-Key' => $key, 'X-Hold' => 20000, 'X-Seq' => "held-$i" }) });
        RLTest::wait_until(sub { grep { $_->[0] eq "held-$i" } $up->events }, 5);
    }
    my $k = $one->key_rule('rc', $key, 'c');
    is("$k->{remaining} $k->{in_flight}", '0 10', 'key API: the key holds its 10 slots across the fleet');
    is($two->get('/c/', { 'X-Key' => $key })->{status}, 429, 'an eleventh is refused');
    $three->kill_server;
    my $killed = time;
    is($one->get('/c/', { 'X-Key' => $key })->{status}, 429, 'right after the kill its slots still count');
    # the other two take the 5 again: each taker retries every 50 ms
    my @takers = map {
        my $i = $_;
        my $t = $fleet[ $i % 2 ];
        RLTest::spawn(sub {
            while (time < $killed + 2 * $lease + 5) {
                my $r = $t->get('/c/', { 'X-Key' => $key, 'X-Hold' => 300, 'X-Seq' => "again-$i" });
                return 1 if $r->{status} == 200;
                sleep 0.05;
            }
            return 0;
        });
    } 1 .. 5;
    my @took = map { ($_->result)[0] } @takers;
    is(join(' ', @took), '1 1 1 1 1', 'the other two servers took the 5 slots again');
    my @starts = sort { $a <=> $b } map { $_->[2] } grep { $_->[0] =~ /^again-/ && $_->[1] eq 'start' } $up->events;
    my $last = @starts == 5 ? $starts[-1] - $killed : -1;
    ok($last > 0 && $last <= $lease + 0.5,
       sprintf('all 5 taken again %.2f s after the kill (lease %d s)', $last, $lease));
    diag(sprintf 'SIGKILL of a server holding 5 of 10 slots: the other two held them again %.2f to %.2f s after '
         . '(lease=%ds)', ($starts[0] // $killed) - $killed, $last, $lease);
    $_->wait for @held;
    my $s = $one->zone_stats('rc')->{redis};
    ok($s->{leases_renewed} > 0, "leases renewed for requests held past a third of the lease ($s->{leases_renewed})");
}

# ---- the stats: taken, released, none expired ----
{
    RLTest::wait_until(sub { my $s = $two->zone_stats('rc')->{redis}; $s->{leases} == $s->{leases_released} }, 5);
    my $s = $two->zone_stats('rc')->{redis};
    ok($s->{leases} > 0, "leases taken ($s->{leases})");
    is($s->{leases_released}, $s->{leases}, 'each released when its request ended');
    is($s->{leases_expired}, 0, 'none expired');
    is($s->{leases_undelivered}, 0, 'none undelivered');
}

# ---- Redis stopped and started: on_redis_error applies, then the bound, no lease left over ----
{
    my $key = 'down';
    $redis->stop;
    my @r = RLTest::parallel({ gap => 0.05 },
        map { sub { $one->get('/c/', { 'X-Key' => $key, 'X-Hold' => 2500 }) } } 1 .. 3);
    is(join(' ', map { "$_->{status} $_->{headers}{'x-decided'}" } @r),
       join(' ', ('200 fallback_local') x 3), 'Redis away: decided in the zone (on_redis_error=local)');
    $redis->start;
    ok(RLTest::wait_until(sub { ($one->get('/c/', { 'X-Key' => 'probe' })->{headers}{'x-decided'} // '') eq 'redis'
                                && ($two->get('/c/', { 'X-Key' => 'probe' })->{headers}{'x-decided'} // '') eq 'redis' },
                          15), 'Redis back: decided there again');
    my $k = $one->key_rule('rc', $key, 'c');
    is("$k->{remaining} $k->{in_flight}", '10 0', 'no lease left of the requests decided while Redis was away');
    @r = RLTest::parallel({ gap => 0.02 }, map { my ($t, $i) = ($fleet[ $_ % 2 ], $_);
        sub { $t->get('/c/', { 'X-Key' => $key, 'X-Hold' => 1500, 'X-Seq' => "back-$i" })->{status} } } 1 .. 12);
    is(join(' ', sort @r), join(' ', ('200') x 10, '429', '429'), 'then 12 at once: 10 served, 2 refused');
    my $most = most_at_once(qr/^back-/);
    ok($most <= 10, "the upstream held at most 10 of them at once ($most)");
}

# ---- a reload while slots are held: none lost, none doubled ----
{
    my $key = 'reload';
    my @held = map { my $i = $_; my $t = $fleet[ $i % 2 ];
        RLTest::spawn(sub { $t->get('/c/', { 'X-Key' => $key, 'X-Hold' => 3000, 'X-Seq' => "reload-$i" })->{status} })
    } 1 .. 10;
    RLTest::wait_until(sub { (grep { $_->[0] =~ /^reload-/ && $_->[1] eq 'start' } $up->events) == 10 }, 10);
    # server two's zone is kept, its counters with it; server one's is made
    # again, its counters from 0
    my $before = $two->zone_stats('rc')->{redis}{leases_expired};
    # server one's zone made again (another size), two's kept
    $one->write_conf($conf =~ s/ratelimit_zone rc 1m/ratelimit_zone rc 2m/r, workers => 2);
    ok($one->reload_started(2) && $two->reload_started(2), 'both servers reloaded while their old workers hold 10');
    like($one->error_log, qr/ratelimit_zone "rc" changed size/, 'server one\'s zone was made again');
    is($one->key_rule('rc', $key, 'c')->{in_flight}, 10, 'reloaded while 10 are held: 10 in flight still');
    is(join(' ', map { $_->key_rule('rc', $key, 'c')->{in_flight_here} } $one, $two), '5 5',
       'the new workers count the old ones\' leases as their server\'s (5 each), the zone made again or kept');
    is($two->rule_stats('rc', 'c')->{in_flight}, 5, 'stats of the kept zone: the old workers\' 5 in flight');
    is($two->get('/c/', { 'X-Key' => $key })->{status}, 429, 'an eleventh refused by the new workers');
    is(join(' ', map { ($_->result)[0] } @held), join(' ', ('200') x 10), 'the 10 served by the old workers');
    RLTest::wait_until(sub { $one->key_rule('rc', $key, 'c')->{in_flight} == 0 }, 5);
    is($one->key_rule('rc', $key, 'c')->{in_flight}, 0, 'their slots given back as they ended');
    is(join(' ', map { $_->key_rule('rc', $key, 'c')->{in_flight_here} } $one, $two), '0 0', 'none here');
    is($two->rule_stats('rc', 'c')->{in_flight}, 0, 'stats: none in flight');
    is(join(' ', map { $_->zone_stats('rc')->{redis}{leases_expired} } $one, $two), "0 $before",
       'none expired (server one\'s zone made again counts from 0)');
}

$_->stop for $one, $two;
$redis->stop;

# ---- Redis Cluster: the keys spread over three masters, leases renewed there ----
{
    my @nodes = RLRedis->cluster;
    my $seed = $nodes[0]->port;
    my @pair = map { RLTest->new() } 1 .. 2;
    $_->start(<<"EOF2", workers => 2) for @pair;
upstream slow { server 127.0.0.1:$uport; }
ratelimit_zone cl 1m redis=127.0.0.1:$seed redis_cluster=on redis_timeout=5s;
server {
    listen 127.0.0.1:%%PORT%%;
    location /c/ {
        ratelimit zone=cl key=\$http_x_key algorithm=concurrency limit=3 lease=1s name=c;
        proxy_pass http://slow/;
    }
    location /rl/ { ratelimit_api; }
    location = /stats { ratelimit_stats; }
}
EOF2
    my $exact = 1;
    for my $k (1 .. 12) {
        my @r = RLTest::parallel({ gap => 0.02 }, map { my $t = $pair[ $_ % 2 ];
            sub { $t->get('/c/', { 'X-Key' => "cl-$k", 'X-Hold' => 1200 })->{status} } } 1 .. 5);
        $exact &&= join(' ', sort @r) eq '200 200 200 429 429';
    }
    ok($exact, '12 keys, 5 at once over two servers, each held 1.2 s with lease=1s: 3 served, 2 refused each');
    my @sizes = map { $_->cmd('DBSIZE') } @nodes;
    my $s = $pair[0]->zone_stats('cl')->{redis};
    ok($s->{leases_renewed} > 0, "leases renewed on the masters of their keys ($s->{leases_renewed})");
    is($s->{leases_expired}, 0, 'none expired');
    RLTest::wait_until(sub { !grep { $_->cmd('DBSIZE') } @nodes }, 5);
    is(join(' ', map { $_->cmd('DBSIZE') } @nodes), '0 0 0', 'every lease released: no key left');
    $_->stop for @pair;
    $_->stop for @nodes;
}
done_testing();
