#!/usr/bin/perl
# charge= under parallel requests: a request whose charge is not known yet
# reserves a third of what a key can hold (34 of 100), within what the key
# has left, so that a key's requests in flight together never reserve more
# than it has, and no charge settled before (by other keys, or by the key
# itself) moves what they reserve.  An upstream that reports the tokens a
# request asks for (?t=) after half a second, a limit of 100 an hour, two
# workers, local and Redis zones:
#   - after ten charges of 50, 200 requests of a new key at once, charged
#     50 each, are served at most three times (34 + 34 + 32 reserved), where
#     reserving only the cost (1) let a hundred through (5,000 tokens); with
#     cost= from the request (its max_tokens), twice (50 each);
#   - poisoned downward: 16 throwaway keys charging 0, or 16 one-token
#     requests of the key itself, then 200 at once charging 50: at most 3;
#   - poisoned upward: 16 throwaway keys charging 100, then a key with 99
#     left sending 3 one-token requests at once: all 3 served;
#   - the same poison before a rule with ban=1h: 10 one-token requests at
#     once, those beyond what is reserved refused as REJECTED_IN_FLIGHT,
#     and no ban: the key is served once they ended.
# Every bound holds whatever the order the requests are decided and end
# in: none depends on how fast the machine is.
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
# a location per zone (local, Redis) and per scenario, each its own rule:
# what one scenario's charges did cannot reach another's
my $locations = '';
for my $z (['', 'ai'], ['r', 'rai']) {
    my ($r, $zone) = @$z;
    for my $rule (['tok', '', 500], ['max', ' cost=$arg_max_tokens', 500], ['down', '', 500], ['self', '', 500],
                  ['up', '', 500], ['ban', ' ban=1h', 2000]) {
        my ($name, $extra, $hold) = @$rule;
        $locations .= <<"LOC";
    location /$r$name {
        ratelimit zone=$zone key=\$http_x_api_key limit=100 period=1h$extra charge=\$upstream_http_x_tokens name=$name;
        proxy_pass http://127.0.0.1:$upport/hold/$hold;
    }
LOC
    }
}

$t->start(<<"EOF", workers => 2);
ratelimit_zone ai 1m;
ratelimit_zone rai 1m redis=127.0.0.1:$rport redis_timeout=5s;
log_format charged '\$uri \$http_x_api_key \$status \$ratelimit_status \$ratelimit_charged';

server {
    listen 127.0.0.1:%%PORT%%;
    access_log %%PREFIX%%/charged.log charged;
    proxy_set_header X-Answer-Header "X-Tokens: \$arg_t";

$locations    location /rl/ { ratelimit_api; }
    location = /stats { ratelimit_stats; }
}
EOF

my $logged = 0;   # lines of charged.log so far

# the access log's lines, written after each response went out
sub wait_lines {
    RLTest::wait_until(sub { (() = $t->file('charged.log') =~ /\n/g) >= $logged }, 30);
}

# one request of each key after the other, each settled before the next
# (answered at once: the upstream holds only the requests sent together)
sub serial {
    my ($path, $tokens, @keys) = @_;
    for my $key (@keys) {
        my $r = $t->get("$path?t=$tokens", { 'X-Api-Key' => $key, 'X-Hold' => 0 });
        is($r->{status}, 200, "$path: $key served, charged $tokens") unless $r->{status} == 200;
    }
    $logged += @keys;
    wait_lines();
}

# n requests of one key at once, each charged `tokens`: the statuses
sub flood {
    my ($path, $key, $n, $tokens) = @_;
    my $q = $path =~ /\?/ ? '&' : '?';
    my @r = $t->at_once(map { [ "$path${q}t=$tokens", 'X-Api-Key' => $key ] } 1 .. $n);
    my %n;
    $n{ $_->{status} }++ for @r;
    $logged += $n;
    wait_lines();
    return \%n;
}

# what a key has left once its requests' charges are settled (in Redis,
# after their replies: a settle is not waited for)
sub left {
    my ($z, $key, $rule, $want) = @_;
    RLTest::wait_until(sub { ($t->key_rule($z, $key, $rule)->{remaining} // -1) == $want }, 10);
    return $t->key_rule($z, $key, $rule)->{remaining};
}

# the access log's lines of a key: "status ratelimit_status charged"
sub lines_of {
    my ($path, $key) = @_;
    return map { m{^\Q$path\E \Q$key\E (\S+ \S+ \S+)$} ? $1 : () } split /\n/, $t->file('charged.log');
}

for my $zone (['ai', ''], ['rai', 'r']) {
    my ($z, $r) = @$zone;

    # ---- 200 at once after honest charges, and with cost= ----
    serial("/${r}tok", 50, map { "w$_" } 1 .. 10);
    my $n = flood("/${r}tok", 'new', 200, 50);
    my $served = $n->{200} // 0;
    ok($served >= 1 && $served <= 3,
       "$z: 200 parallel requests of a new key, 50 tokens each, 100 an hour: served $served times (at most 3)");
    is($served + ($n->{429} // 0), 200, "$z: the others refused with 429");
    my $all = 10 * 50 + 50 * $served;
    RLTest::wait_until(sub { ($t->rule_stats($z, 'tok')->{charged} // 0) >= $all }, 10);   # Redis: its replies
    is($t->rule_stats($z, 'tok')->{charged}, $all, "$z: each served request charged 50 ($all in all)");
    is(left($z, 'new', 'tok', 0), 0, "$z: the key has nothing left afterwards");

    $n = flood("/${r}max?max_tokens=50", 'fresh', 200, 50);
    $served = $n->{200} // 0;
    ok($served >= 1 && $served <= 2, "$z: cost=\$arg_max_tokens, max_tokens=50: served $served times (at most 2)");

    # ---- poisoned downward: charges of 0 by throwaway keys ----
    serial("/${r}down", 50, map { "honest$_" } 1 .. 10);
    serial("/${r}down", 0, map { "throwaway$_" } 1 .. 16);
    $n = flood("/${r}down", 'greedy', 200, 50);
    $served = $n->{200} // 0;
    ok($served >= 1 && $served <= 3,
       "$z: after 16 charges of 0 by other keys, 200 requests at once charging 50 each against 100: "
       . "served $served times (at most 3)");
    is($served + ($n->{429} // 0), 200, "$z: the others refused with 429");
    is(scalar(grep { /^200 PASSED 50$/ } lines_of("/${r}down", 'greedy')), $served, "$z: each served one charged 50");

    # ---- poisoned downward by the key itself: 16 one-token requests ----
    serial("/${r}self", 1, ('greedy') x 16);
    $n = flood("/${r}self", 'greedy', 200, 50);
    $served = $n->{200} // 0;
    ok($served >= 1 && $served <= 3,
       "$z: after 16 one-token requests of its own, 200 requests at once charging 50 each: "
       . "served $served times (at most 3)");

    # ---- poisoned upward: charges of 100 by throwaway keys ----
    serial("/${r}up", 100, map { "big$_" } 1 .. 16);
    serial("/${r}up", 1, 'modest');
    is(left($z, 'modest', 'up', 99), 99, "$z: the key has 99 left");
    $n = flood("/${r}up", 'modest', 3, 1);
    is($n->{200} // 0, 3, "$z: after 16 charges of 100 by other keys, 3 one-token requests at once: all 3 served");
    is(left($z, 'modest', 'up', 96), 96, "$z: and charged one token each (96 left)");

    # ---- no ban from a refusal the settled budget would have admitted ----
    serial("/${r}ban", 100, map { "big$_" } 1 .. 16);
    $n = flood("/${r}ban", 'innocent', 10, 1);
    $served = $n->{200} // 0;
    my @lines = lines_of("/${r}ban", 'innocent');
    my $in_flight = grep { /^429 REJECTED_IN_FLIGHT -$/ } @lines;
    ok($served >= 3, "$z: 10 one-token requests at once under ban=1h: $served served (3 at least)");
    is($served + $in_flight, 10,
       "$z: every other one refused as REJECTED_IN_FLIGHT, its key's requests in flight holding what it has")
        or diag(explain(\@lines));
    ok($in_flight > 0 || $served == 10, "$z: (refused in flight: $in_flight)");
    is(left($z, 'innocent', 'ban', 100 - $served), 100 - $served, "$z: what the key has left: " . (100 - $served));
    is($t->key_rule($z, 'innocent', 'ban')->{banned_ms} // 0, 0, "$z: the key API shows no ban");
    is($t->rule_stats($z, 'ban')->{bans} // 0, 0, "$z: the stats count no ban started");
    is($t->get("/${r}ban?t=1", { 'X-Api-Key' => 'innocent' })->{status}, 200,
       "$z: the key's next request is served");
    $logged++;
    wait_lines();
}

# each served request is charged what the upstream said
my @served = grep { m{^/r?(tok|max) \S+ 200 } } split /\n/, $t->file('charged.log');
is(scalar(grep { / 200 PASSED 50$/ } @served), scalar(@served), 'each served request charged 50');

$t->stop;
done_testing();
