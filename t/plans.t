#!/usr/bin/perl
# Per-plan limits: limit=$var and burst=$var, evaluated per request, in a
# local zone and (where redis-server is installed) a Redis-backed one.  The
# headers show the limit that applied; a key keeps the units it spent when
# its plan changes, up or down; a value that is not a valid limit is never
# unlimited (limit_default applies) and is logged at warn, folded.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time);
use RLTest;

my @kinds = ('local');
my $redis;
if (-x ($ENV{RL_REDIS_SERVER} // '/usr/bin/redis-server')) {
    require RLRedis;
    $redis = RLRedis->new->start;
    push @kinds, 'redis';
} else {
    diag('redis-server is not installed: the Redis-backed zone is not tested');
}

my @algorithms = qw(gcra token_bucket fixed_window sliding_window sliding_log quota);
my %extra = (quota => 'reset=daily', sliding_window => 'buckets=6');

my $locations = '';
for my $k (@kinds) {
    for my $a (@algorithms) {
        my $period = $a eq 'quota' ? '' : 'period=1h';
        $locations .= "    location /$k/$a/ { ratelimit zone=$k key=\$http_x_user algorithm=$a "
                    . "limit=\$plan_limit limit_default=2 limit_max=1000 $period "
                    . ($extra{$a} // '') . " name=${k}_$a; alias %%PREFIX%%/html/; }\n";
    }
    $locations .= "    location /$k/burst/ { ratelimit zone=$k key=\$http_x_user limit=\$plan_limit "
                . "burst=\$plan_burst limit_default=2 limit_max=1000 period=1h name=${k}_burst; "
                . "alias %%PREFIX%%/html/; }\n";
}
my $redis_zone = $redis ? 'ratelimit_zone redis 1m redis=127.0.0.1:' . $redis->port . ' redis_timeout=5s;' : '';

my $t = RLTest->new->start(<<"EOF");
ratelimit_zone local 1m;
$redis_zone
ratelimit_headers both;

# the plan of a request: free or pro; any other X-Plan goes through as it is,
# to try bad values
map \$http_x_plan \$plan_limit {
    free     3;
    pro      10;
    default  \$http_x_plan;
}
map \$http_x_plan \$plan_burst {
    free     3;
    pro      20;
    default  \$http_x_burst;
}

server {
    listen 127.0.0.1:%%PORT%%;
$locations
    location /escape/ {
        ratelimit zone=local key=\$http_x_user limit=\$http_x_plan limit_default=5 period=1h name=escape;
        alias %%PREFIX%%/html/;
    }
    location /flood/ {
        ratelimit zone=local key=\$http_x_user limit=\$arg_plan limit_default=1000 limit_max=1000
                  period=1h name=flood;
        alias %%PREFIX%%/html/;
    }
}
EOF

sub as_plan {
    my ($user, $plan) = @_;
    return { 'X-User' => $user, (defined $plan ? ('X-Plan' => $plan) : ()) };
}

sub req {
    my ($path, $user, $plan) = @_;
    return $t->get($path, as_plan($user, $plan));
}

# n requests: their statuses and the last response
sub spend {
    my ($path, $user, $plan, $n) = @_;
    my @r = $t->gets($path, $n, as_plan($user, $plan));
    return (RLTest::statuses_of(@r), $r[-1]);
}

for my $k (@kinds) {
    for my $a (@algorithms) {
        my $p = "/$k/$a/index.html";
        my $name = "${k}_$a";

        # each plan its limit, in every header
        my ($s, $r) = spend($p, "free-$a", 'free', 3);
        is($s, '200 200 200', "$name: free: 3 admitted");
        is($r->{headers}{'x-ratelimit-limit'}, 3, "$name: free: X-RateLimit-Limit 3");
        is($r->{headers}{'x-ratelimit-remaining'}, 0, "$name: free: none remaining");
        like($r->{headers}{'ratelimit-policy'}, qr/^"$name";q=3;w=\d+$/, "$name: free: RateLimit-Policy q=3");
        $r = req($p, "free-$a", 'free');
        is($r->{status}, 429, "$name: free: the 4th is rejected");

        ($s, $r) = spend($p, "pro-$a", 'pro', 10);
        is($s, join(' ', ('200') x 10), "$name: pro: 10 admitted");
        is($r->{headers}{'x-ratelimit-limit'}, 10, "$name: pro: X-RateLimit-Limit 10");
        like($r->{headers}{'ratelimit-policy'}, qr/^"$name";q=10;w=\d+$/, "$name: pro: RateLimit-Policy q=10");
        is(req($p, "pro-$a", 'pro')->{status}, 429, "$name: pro: the 11th is rejected");

        # a key keeps what it spent: 3 on free, then 7 more on pro, not 10
        spend($p, "up-$a", 'free', 3);
        $r = req($p, "up-$a", 'pro');
        is("$r->{status} $r->{headers}{'x-ratelimit-remaining'}", '200 6',
           "$name: upgraded from free after 3: 6 remaining after one more");
        ($s) = spend($p, "up-$a", 'pro', 7);
        is($s, join(' ', ('200') x 6, '429'), "$name: upgraded: 10 in all, then rejected");

        # and down: 5 spent on pro are more than free allows
        spend($p, "down-$a", 'pro', 5);
        $r = req($p, "down-$a", 'free');
        is("$r->{status} $r->{headers}{'x-ratelimit-limit'} $r->{headers}{'x-ratelimit-remaining'}",
           '429 3 0', "$name: downgraded after 5: rejected under free's 3");

        # a value that is not a valid limit: limit_default=2, never unlimited
        for my $bad ('abc', '0', '', '1001', '-5', '99999999999999999999', '3.5', '2e3') {
            ($s, $r) = spend($p, "bad-$a-$bad", $bad, 3);
            is($s, '200 200 429', "$name: limit \"$bad\": limit_default=2 applies");
            is($r->{headers}{'x-ratelimit-limit'}, 2, "$name: limit \"$bad\": X-RateLimit-Limit 2");
        }
        ($s) = spend($p, "nohdr-$a", undef, 3);
        is($s, '200 200 429', "$name: no plan at all: limit_default=2 applies");
    }

    # burst=$var: pro may burst to 20 at a limit of 10 an hour
    my $p = "/$k/burst/index.html";
    my ($s, $r) = spend($p, 'b-pro', 'pro', 20);
    is($s, join(' ', ('200') x 20), "${k}_burst: pro: a burst of 20");
    is($r->{headers}{'x-ratelimit-limit'}, 10, "${k}_burst: pro: X-RateLimit-Limit is the limit, 10");
    is(req($p, 'b-pro', 'pro')->{status}, 429, "${k}_burst: pro: the 21st is rejected");
    ($s) = spend($p, 'b-free', 'free', 4);
    is($s, '200 200 200 429', "${k}_burst: free: a burst of 3");
    ($s) = spend($p, 'b-bad', 'other', 3);
    is($s, '200 200 429', "${k}_burst: bad limit and no burst: the defaults, 2 and 2");
    my $t0 = time;
    $r = ($t->gets($p, 5, { 'X-User' => 'b-badburst', 'X-Plan' => '5', 'X-Burst' => 'lots' }))[-1];
    is($r->{status}, 200, "${k}_burst: a bad burst falls back to the limit applied: 5 admitted");
    $r = $t->get($p, { 'X-User' => 'b-badburst', 'X-Plan' => '5', 'X-Burst' => 'lots' });
    is($r->{status}, 429, "${k}_burst: ... and the 6th rejected");
    my $elapsed = time - $t0;
    my $ra = $r->{headers}{'retry-after'};
    ok($ra <= 720 && $ra >= 720 - $elapsed - 1, "${k}_burst: Retry-After is one unit at 5 an hour ($ra s)");
}

# the bad values are logged at warn, quoted and cut, naming what applied
my $log = $t->error_log;
like($log, qr/\[warn\].*ratelimit: rule "local_gcra" in zone "local": limit "abc" is not an integer from 1 to 1000: limit_default=2 applies/,
     'a bad limit is logged at warn with what applies');
like($log, qr/rule "local_burst" in zone "local": limit "other" is not an integer from 1 to 1000: limit_default=2 applies; burst "" is not an integer from 1 to 1000: the limit applies/,
     'a bad limit and burst in one line');
$t->get('/escape/index.html', { 'X-User' => 'q', 'X-Plan' => 'a"b' . ('x' x 100) });
like($t->error_log, qr/rule "escape" in zone "local": limit "a\\x22bx{29}\.\.\." is not/, 'the value is escaped and cut to 32 bytes');

# a flood of bad values: a line a second, the rest counted, none lost
{
    my $t0 = time;
    my %status = $t->pipelined('/flood/index.html?plan=junk', 'X-User', map { "flood-$_" } 1 .. 600);
    my $elapsed = time - $t0;
    is($status{200}, 600, 'flood: every request decided under limit_default');
    my ($lines, $folded) = $t->wait_folded(qr/rule "flood" in zone "local": limit "junk" is not an integer/,
                                           qr/(\d+) more requests with a bad value \(see above\) by rule "flood"/, 600);
    is($lines + $folded, 600, "flood: lines ($lines) and folded ($folded) count every bad value");
    ok($lines <= $elapsed + 2, "flood: at most a line a second ($lines lines in " . sprintf('%.1f', $elapsed) . ' s)');
}

$t->stop();
$redis->stop if $redis;
done_testing();
