#!/usr/bin/perl
# Redis Cluster: three masters (no replicas), two nginx servers knowing only
# the first.  A request's keys carry one hash tag (its key), so stacked rules
# stay one atomic script; MOVED teaches each worker where a slot lives; keys
# spread over the three; limits are exact across the servers.  An ASK during
# a slot migration is followed once.  Charges (charge=) go to the master of
# their key's slot as requests end, and bans (ban=) live beside the key's
# state, in its slot.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;
use RLRedis;

my @nodes = RLRedis->cluster;
my $seed = $nodes[0]->port;

my @fleet = map { RLTest->new() } 1 .. 2;
for my $t (@fleet) {
    $t->start(<<"EOF2", workers => 2);
log_format rl '\$uri \$status \$ratelimit_decided_by';
access_log %%PREFIX%%/rl.log rl;
ratelimit_zone cl 1m redis=127.0.0.1:$seed redis_cluster=on redis_timeout=5s;
server {
    listen 127.0.0.1:%%PORT%% reuseport;
    location /one/ {
        ratelimit zone=cl key=\$http_x_key limit=3 period=1h;
        alias %%PREFIX%%/html/;
    }
    location /stacked/ {
        ratelimit zone=cl key=\$http_x_key limit=100 period=1h name=first;
        ratelimit zone=cl key=\$http_x_key algorithm=sliding_window limit=1000 period=1h name=second;
        alias %%PREFIX%%/html/;
    }
    location /charged/ {
        ratelimit zone=cl key=\$http_x_key algorithm=fixed_window limit=10 period=1h charge=3 ban=1h name=charged;
        alias %%PREFIX%%/html/;
    }
    location = /stats { ratelimit_stats; }
}
EOF2
}

# 60 keys, 5 requests each, alternating servers: exactly 3 pass for each
my ($exact, @sizes) = RLRedis::three_of_five(\@fleet, \@nodes, '/one/index.html', 'key');
ok($exact, '60 keys over two servers: exactly 3 of 5 pass for each');
is(scalar(grep { $_ > 5 } @sizes), 3, "the keys are spread over the three masters (@sizes)");

# one key hammered through both servers, two stacked rules
my ($ok, $limited, $other) = RLTest::burst(ports => [ map { $_->port } @fleet ], path => '/stacked/index.html',
                                           key => 'hot', total => 400, conns => 32);
is($ok, 100, 'stacked on a cluster: exactly 100 of 400 admitted');
is($limited + $other, 300, 'the rest rejected');

# charges to the key's master, from either server: 20 keys, each charged 3
# a request (of 10 an hour): four served (the fourth into the next window),
# the fifth refused and banned, the sixth banned
sub charges_settled {
    my $sum = 0;
    $sum += $_->zone_stats('cl')->{redis}{charges} for @fleet;
    return $sum;
}
my ($sent, $charged_ok) = (0, 1);
for my $k (1 .. 20) {
    my @s;
    for my $i (1 .. 6) {
        my $r = $fleet[ $i % 2 ]->get('/charged/index.html', { 'X-Key' => "charged-$k" });
        push @s, $r->{status};
        push @s, "(Retry-After $r->{headers}{'retry-after'})" if $i == 5;   # the ban's
        if ($r->{status} == 200) {
            $sent++;
            RLTest::wait_until(sub { charges_settled() >= $sent }, 10);
        }
    }
    $charged_ok &&= "@s" eq '200 200 200 200 429 (Retry-After 3600) 429' or diag("charged-$k: @s");
}
ok($charged_ok, '20 keys charged over two servers: four served, then refused and banned, for each');
is(charges_settled(), 80, 'every charge settled by the master of its key');
my $keys = 0;
$keys += scalar(@{ $_->cmd('KEYS', 'ratelimit:*') }) for @nodes;
is($keys, 60 + 2 + 20 * 2, "each charged key's state and ban in the cluster, beside the others' states");

# a slot migrating: its keys answered with ASK by the old master
my $key = 'migrating';
my ($from, $slot) = RLRedis::master_of(\@nodes, $key);
my ($to) = grep { $_ != $from } @nodes;
my $to_id = $to->cmd('CLUSTER', 'MYID');
my $from_id = $from->cmd('CLUSTER', 'MYID');
$to->cmd('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $from_id);
$from->cmd('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $to_id);
is($fleet[0]->statuses('/one/index.html', 4, { 'X-Key' => $key }), '200 200 200 429', 'a migrating slot (ASK): the limit holds');
is($to->cmd('CLUSTER', 'COUNTKEYSINSLOT', $slot), 1, 'the new key went to the importing master');
is($from->cmd('CLUSTER', 'COUNTKEYSINSLOT', $slot), 0, 'and not to the migrating one');

for my $t (@fleet) {
    my $s = $t->zone_stats('cl')->{redis};
    is($s->{fallbacks}, 0, 'no fallback on ' . $t->port);
    is($s->{errors}, 0, 'no error on ' . $t->port);
    is($s->{undelivered}, 0, 'no charge lost on ' . $t->port);
}
unlike($fleet[0]->error_log, qr/ratelimit: redis/, 'nothing logged about Redis');
$_->stop() for @fleet;
done_testing();

