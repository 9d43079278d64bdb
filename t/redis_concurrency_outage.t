#!/usr/bin/perl
# algorithm=concurrency limit=3 lease=1s on_redis_error=local through a
# Redis outage: two nginx (two workers each) share one Redis and a slow
# upstream that records when each request starts and ends (X-Seq names the
# server that sent it).  Three requests admitted through Redis (two on
# server A, one on B) hold the key's three slots for 8 s; Redis is stopped
# (its leases lost with it: no persistence) and started again 2.5 s later,
# while eight clients, four a server, keep asking.
#
# * While Redis is away each server decides alone, its requests holding
#   Redis leases counted: A admits one more, B two; the upstream never holds
#   more than 3 from a server, 6 in all (`limit` on each server), and holds
#   3 from each.
# * Once Redis answers again, every request each server holds (those of
#   the outage and those whose leases Redis lost) is written into Redis,
#   within the documented bound of its return (measured in Redis); no
#   server holds more than 3 meanwhile, and from then on no request starts
#   while 3 or more are in flight across the fleet: when the outage's
#   requests end, the 3 from before it still hold the key.
# * Once those end, 3 at once again, and no lease is left in Redis.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use HTTP::Tiny;
use List::Util qw(max sum);
use Time::HiRes qw(time sleep);
use RLTest;
use RLRedis;
use RLSlowUpstream;

my $redis = RLRedis->new->start;
my $rport = $redis->port;
my $up = RLSlowUpstream->new->start;
my $uport = $up->port;
my $limit = 3;
my $outage = 2.5;    # seconds Redis is stopped
my $back_within = 1.2;    # docs/redis.md: the leases are in Redis again within 1.2 s of its return
my $margin = 1;           # for a busy machine

my $conf = <<"EOF";
ratelimit_zone rc 1m redis=127.0.0.1:$rport redis_timeout=1s on_redis_error=local;
server {
    listen 127.0.0.1:%%PORT%%;
    add_header X-Decided \$ratelimit_decided_by always;
    location /c/ {
        ratelimit zone=rc key=\$http_x_key algorithm=concurrency limit=$limit lease=1s name=c;
        proxy_pass http://127.0.0.1:$uport/;
    }
    location = /stats { ratelimit_stats; }
}
EOF

my %fleet = (A => RLTest->new, B => RLTest->new);
$_->start($conf, workers => 2) for values %fleet;

# The key's leases in Redis (the zone's only key there).
sub leases_in_redis {
    my $keys = $redis->cmd('KEYS', 'ratelimit:*');
    return ref $keys eq 'ARRAY' ? sum(0, map { $redis->cmd('ZCARD', $_) } @$keys) : 0;
}

# The upstream's record as a timeline: after each event, [time, 'start' or
# 'end', in flight from A, from B] (an end before a start at the same time).
sub timeline {
    my %in = (A => 0, B => 0);
    my @line;
    for my $e (sort { $a->[2] <=> $b->[2] || ($a->[1] eq 'end' ? -1 : 1) } $up->events) {
        my ($seq, $what, $t) = @$e;
        $in{ substr($seq, 0, 1) } += $what eq 'start' ? 1 : -1;
        push @line, [ $t, $what, $in{A}, $in{B} ];
    }
    return @line;
}

# The most in flight from A, from B and in all between two instants (what
# was in flight at the first included).
sub most {
    my ($line, $from, $to) = @_;
    my (@at, @most) = (0, 0);
    for my $e (@$line) {
        last if $e->[0] >= $to;
        @most = (@at, $at[0] + $at[1]) if $e->[0] >= $from && !@most;   # in flight as it began
        @at = @$e[ 2, 3 ];
        @most = (max($most[0], $at[0]), max($most[1], $at[1]), max($most[2], $at[0] + $at[1])) if @most;
    }
    return @most ? @most : (@at, $at[0] + $at[1]);
}

# ---- three requests through Redis hold the key's slots ----
my @pre = map {
    my ($srv, $i) = @$_;
    RLTest::spawn(sub {
        my $r = $fleet{$srv}->get('/c/', { 'X-Key' => 'k', 'X-Hold' => 8000, 'X-Seq' => "$srv-pre-$i" });
        return "$r->{status} $r->{headers}{'x-decided'}";
    });
} [ 'A', 1 ], [ 'A', 2 ], [ 'B', 1 ];
ok(RLTest::wait_until(sub { (grep { $_->[1] eq 'start' } $up->events) == 3 }, 10), 'three requests hold the key');
is(leases_in_redis(), 3, 'their three leases in Redis');
is($fleet{B}->get('/c/', { 'X-Key' => 'k' })->{status}, 429, 'a fourth is refused');

# ---- Redis stopped, started again; clients of both servers keep asking ----
$redis->stop;
my $down = time;
my $until = $down + $outage + 7;
my @clients = map {
    my ($srv, $i) = @$_;
    my $port = $fleet{$srv}->port;
    RLTest::spawn(sub {
        my $http = HTTP::Tiny->new(keep_alive => 1, timeout => 30);
        my ($n, %seen) = (0);
        while (time < $until) {
            # the outage's requests run 5 s, those after it 1 s
            my $hold = time < $down + $outage ? 5000 : 1000;
            my $r = $http->get("http://127.0.0.1:$port/c/",
                               { headers => { 'X-Key' => 'k', 'X-Hold' => $hold, 'X-Seq' => "$srv-$i-" . ++$n } });
            $seen{"$r->{status} " . ($r->{headers}{'x-decided'} // '-')}++;
            sleep 0.03 if $r->{status} != 200;
        }
        return \%seen;
    });
} map { my $s = $_; map { [ $s, $_ ] } 1 .. 4 } 'A', 'B';

sleep $down + $outage - time;
$redis->start;
my $back = time;
my $written = RLTest::wait_until(sub { leases_in_redis() >= 6 }, 10) ? time : undef;
ok(defined $written, 'Redis back: the 6 requests in flight are in Redis again (the outage\'s 3, the 3 it lost)');
$written //= $until;
ok($written - $back <= $back_within + $margin,
   sprintf('written back %.2f s after Redis answered again (docs: within %.1f s)', $written - $back, $back_within));

my %seen;
for my $c (@clients) {
    my ($s) = $c->result;
    $seen{$_} += $s->{$_} for keys %$s;
}
is(join(' ', map { ($_->result)[0] } @pre), '200 redis 200 redis 200 redis', 'the three served, decided in Redis');
diag('the clients saw: ' . join(', ', map { "$_ x$seen{$_}" } sort keys %seen));
ok($seen{'200 fallback_local'} && $seen{'429 fallback_local'}, 'while Redis was away, served and refused by the servers');

my @line = timeline();
my @away = most(\@line, $down, $back);
is("@away", '3 3 6', 'Redis away: at most 3 from each server, 6 in all, and 3 from each (A, B, all)');
my @after = most(\@line, $back, $until + 10);
ok($after[0] <= $limit && $after[1] <= $limit && $after[2] <= 2 * $limit,
   "Redis back: at most 3 from each server, 6 in all (@after)");

# from the write-back on, a request starts only where fewer than 3 are in
# flight across the fleet
my @late = grep { $_->[1] eq 'start' && $_->[0] > $written } @line;
my @over = grep { $_->[2] + $_->[3] > $limit } @late;
ok(@late > 0 && !@over, sprintf('after the write-back, %d requests started, none with more than %d in flight (%s)',
                                scalar @late, $limit, join(' ', map { sprintf '%.2f:%d', $_->[0] - $back, $_->[2] + $_->[3] } @over) || 'none'));
my $pre_end = max(map { $_->[2] } grep { $_->[0] =~ /-pre-/ && $_->[1] eq 'end' } $up->events);
my @free = most(\@line, $pre_end, $until + 10);
is($free[2], $limit, 'once the 3 from before the outage ended, 3 at once again');

RLTest::wait_until(sub { leases_in_redis() == 0 }, 5);
is(leases_in_redis(), 0, 'every lease released: none left in Redis');
my @st = map { $_->zone_stats('rc')->{redis} } values %fleet;
ok(sum(map { $_->{leases_restored} // 0 } @st) >= 6,
   'stats: leases restored in Redis: ' . join(' + ', map { $_->{leases_restored} // 'none' } @st));
is(join(' ', map { $_->rule_stats('rc', 'c')->{in_flight} } values %fleet), '0 0', 'stats: none in flight');

$_->stop for values %fleet;
done_testing();
