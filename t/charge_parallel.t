#!/usr/bin/perl
# charge= under parallel requests: a request whose charge is not known yet
# reserves a third of what a key can hold (34 of 100), within what the key
# has left, so that a key's requests in flight together never reserve more
# than it has.  An upstream that reports 50 tokens after half a second, a
# limit of 100 an hour: 200 requests of one key at once are served at most
# three times (34 + 34 + 32 reserved), where reserving only the cost (1) let
# a hundred through (5,000 tokens).  With cost= from the request (its
# max_tokens), twice (50 each).  Local and Redis zones, two workers.
# (t/charge_adversary.t: the same whatever charges came before.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;
use RLRedis;
use RLSlowUpstream;

my $up = RLSlowUpstream->new->start;
my $upport = $up->port;
my $redis = RLRedis->new->start;
my $rport = $redis->port;

my $t = RLTest->new();
# a location per zone (local, Redis) and per way to reserve: a third of
# the limit, or cost= from the request
my $locations = '';
for my $z (['', 'ai'], ['r', 'rai']) {
    my ($r, $zone) = @$z;
    for my $rule (['tok', ''], ['max', ' cost=$arg_max_tokens']) {
        my ($name, $cost) = @$rule;
        $locations .= <<"LOC";
    location /$r$name {
        ratelimit zone=$zone key=\$http_x_api_key limit=100 period=1h$cost charge=\$upstream_http_x_tokens name=$name;
        proxy_pass http://127.0.0.1:$upport/hold/500;
    }
LOC
    }
}

$t->start(<<"EOF", workers => 2);
ratelimit_zone ai 1m;
ratelimit_zone rai 1m redis=127.0.0.1:$rport redis_timeout=5s;
log_format charged '\$uri \$status \$ratelimit_charged';

server {
    listen 127.0.0.1:%%PORT%%;
    access_log %%PREFIX%%/charged.log charged;
    proxy_set_header X-Answer-Header "X-Tokens: 50";

$locations    location /rl/ { ratelimit_api; }
    location = /stats { ratelimit_stats; }
}
EOF

my $logged = 0;   # lines of charged.log so far

# n requests, each for its own key, one after the other, each charged 50
sub warm {
    my ($path, $prefix, $n) = @_;
    for my $i (1 .. $n) {
        my $r = $t->get($path, { 'X-Api-Key' => "$prefix$i" });
        is($r->{status}, 200, "$path: settled request $i served") unless $r->{status} == 200;
    }
    $logged += $n;
    wait_lines();
}

# the access log's lines, written after each response went out
sub wait_lines {
    RLTest::wait_until(sub { (() = $t->file('charged.log') =~ /\n/g) >= $logged }, 20);
}

# 200 requests of one key at once: how many were served
sub flood {
    my ($path, $key) = @_;
    my @r = $t->at_once(map { [ $path, 'X-Api-Key' => $key ] } 1 .. 200);
    my %n;
    $n{ $_->{status} }++ for @r;
    $logged += 200;
    wait_lines();
    return \%n;
}

for my $zone (['ai', ''], ['rai', 'r']) {
    my ($z, $r) = @$zone;

    warm("/${r}tok", 'w', 10);

    my $n = flood("/${r}tok", 'new');
    ok(($n->{200} // 0) >= 1 && ($n->{200} // 0) <= 3,
       "$z: 200 parallel requests of a new key, 50 tokens each, 100 an hour: served " . ($n->{200} // 0)
       . ' times (at most 3)');
    is(($n->{200} // 0) + ($n->{429} // 0), 200, "$z: the others refused with 429");
    my $all = 10 * 50 + 50 * ($n->{200} // 0);
    RLTest::wait_until(sub { ($t->rule_stats($z, 'tok')->{charged} // 0) >= $all }, 10);   # Redis: its replies
    is($t->rule_stats($z, 'tok')->{charged}, $all,
       "$z: each served request charged 50 ($all in all)");
    my $k = $t->key_rule($z, 'new', 'tok');
    ok($k->{remaining} == 0, "$z: the key has nothing left afterwards");

    # cost= from the request: reserved before any history
    $n = flood("/${r}max?max_tokens=50", 'fresh');
    ok(($n->{200} // 0) >= 1 && ($n->{200} // 0) <= 2,
       "$z: cost=\$arg_max_tokens, max_tokens=50: served " . ($n->{200} // 0) . ' times (at most 2)');
}

# each served request is charged what the upstream said
my @lines = grep { m{^/r?(tok|max)} } split /\n/, $t->file('charged.log');
my @served = grep { / 200 / } @lines;
is(scalar(grep { / 200 50$/ } @served), scalar(@served), 'each served request charged 50');

$t->stop;
done_testing();
