#!/usr/bin/perl
# Parity with nginx's limit_req and the IETF RateLimit headers, through
# real nginx:
#   - leaky_bucket delay= against limit_req's burst= delay= (and nodelay, and
#     plain burst) in the same nginx: the same requests served at once,
#     delayed and rejected, starting with the scenario of nginx's own
#     limit_req_delay.t;
#   - every rate-limit header parsed with a strict Structured Field parser
#     (t/lib/RLStructured.pm), for every algorithm and cost: RateLimit's t is
#     when units come back, a 429's Retry-After is never earlier, the
#     policy's q bounds r;
#   - Retry-After only on a final 429 or 503.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest;
use RLStructured;

# ---- the parser itself: what RFC 9651 refuses, it refuses ---------------------

is_deeply(RLStructured::parse_list('"a";q=5;w=60, b;c=?1, (1 2);d=:AQ==:, 1.5, "x\\"y"'),
          [ { value => [ string => 'a' ], params => [ [ q => [ integer => 5 ] ], [ w => [ integer => 60 ] ] ] },
            { value => [ token => 'b' ], params => [ [ c => [ boolean => 1 ] ] ] },
            { inner => [ { value => [ integer => 1 ], params => [] }, { value => [ integer => 2 ], params => [] } ],
              params => [ [ d => [ bytes => 'AQ==' ] ] ] },
            { value => [ decimal => 1.5 ], params => [] },
            { value => [ string => 'x"y' ], params => [] } ],
          'parser: a list of every kind of member');
for my $bad ('"a";q=5,', '"a";Q=5', '"a";q=1.', '"a";q=1234567890123456', '"a" "b"', '"a\\x"', '"a";q=5;;w=1',
             '"a";q=5 ;w=1', ',"a"', 'a;q=1.2345', '"a', '?2') {
    ok(!eval { RLStructured::parse_list($bad); 1 }, "parser refuses '$bad'");
}
ok(!eval { RLStructured::ratelimit_fields({ 'ratelimit' => 'a;r=1;t=2' }); 1 }, 'a policy name must be a String');
ok(!eval { RLStructured::ratelimit_fields({ 'ratelimit' => '"a";r=1;t=2.0' }); 1 }, 't must be an Integer');
ok(!eval { RLStructured::ratelimit_fields({ 'ratelimit-policy' => '"a";q=5;w=0' }); 1 }, 'w must be positive');
ok(!eval { RLStructured::ratelimit_fields({ 'ratelimit' => '"a";t=2' }); 1 }, 'r is required');

# ---- nginx -------------------------------------------------------------------

my $t = RLTest->new();
$t->put_file('html/sorry.html', "slow down\n");

# limit_req and its ratelimit equivalent for each trace, at 12 requests a
# minute (one each 5 s: the decisions of requests sent together cannot
# change unless the machine stalls for seconds)
my @traces = (
    # name, limit_req's parameters, ratelimit's, [served, delayed, rejected] of 7
    [ 'delay',   'burst=2 delay=1', 'delay=1 max_delay=5s',  [ 2, 1, 4 ] ],    # limit_req_delay.t's
    [ 'two',     'burst=4 delay=2', 'delay=2 max_delay=10s', [ 3, 2, 2 ] ],
    [ 'nodelay', 'burst=3 nodelay', 'delay=3 max_delay=0',   [ 4, 0, 3 ] ],
    [ 'plain',   'burst=2',         'max_delay=10s',         [ 1, 2, 4 ] ],
    [ 'none',    '',                'max_delay=0',           [ 1, 0, 6 ] ],
);
my $conf = "ratelimit_zone z 1m;\nlimit_req_status 429;\n";
my $locations = '';
for my $tr (@traces) {
    my ($name, $lr, $rl) = @$tr;
    $conf .= "limit_req_zone \$binary_remote_addr zone=$name:1m rate=12r/m;\n";
    $locations .= <<"EOF";
    location /lr/$name/ {
        limit_req zone=$name $lr;
        add_header X-Status \$limit_req_status always;
        alias %%PREFIX%%/html/;
    }
    location /rl/$name/ {
        ratelimit zone=z algorithm=leaky_bucket limit=12 period=1m $rl name=rl_$name;
        add_header X-Status \$ratelimit_status always;
        alias %%PREFIX%%/html/;
    }
EOF
}

$t->start(<<"EOF");
$conf
server {
    listen 127.0.0.1:%%PORT%%;
    ratelimit_headers both;
$locations
    # the policies of the draft's examples, and one location an algorithm
    location /h/gcra/ { ratelimit zone=z limit=2 period=1m name=gcra; alias %%PREFIX%%/html/; }
    location /h/cost/ { ratelimit zone=z limit=5 period=1m cost=4 name=cost; alias %%PREFIX%%/html/; }
    location /h/burst/ { ratelimit zone=z limit=5 period=1m burst=9 name=burst; alias %%PREFIX%%/html/; }
    location /h/token/ {
        ratelimit zone=z algorithm=token_bucket limit=12 period=1m burst=4 name=token;
        alias %%PREFIX%%/html/;
    }
    location /h/fixed/ {
        ratelimit zone=z algorithm=fixed_window limit=3 period=1h align=first name=fixed;
        alias %%PREFIX%%/html/;
    }
    location /h/sliding/ {
        ratelimit zone=z algorithm=sliding_window limit=3 period=1h buckets=4 name=sliding;
        alias %%PREFIX%%/html/;
    }
    location /h/log/ { ratelimit zone=z algorithm=sliding_log limit=3 period=1h name=log; alias %%PREFIX%%/html/; }
    location /h/quota/ { ratelimit zone=z algorithm=quota limit=3 reset=daily name=quota; alias %%PREFIX%%/html/; }
    location /h/leaky/ {
        ratelimit zone=z algorithm=leaky_bucket limit=2 period=1h delay=2 max_delay=0 name=leaky;
        alias %%PREFIX%%/html/;
    }
    location /h/weighted/ {
        ratelimit zone=z limit=10 period=1h burst=4 cost=\$http_x_cost zero_cost=on name=weighted;
        alias %%PREFIX%%/html/;
    }

    # Retry-After goes with a final 429 or 503 only
    location /sorry200/ {
        ratelimit zone=z limit=1 period=1m name=sorry200;
        error_page 429 =200 /sorry.html;
        alias %%PREFIX%%/html/;
    }
    location /sorry503/ {
        ratelimit zone=z limit=1 period=1m name=sorry503;
        error_page 429 =503 /sorry.html;
        alias %%PREFIX%%/html/;
    }
    location /forbidden/ {
        ratelimit zone=z limit=1 period=1m name=forbidden;
        ratelimit_status 403;
        alias %%PREFIX%%/html/;
    }
    location = /sorry.html { }
}
EOF

# ---- limit_req and leaky_bucket, side by side -----------------------------------

# 7 requests to $path one after another, each on its own connection, without
# waiting for a delayed one: its answer is awaited up to 0.3 s, then the next
# is sent.  Returns each request's "status X-Status".
sub trace {
    my ($path) = @_;
    return map { ($_->{status} || '-') . ' ' . ($_->{headers}{'x-status'} // '-') }
        $t->at_once({ wait => 0.3 }, ([$path]) x 7);
}

{
    # every trace at once, each pair in its own process
    my @sides = map { my $tr = $_; map { [ $tr->[0], $_ ] } 'lr', 'rl' } @traces;
    my @results = RLTest::parallel(map {
        my ($name, $side) = @$_;
        sub {
            my $start = time;
            my @r = trace("/$side/$name/index.html");
            return { took => time - $start, got => \@r };
        };
    } @sides);
    my %got;
    for my $i (0 .. $#sides) {
        my ($name, $side) = @{ $sides[$i] };
        $got{$name}{$side} = $results[$i]{got};
        $got{$name}{"${side}_took"} = $results[$i]{took};
    }
    for my $tr (@traces) {
        my ($name, $lr, $rl, $expect) = @$tr;
        my %count;
        for my $side ('lr', 'rl') {
            $count{$side}{$_}++ for @{ $got{$name}{$side} };
        }
        my $want = { '200 PASSED' => $expect->[0], '200 DELAYED' => $expect->[1], '429 REJECTED' => $expect->[2] };
        delete $want->{$_} for grep { !$want->{$_} } keys %$want;
        is_deeply($count{lr}, $want, "limit_req $lr: served, delayed, rejected as documented")
            or diag(join ', ', @{ $got{$name}{lr} });
        is_deeply($count{rl}, $count{lr}, "leaky_bucket $rl: the same as limit_req $lr")
            or diag(join ', ', @{ $got{$name}{rl} });
        if ($expect->[1]) {
            # the last delayed request waits its slot: at least (delayed) x 5 s
            # from the first request, less the 0.3 s waits before it
            my $least = 5 * $expect->[1] - 0.3 * 7;
            cmp_ok($got{$name}{rl_took}, '>=', $least, "leaky_bucket $rl: delayed to the slot");
        }
    }
}

# ---- headers as the draft means them --------------------------------------------

my %last;    # per location, the last parsed fields

# One request; its rate-limit headers parsed and checked against each other.
sub fields {
    my ($path, $headers) = @_;
    my $r = $t->get($path, $headers);
    my $f = eval { RLStructured::ratelimit_fields($r->{headers}) };
    ok($f, "$path: every rate-limit header parses") or diag($@);
    $f //= {};
    $f->{status} = $r->{status};
    $f->{remaining} = $r->{headers}{'x-ratelimit-remaining'};
    $f->{reset} = $r->{headers}{'x-ratelimit-reset'};
    if ($f->{policy} && $f->{limit}) {
        my ($p, $l) = ($f->{policy}, $f->{limit});
        ok($p->{name} eq $l->{name} && $l->{r} <= $p->{q} && $l->{r} == $f->{remaining} && $l->{t} <= $f->{reset},
           "$path: one policy, r <= q, r is X-RateLimit-Remaining, t <= X-RateLimit-Reset")
            or diag("policy $p->{name} q=$p->{q} w=$p->{w}, $l->{name} r=$l->{r} t=$l->{t}, "
                    . "legacy remaining $f->{remaining} reset $f->{reset}");
    }
    if ($r->{status} == 429 || $r->{status} == 503) {
        ok(defined $f->{retry_after} && $f->{retry_after} >= 1 && $f->{retry_after} >= $f->{limit}{t},
           "$path: a $r->{status}'s Retry-After is never before t")
            or diag('Retry-After ' . ($f->{retry_after} // '-') . ' t ' . $f->{limit}{t});
    } else {
        ok(!defined $f->{retry_after}, "$path: no Retry-After on a $r->{status}");
    }
    return $f;
}

sub ietf {
    my ($f) = @_;
    return join ' ', $f->{status}, "r=$f->{limit}{r}", "t=$f->{limit}{t}", 'ra=' . ($f->{retry_after} // '-');
}

# gcra limit=2 period=1m: t is when the next unit is back (30 s), not the
# full budget (60 s); the third request's Retry-After and t agree
{
    my @f = map { fields('/h/gcra/index.html') } 1 .. 3;
    is($f[0]{policy}{q} . ' ' . $f[0]{policy}{w}, '2 60', 'gcra: q=2 w=60');
    is(join(', ', map { ietf($_) } @f), '200 r=1 t=30 ra=-, 200 r=0 t=30 ra=-, 429 r=0 t=30 ra=30',
       'gcra: t=30 each time, Retry-After 30');
    is(join(' ', map { $_->{reset} } @f), '30 60 60', 'gcra: X-RateLimit-Reset counts to the full budget');
}

# cost=4 of limit=5 a minute: one unit back in 12 s; the next cost of 4 in 36 s
{
    my @f = map { fields('/h/cost/index.html') } 1 .. 2;
    is(join(', ', map { ietf($_) } @f), '200 r=1 t=12 ra=-, 429 r=1 t=36 ra=36', 'cost=4: t 12, then 36 = Retry-After');
    is($f[0]{reset}, 48, 'cost=4: full budget in 48 s');
}

# burst above limit: the policy is the burst over the time it takes to refill
{
    my $f = fields('/h/burst/index.html');
    is("$f->{policy}{q} $f->{policy}{w} $f->{limit}{r} $f->{limit}{t}", '9 108 8 12',
       'burst=9: q=9 w=108 (9 x 12 s), r=8, t=12');
}

# token_bucket limit=12 period=1m burst=4: a token each 5 s
{
    my @f = map { fields('/h/token/index.html') } 1 .. 5;
    is("$f[0]{policy}{q} $f[0]{policy}{w}", '4 20', 'token_bucket: q=4 w=20');
    is(ietf($f[4]), '429 r=0 t=5 ra=5', 'token_bucket: the 5th is told 5 s, and t=5 (not 20)');
    is($f[3]{reset}, 20, 'token_bucket: full in 20 s');
}

# the windows: all three come back together (fixed), or one by one
{
    my @f = map { fields('/h/fixed/index.html') } 1 .. 4;
    is(ietf($f[3]), '429 r=0 t=3600 ra=3600', 'fixed_window align=first: t is the window end, as Retry-After');
    is($f[0]{limit}{t}, 3600, 'fixed_window: t of an admission is the window end');
    is("$f[0]{policy}{q} $f[0]{policy}{w}", '3 3600', 'fixed_window: q=limit w=period');

    @f = map { fields('/h/log/index.html') } 1 .. 4;
    is(ietf($f[3]), '429 r=0 t=3600 ra=3600', 'sliding_log: t when the oldest leaves, as Retry-After');

    @f = map { fields('/h/sliding/index.html') } 1 .. 4;
    is($f[3]{status}, 429, 'sliding_window: the 4th is denied');
    is($f[3]{limit}{t}, $f[3]{retry_after}, 'sliding_window: t is Retry-After');
    cmp_ok($f[3]{limit}{t}, '<=', $f[3]{reset}, 'sliding_window: ... no later than the full budget');

    @f = map { fields('/h/quota/index.html') } 1 .. 4;
    is($f[3]{limit}{t}, $f[3]{retry_after}, 'quota: t is Retry-After, midnight');
    is($f[0]{policy}{w}, 86400, 'quota: w is the day');
}

# leaky_bucket delay=2 max_delay=0, 2 an hour: three at once, then one each 30 min
{
    my @f = map { fields('/h/leaky/index.html') } 1 .. 4;
    is("$f[0]{policy}{q} $f[0]{policy}{w}", '3 5400', 'leaky_bucket delay=2: q=3 over 3 intervals');
    is(join(', ', map { ietf($_) } @f),
       '200 r=2 t=1800 ra=-, 200 r=1 t=1800 ra=-, 200 r=0 t=1800 ra=-, 429 r=0 t=1800 ra=1800',
       'leaky_bucket delay=2: three served at once, t one interval');
}

# every cost of a bucket of 4 (10 an hour: one each 6 min)
{
    my @f = map { fields('/h/weighted/index.html', { 'X-Cost' => $_ }) } 2, 0, 1, 2, 5;
    is(join(', ', map { ietf($_) } @f),
       '200 r=2 t=360 ra=-, 200 r=2 t=360 ra=-, 200 r=1 t=360 ra=-, 429 r=1 t=360 ra=360, 429 r=1 t=1080 ra=1080',
       'costs 2, 0, 1, then 2 and 5 (past the burst) denied: t and Retry-After agree');
}

# ---- Retry-After with 429 and 503 only ----------------------------------------

{
    fields('/sorry200/index.html');
    my $f = fields('/sorry200/index.html');
    is($f->{status}, 200, 'error_page 429 =200: a 200');
    is($f->{limit}{t}, 60, 'error_page 429 =200: the rate-limit headers stay, t=60');

    fields('/sorry503/index.html');
    $f = fields('/sorry503/index.html');
    is($f->{status}, 503, 'error_page 429 =503: a 503');
    is($f->{retry_after}, 60, 'error_page 429 =503: with Retry-After');

    fields('/forbidden/index.html');
    $f = fields('/forbidden/index.html');
    is($f->{status}, 403, 'ratelimit_status 403');
    is($f->{limit}{r}, 0, 'ratelimit_status 403: the rate-limit headers, without Retry-After');
}

$t->stop();
done_testing();
