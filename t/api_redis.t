#!/usr/bin/perl
# ratelimit_api on zones decided in Redis, with a real redis-server and two
# workers: a key's state read from Redis for every rule of the zone (as its
# refusal's headers showed it, nothing written by the look), reset in Redis
# (its keys deleted, logged at notice) and admitted afresh; a cost, a zone
# of more rules than one script call takes, an unknown rule (404), a
# fingerprint (400), and Redis down or stopped: 409 with a JSON error, never
# a 5xx; the top keys say they are this server's.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use JSON::PP;
use Time::HiRes qw(time);
use RLTest qw(json_of);
use RLRedis;

my $redis = RLRedis->new->start;
my $rport = $redis->port;
my $dead = RLTest::free_port();   # nothing listens there

my $t = RLTest->new();
my $many = join "\n", map {
    "    location /m$_/ { ratelimit zone=many key=\$http_x_user limit=$_ period=1h name=m$_; alias %%PREFIX%%/html/; }"
} 1 .. 20;
$t->start(<<"EOF", workers => 2);
ratelimit_zone rz 1m redis=127.0.0.1:$rport redis_timeout=5s;
ratelimit_zone many 1m redis=127.0.0.1:$rport redis_timeout=5s redis_prefix=many:;
ratelimit_zone down 1m redis=127.0.0.1:$dead redis_timeout=200ms;
server {
    listen 127.0.0.1:%%PORT%%;
    location /a/ {
        ratelimit zone=rz key=\$http_x_user limit=3 period=1h name=per_user log_key=on;
        ratelimit zone=rz key=\$http_x_user algorithm=sliding_window limit=5 period=1h name=win;
        alias %%PREFIX%%/html/;
    }
    location /c/ {
        ratelimit zone=rz key=\$http_x_user algorithm=token_bucket limit=10 period=1m cost=4 name=costly;
        alias %%PREFIX%%/html/;
    }
    location /d/ { ratelimit zone=down key=\$http_x_user limit=1 period=1h; alias %%PREFIX%%/html/; }
$many
    location /rl/ { ratelimit_api write=on; }
}
EOF

sub api {
    my ($method, $path) = @_;
    my $r = $t->request($method, "/rl/zones/$path");
    return ($r->{status}, json_of($r) // { content => $r->{content} });
}
sub rules_of { my ($j) = @_; return { map { $_->{rule} => $_ } @{ $j->{rules} // [] } } }

# ---- a fresh key: its full budget, and nothing written by looking ----

my ($status, $j) = api(GET => 'rz/keys?key=alice');
is($status, 200, 'a Redis zone\'s key: 200');
my $by = rules_of($j);
is_deeply([ sort keys %$by ], [qw(costly per_user win)], 'a state in each rule of the zone');
is_deeply([ @{ $by->{per_user} }{qw(state refused remaining reset_ms retry_after limit cost)} ],
          [ 'none', JSON::PP::false, 3, 0, 0, 3, 1 ], 'fresh: none, admitted, all 3 remaining');
is($by->{win}{remaining}, 5, 'fresh: the sliding_window rule\'s 5');
is_deeply([ @{ $by->{costly} }{qw(remaining cost)} ], [ 10, 4 ], 'fresh: the costly rule, its cost');
is($redis->cmd('DBSIZE'), 0, 'a look-up writes nothing in Redis');

# ---- spent, looked up as the refusal showed it ----

my @seen = map { $t->get_as('/a/index.html', user => 'alice') } 1 .. 4;
is(join(' ', map { $_->{status} } @seen), '200 200 200 429', 'alice: three admitted, the fourth refused');
my $retry = $seen[3]{headers}{'retry-after'};
($status, $j) = api(GET => 'rz/keys?key=alice');
$by = rules_of($j);
my $u = $by->{per_user};
is_deeply([ @{$u}{qw(state refused remaining)} ], [ 'held', JSON::PP::true, 0 ], 'spent: held, refused, 0 remaining');
cmp_ok($u->{retry_after}, '<=', $retry, 'spent: Retry-After as the refusal\'s, or less');
cmp_ok($u->{retry_after}, '>=', $retry - 2, 'spent: ... by the seconds gone since');
is($u->{retry_after}, int(($u->{retry_after_ms} + 999) / 1000), 'spent: seconds rounded up from the ms');
cmp_ok($u->{reset_ms}, '>', 3590000, 'spent: back to full budget in about an hour');
cmp_ok($u->{reset_ms}, '<=', 3600000, 'spent: and not more');
is_deeply([ @{ $by->{win} }{qw(state refused remaining)} ], [ 'held', JSON::PP::false, 2 ],
          'the other rule: 3 of 5 spent (the refused request spent nothing)');
is($by->{costly}{state}, 'none', 'a rule of another location: none');
my $keys = $redis->cmd('DBSIZE');
my ($s2, $again) = api(GET => 'rz/keys?key=alice');
is(rules_of($again)->{win}{remaining}, 2, 'looked up again: the same (nothing spent by looking)');
is($redis->cmd('DBSIZE'), $keys, 'and nothing written');

($status, $j) = api(GET => 'rz/keys?key=alice&rule=per_user');
is_deeply([ map { $_->{rule} } @{ $j->{rules} } ], ['per_user'], 'rule=: that rule only');
($status, $j) = api(GET => 'rz/keys?key=alice&rule=nope');
is($status, 404, 'an unknown rule: 404');
like($j->{error} // '', qr/zone "rz" has no rule "nope"/, 'an unknown rule: a JSON error');
($status, $j) = api(GET => 'rz/keys?fingerprint=0123456789abcdef&rule=per_user');
is($status, 400, 'a fingerprint on a Redis zone: 400');
like($j->{error} // '', qr/zone "rz" is decided in Redis, where a key's state is named by a SHA-256 of the key, .*give key=/,
     'a fingerprint on a Redis zone: says to give the key');

# ---- reset in Redis ----

($status, $j) = api(DELETE => 'rz/keys?key=alice');
is($status, 200, 'reset: 200');
$by = rules_of($j);
is_deeply({ map { $_ => [ @{ $by->{$_} }{qw(held forgiven)} ] } keys %$by },
          { per_user => [ JSON::PP::true, JSON::PP::false ], win => [ JSON::PP::true, JSON::PP::false ],
            costly => [ JSON::PP::false, JSON::PP::false ] }, 'reset: which rules held a state');
is($redis->cmd('DBSIZE'), 0, 'reset: its keys deleted from Redis');
my $r = $t->get_as('/a/index.html', user => 'alice');
is($r->{status}, 200, 'reset: alice admitted');
is($r->{headers}{'x-ratelimit-remaining'}, 2, 'reset: with a full budget (3, this one spent)');
is(rules_of((api(GET => 'rz/keys?key=alice&rule=per_user'))[1])->{per_user}{remaining}, 2, 'reset: the API agrees');
like($t->error_log, qr/\[notice\] .*ratelimit: key "alice" reset in rule "per_user" of zone "rz" by the key API \(it was held\), client 127\.0\.0\.1/,
     'reset: logged at notice, the key as its rule logs it');
like($t->error_log, qr/ratelimit: key fingerprint [0-9a-f]{16} reset in rule "costly" of zone "rz" by the key API \(it had no state\)/,
     'reset: each rule\'s line');
($status, $j) = api(DELETE => 'rz/keys?key=nobody');
ok(!grep({ $_->{held} } @{ $j->{rules} }), 'reset of a key with no state: nothing held');

# ---- a cost ----

is(join(' ', map { $t->get_as('/c/index.html', user => 'bob')->{status} } 1 .. 2), '200 200', 'costly: two requests of 4');
($status, $j) = api(GET => 'rz/keys?key=bob&rule=costly');
is_deeply([ @{ $j->{rules}[0] }{qw(remaining refused)} ], [ 2, JSON::PP::true ], 'costly: 2 left, the next (4) refused');
cmp_ok($j->{rules}[0]{retry_after_ms}, '>', 0, 'costly: and when it would pass');

# ---- a zone of more rules than one call takes ----

($status, $j) = api(GET => 'many/keys?key=zed');
$by = rules_of($j);
is(scalar(keys %$by), 20, 'twenty rules: twenty states');
is(scalar(grep { $by->{"m$_"}{remaining} == $_ } 1 .. 20), 20, 'each with its own limit remaining');
$t->get_as('/m17/index.html', user => 'zed') for 1 .. 2;
$by = rules_of((api(GET => 'many/keys?key=zed'))[1]);
is_deeply([ @{ $by->{m17} }{qw(state remaining)} ], [ 'held', 15 ], 'the seventeenth rule (in the second call): spent');
is(scalar(grep { $by->{"m$_"}{state} eq 'none' } 1 .. 20), 19, 'the others: none');
($status, $j) = api(DELETE => 'many/keys?key=zed');
is_deeply([ map { $_->{rule} } grep { $_->{held} } @{ $j->{rules} } ], ['m17'], 'reset: the one that held a state');
is($t->get_as('/m1/index.html', user => 'zed')->{status}, 200, 'and the zone works on');

# ---- Redis down: 409, never a 5xx ----

for my $method (qw(GET DELETE)) {
    ($status, $j) = api($method => 'down/keys?key=alice');
    is($status, 409, "Redis not reachable, $method: 409");
    like($j->{error} // '', qr/^zone "down" is decided in Redis, which did not answer \(not reachable, too slow, or an answer refused: see the error log\): its keys cannot be (read|reset) now, try again$/,
         "Redis not reachable, $method: a JSON error saying so");
}
$redis->stop();
for my $method (qw(GET DELETE)) {
    my $start = time;
    ($status, $j) = api($method => 'rz/keys?key=alice');
    is($status, 409, "Redis stopped, $method: 409");
    cmp_ok(time - $start, '<', 5 + 1, "Redis stopped, $method: answered within redis_timeout");
}
$redis->start();
ok(RLTest::wait_until(sub { (api(GET => 'rz/keys?key=alice'))[0] == 200 }, 15), 'Redis back: answered again');

# ---- the top keys: this server's ----

($status, $j) = api(GET => 'rz/top');
is($j->{scope}, 'server', 'top keys of a Redis zone: this server\'s refusals');
is($j->{rules}{per_user}{refusals}, 1, 'top keys: the refusal counted here');

$t->stop();
done_testing();
