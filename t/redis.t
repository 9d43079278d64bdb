#!/usr/bin/perl
# Fleet-wide limits: three nginx servers (two workers each) share one Redis.
# A limit of 100 per hour holds across all of them, exactly, under
# concurrent clients spread over the three; two stacked rules consume
# together or not at all.  Every algorithm answers through Redis exactly as
# through a local zone (every header, the IETF ones parsed as Structured
# Fields).  Redis holds hashed key names with a TTL only.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes ();
use RLTest;
use RLRedis;
use RLStructured;

my $redis = RLRedis->new->start;
my $rport = $redis->port;

my %rules = (
    gcra           => 'algorithm=gcra limit=3 period=1h',
    token_bucket   => 'algorithm=token_bucket limit=3 period=1h burst=2',
    fixed_window   => 'algorithm=fixed_window limit=3 period=1h align=first',
    sliding_window => 'algorithm=sliding_window limit=3 period=1h buckets=6',
    sliding_log    => 'algorithm=sliding_log limit=3 period=1h',
    leaky_bucket   => 'algorithm=leaky_bucket limit=2 period=1h max_delay=0',
    leaky_delay    => 'algorithm=leaky_bucket limit=2 period=1h delay=1 max_delay=0',
    quota          => 'algorithm=quota limit=3 reset=daily',
);
my $locations = join '', map {
    "    location /r/$_/ { ratelimit zone=fleet key=\$http_x_key $rules{$_} name=r_$_; alias %%PREFIX%%/html/; }\n"
  . "    location /l/$_/ { ratelimit zone=solo key=\$http_x_key $rules{$_} name=l_$_; alias %%PREFIX%%/html/; }\n"
} sort keys %rules;
# stacks on one key: the states one MGET reads (heads, a ring, a ban), and
# a ring (a log) two rules of one name share: both decided on it as read,
# each request counted twice, the third's second count refused as it is
# committed
my %stacks = (
    three => [ 'limit=4 period=1h', 'algorithm=sliding_window limit=3 period=1h buckets=6 ban=1h',
               'algorithm=quota limit=5 reset=daily' ],
    twice => [ ('algorithm=sliding_window limit=5 period=1h buckets=6') x 2 ],
    twice_log => [ ('algorithm=sliding_log limit=5 period=1h') x 2 ],
);
for my $s (sort keys %stacks) {
    for my $z ([ r => 'fleet' ], [ l => 'solo' ]) {
        my $i = 0;
        $locations .= "    location /$z->[0]/$s/ {\n" . join('', map {
            $i++;
            my $name = $s =~ /^twice/ ? "$z->[0]_$s" : "$z->[0]_${s}_$i";
            "        ratelimit zone=$z->[1] key=\$http_x_key $_ name=$name;\n"
        } @{ $stacks{$s} }) . "        alias %%PREFIX%%/html/;\n    }\n";
    }
}

my @fleet = map { RLTest->new() } 1 .. 3;
for my $t (@fleet) {
    # a generous timeout: exactness is what is tested here, not the fallback
    $t->start(<<"EOF", workers => 2);
log_format rl '\$uri \$status \$ratelimit_status \$ratelimit_decided_by';
access_log %%PREFIX%%/rl.log rl;
ratelimit_zone fleet 1m redis=127.0.0.1:$rport redis_timeout=5s;
ratelimit_zone solo 1m;
server {
    listen 127.0.0.1:%%PORT%% reuseport;
    ratelimit_headers both;
    location /single/ {
        ratelimit zone=fleet key=\$http_x_key limit=100 period=1h;
        alias %%PREFIX%%/html/;
    }
    location /stacked/ {
        ratelimit zone=fleet key=\$http_x_key limit=100 period=1h name=first;
        ratelimit zone=fleet key=\$http_x_key limit=1000 period=1h name=second;
        alias %%PREFIX%%/html/;
    }
    location /second/ {
        ratelimit zone=fleet key=\$http_x_key limit=1000 period=1h name=second;
        alias %%PREFIX%%/html/;
    }
$locations
    location /shape/ {
        ratelimit zone=fleet key=\$http_x_key algorithm=leaky_bucket limit=10 period=1s max_delay=1s;
        alias %%PREFIX%%/html/;
    }
    location = /stats {
        ratelimit_stats;
    }
}
EOF
}

# $total requests for one key over 48 keep-alive connections at once, the
# connections spread over the three servers
sub burst {
    my ($path, $key, $total) = @_;
    return RLTest::burst(ports => [ map { $_->port } @fleet ], path => $path, key => $key, total => $total,
                         conns => 48);
}

for my $round (1 .. 3) {
    my ($ok, $limited, $other) = burst('/single/index.html', "single-$round", 600);
    is($ok, 100, "round $round: exactly 100 of 600 admitted across 3 servers");
    is($limited, 500, "round $round: the other 500 are 429 with Retry-After");
    is($other, 0, "round $round: nothing else");
}

{
    my ($ok, $limited, $other) = burst('/stacked/index.html', 'stacked', 600);
    is($ok, 100, 'stacked: exactly 100 of 600 admitted');
    is($limited + $other, 500, 'stacked: the rest rejected');
    # the second rule spent exactly the admitted requests: 1000 - 100, then this one
    my $r = $fleet[1]->get('/second/index.html', { 'X-Key' => 'stacked' });
    is($r->{status}, 200, 'second rule alone admits');
    is($r->{headers}{'x-ratelimit-remaining'}, 899, 'second rule spent 100 + 1: no partial consumption');
}

# every algorithm: the same statuses and headers through Redis as locally
for my $alg (sort(keys %rules), sort(keys %stacks)) {
    my (@redis, @local);
    for my $i (1 .. 5) {
        my $t = $fleet[ $i % 3 ];
        push @redis, $t->get("/r/$alg/index.html", { 'X-Key' => "alg-$alg" });
        push @local, $fleet[0]->get("/l/$alg/index.html", { 'X-Key' => "alg-$alg" });
    }
    my $same = 1;
    for my $i (0 .. 4) {
        my ($r, $l) = ($redis[$i], $local[$i]);
        # (two rules of one name list their policy twice: the legacy headers only)
        my @f = $alg =~ /^twice/ ? ({ policy => {}, limit => {} }) x 2
              : map { eval { RLStructured::ratelimit_fields($_->{headers}) } || do { diag($@); {} } } $r, $l;
        $same = 0 unless $f[0]{policy} && $f[0]{limit} && $f[1]{policy} && $f[1]{limit};
        my @exact = map { my $f = $f[$_]; my $h = ($r, $l)[$_]{headers};
                          join ' ', ($r, $l)[$_]{status}, map { $_ // '-' } $h->{'x-ratelimit-limit'},
                          $h->{'x-ratelimit-remaining'}, $f->{policy}{q}, $f->{limit}{r} } 0, 1;
        # times are whole seconds and the two requests are milliseconds apart
        my $close = 1;
        for my $v ([ map { $_->{headers}{'retry-after'} } $r, $l ], [ map { $_->{headers}{'x-ratelimit-reset'} } $r, $l ],
                   [ map { $_->{limit}{t} } @f ], [ map { $_->{policy}{w} } @f ]) {
            my ($a, $b) = @$v;
            $close &&= (defined $a == defined $b) && (!defined $a || abs($a - $b) <= 1);
        }
        unless ($exact[0] eq $exact[1] && $close) {
            $same = 0;
            diag("$alg request " . ($i + 1) . ": redis $exact[0] retry " . ($r->{headers}{'retry-after'} // '-')
                 . ", local $exact[1] retry " . ($l->{headers}{'retry-after'} // '-'));
        }
    }
    ok($same, "$alg: statuses and headers through Redis equal the local zone's");
    my $first_denied = (grep { $redis[$_]{status} == 429 } 0 .. 4)[0];
    my $expected = $alg eq 'leaky_bucket' ? 1 : $alg =~ /^(token_bucket|leaky_delay)$/ ? 2 : 3;
    if ($alg eq 'three') {
        is($redis[4]{status}, 429, 'three: the 5th is refused by the ban the 4th started');
        cmp_ok($redis[4]{headers}{'retry-after'}, '>', 3500, 'three: ... for the ban\'s hour');
    }
    is($first_denied, $expected, "$alg: request " . ($expected + 1) . ' is the first denied');
}

# who decided: redis for the fleet zone, local for the other
my $log = $fleet[0]->file('rl.log');
like($log, qr{^/r/gcra/index.html 200 PASSED redis$}m, '$ratelimit_decided_by is redis for a Redis zone');
like($log, qr{^/l/gcra/index.html 200 PASSED local$}m, '$ratelimit_decided_by is local for a local zone');

# shaping through Redis: the delay is decided there and waited in nginx
{
    my @took;
    for my $i (1 .. 3) {
        my $start = Time::HiRes::time();
        my $r = $fleet[0]->get('/shape/index.html', { 'X-Key' => 'shape' });
        push @took, Time::HiRes::time() - $start;
        is($r->{status}, 200, "shaped request $i passes");
    }
    cmp_ok($took[0], '<', 0.08, 'the first is not delayed');
    cmp_ok($took[1], '>', 0.03, "the next ones wait for their slot ($took[1] s)");
    # a client that leaves while delayed: nothing breaks
    my $s = $fleet[0]->open_request('/shape/index.html', { 'X-Key' => 'shape' });
    Time::HiRes::sleep(0.02);
    close $s;
    Time::HiRes::sleep(0.3);
    my $log = $fleet[0]->file('rl.log');
    like($log, qr{^/shape/index.html 200 DELAYED redis$}m, 'a delayed request: DELAYED, decided in Redis');
}

# Redis holds names hashed with the rule, with a TTL; never key bytes
my $keys = $redis->cmd('KEYS', '*');
ok(@$keys > 0, scalar(@$keys) . ' keys in Redis');
is(scalar(grep { !/^ratelimit:[0-9a-f]{32}$/ } @$keys), 0, 'every key is the prefix and 32 hex digits');
is(scalar(grep { /single|stacked|alg-/ } @$keys), 0, 'no key bytes in key names');
my @ttl = map { $redis->cmd('PTTL', $_) } @$keys;
is(scalar(grep { $_ <= 0 } @ttl), 0, 'every key expires');

# the stats of each server: its own decisions (in Redis, or refused from a
# refusal Redis gave and the server remembers), no fallback
my $decisions = 0;
for my $t (@fleet) {
    my $r = $t->zone_stats('fleet')->{redis};
    $decisions += $r->{decisions} + $r->{cached};
    is($r->{fallbacks}, 0, 'no fallback on server ' . $t->port);
    is($r->{server}, "127.0.0.1:$rport", 'stats name the Redis server');
}
is($decisions, 4 * 600 + 1 + 5 * (keys(%rules) + keys(%stacks)) + 4, "the fleet decided every request from Redis's answers");
my $prom = $fleet[0]->get('/stats?format=prometheus')->{content};
like($prom, qr/^nginx_ratelimit_redis_decisions_total\{zone="fleet"\} \d+$/m, 'Prometheus: Redis decisions');
like($prom, qr/^nginx_ratelimit_redis_latency_seconds_bucket\{zone="fleet",le="\+Inf"\} \d+$/m,
     'Prometheus: latency histogram');

$_->stop() for @fleet;
done_testing();
