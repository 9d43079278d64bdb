#!/usr/bin/perl
# redis_sync while Redis takes its time: two servers, one worker each, a
# 256 KB zone (a journal of 1,024 keys) with redis_sync=100ms.  Redis is
# stopped while each server admits 2,000 distinct keys, a request each
# (sixteen script calls' worth, more than four exchanges in flight and the
# journal hold at once when each exchange takes half a journal of 256
# keys), then started again: nothing is dropped, every unit reaches Redis
# once, and each key's count there is the fleet's, 2.
# The calls wait for Redis (redis_timeout=30s: none fails however long
# the machine takes to send the requests).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest;
use RLRedis;

my $keys = 2000;
my $redis = RLRedis->new->start;
my $rport = $redis->port;

my @fleet = map { RLTest->new() } 1 .. 2;
for my $t (@fleet) {
    $t->start(<<"EOF", workers => 1);
ratelimit_zone burst 256k redis=127.0.0.1:$rport redis_prefix=b: redis_sync=100ms redis_timeout=30s;
server {
    listen 127.0.0.1:%%PORT%%;
    keepalive_requests 100000;
@{[ RLTest::locations('/b' => 'ratelimit zone=burst key=$http_x_key algorithm=fixed_window limit=5 period=1h name=b;') ]}
    location = /stats { ratelimit_stats; }
}
EOF
}

sub figures { $_[0]->zone_stats('burst')->{sync} }

# each server's first exchange done: its connection open, the script loaded
for my $t (@fleet) {
    $t->get('/b', { 'X-Key' => 'warm' });
    ok(RLTest::wait_until(sub { figures($t)->{keys} >= 1 }, 10), 'a first exchange');
}
my @before = map { figures($_) } @fleet;

$redis->pause;
my $start = time;
for my $t (@fleet) {
    my %st = $t->pipelined('/b', 'X-Key', map { "key-$_" } 1 .. $keys);
    is($st{200}, $keys, "$keys distinct keys, a request each, admitted while Redis is stopped");
}
my $took = time() - $start;
$redis->resume;

# every unit in Redis: the fleet's total of each key (its window's counter)
sub totals {
    my %total;
    $total{$_} = $redis->cmd('GET', $_) // 0 for @{ $redis->cmd('KEYS', 'b:s:*') };
    return \%total;
}
my $sum = 0;
RLTest::wait_until(sub {
    $sum = 0;
    $sum += $_ for values %{ totals() };
    $sum >= 2 * $keys + 2 && !grep { figures($_)->{pending} } @fleet;
}, 30);
my @after = map { figures($_) } @fleet;
for my $i (0 .. 1) {
    my ($b, $a) = ($before[$i], $after[$i]);
    is($a->{failures} - $b->{failures}, 0, sprintf('server %d: no call failed (Redis stopped %.1f s)', $i + 1, $took));
    is($a->{dropped} - $b->{dropped}, 0, sprintf('server %d: nothing dropped', $i + 1));
    is($a->{units} - $b->{units}, $keys, sprintf('server %d: its %d units sent, each once', $i + 1, $keys));
}
my $total = totals();
my $twice = grep { $_ == 2 } values %$total;   # the warm-up key's too
is($sum, 2 * $keys + 2, "Redis holds every unit admitted: $sum (the 2 warm-up ones too)");
is($twice, $keys + 1, "each of the $keys keys counts 2 in Redis, one from each server");

$_->stop for @fleet;
done_testing();
