#!/usr/bin/perl
# Each algorithm through real nginx: the exact request first denied, its
# status, Retry-After and headers, and the remaining sequence before it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use POSIX qw(ceil);
use Time::HiRes qw(time);
use RLTest;

my $t = RLTest->new->start(<<'EOF');
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location /gcra/ {
        ratelimit zone=z limit=3 period=1m log_key=on;
        alias %%PREFIX%%/html/;
    }
    location /gcra-burst/ {
        ratelimit zone=z limit=10 period=1s burst=4;
        alias %%PREFIX%%/html/;
    }
    location /token/ {
        ratelimit zone=z algorithm=token_bucket limit=2 period=10s burst=4;
        alias %%PREFIX%%/html/;
    }
    location /window/ {
        ratelimit zone=z algorithm=fixed_window limit=3 period=1h;
        alias %%PREFIX%%/html/;
    }
    location /first/ {
        ratelimit zone=z algorithm=fixed_window limit=2 period=1h align=first;
        alias %%PREFIX%%/html/;
    }
}
EOF

sub headers_of {
    my ($r) = @_;
    return join ' ', map { $r->{headers}{$_} // '-' }
        qw(x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset retry-after);
}

# gcra, limit=3 period=1m: 3 at once (one each 20 s), the 4th waits 20 s.
{
    my @r = $t->gets('/gcra/index.html', 5);
    is_deeply([ map { $_->{status} } @r ], [ 200, 200, 200, 429, 429 ], 'gcra: first denied is the 4th');
    is(headers_of($r[0]), '3 2 20 -', 'gcra: 1st');
    is(headers_of($r[1]), '3 1 40 -', 'gcra: 2nd');
    is(headers_of($r[2]), '3 0 60 -', 'gcra: 3rd');
    is(headers_of($r[3]), '3 0 60 20', 'gcra: 4th denied, Retry-After 20');
    is(headers_of($r[4]), '3 0 60 20', 'gcra: a denial consumes nothing');
    is($r[0]{content}, "ok\n", 'gcra: the file is served');
}

# gcra with burst 4 at 10/s: 4 at once, then one each 100 ms.  The five
# requests must come within 100 ms and the last two within 50 ms of each
# other: a machine that stalls longer is given the burst back (400 ms) and
# the block again.
{
    my (@r, $r, $next);
    for my $try (1 .. 5) {
        select(undef, undef, undef, 0.5) if $try > 1;
        my $start = time;
        @r = $t->gets('/gcra-burst/index.html', 5);
        my $five = time - $start;
        select(undef, undef, undef, 0.15 - (time - $start)) if time - $start < 0.15;
        my $then = time;
        $r = $t->get('/gcra-burst/index.html');
        $next = $t->get('/gcra-burst/index.html');
        my $two = time - $then;
        last if $five < 0.09 && $two < 0.04;
        Test::More::diag(sprintf('five requests in %.3f s, two in %.3f s: again', $five, $two));
    }
    is_deeply([ map { $_->{status} } @r ], [ 200, 200, 200, 200, 429 ], 'gcra burst: 4 at once');
    is(headers_of($r[3]), '10 0 1 -', 'gcra burst: reset 400 ms rounds up to 1 s');
    is(headers_of($r[4]), '10 0 1 1', 'gcra burst: Retry-After at least 1');
    # 100 ms after the first request one more unit has refilled
    is($r->{status}, 200, 'gcra burst: admitted after T = 100 ms');
    is($next->{status}, 429, 'gcra burst: and only one');
}

# token_bucket limit=2 period=10s burst=4: 4 tokens, one back each 5 s.
{
    my @r = $t->gets('/token/index.html', 5);
    is_deeply([ map { $_->{status} } @r ], [ 200, 200, 200, 200, 429 ], 'token bucket: 4 tokens');
    is(headers_of($r[0]), '2 3 5 -', 'token bucket: 1st');
    is(headers_of($r[3]), '2 0 20 -', 'token bucket: empty, full again in 20 s');
    is(headers_of($r[4]), '2 0 20 5', 'token bucket: next token in 5 s');
}

# fixed_window limit=3 period=1h (epoch): denied until the top of the hour.
{
    my $before = time;
    my @r = $t->gets('/window/index.html', 4);
    my $after = time;
    is_deeply([ map { $_->{status} } @r ], [ 200, 200, 200, 429 ], 'fixed window: 3 per window');
    my $end = (int($before / 3600) + 1) * 3600;
    my ($lo, $hi) = (ceil($end - $after), ceil($end - $before));
    my $retry = $r[3]{headers}{'retry-after'};
    ok($retry >= $lo && $retry <= $hi, "fixed window: Retry-After $retry is the time to the hour ($lo..$hi)");
    is($r[3]{headers}{'x-ratelimit-reset'}, $retry, 'fixed window: reset is the window end too');
    is_deeply([ map { $_->{headers}{'x-ratelimit-remaining'} } @r ], [ 2, 1, 0, 0 ], 'fixed window: remaining');
}

# fixed_window align=first: the window starts at the first request.
{
    my @r = $t->gets('/first/index.html', 3);
    is_deeply([ map { $_->{status} } @r ], [ 200, 200, 429 ], 'align=first: 2 per window');
    is(headers_of($r[0]), '2 1 3600 -', 'align=first: the window is a full hour from now');
    is(headers_of($r[2]), '2 0 3600 3600', 'align=first: Retry-After is the whole hour');
}

like($t->error_log, qr/ratelimit: rejected by rule "gcra_3_1m" in zone "z", key "\\x7f\\x00\\x00\\x01", cost 1, retry after \d+ ms/,
     'log_key=on: rejections are logged with rule, zone and escaped key');
like($t->error_log, qr/ratelimit: rejected by rule "gcra_10_1s_b4" in zone "z", key fingerprint [0-9a-f]{16}, cost 1, retry after \d+ ms/,
     'by default a rejection names the key by its fingerprint');

$t->stop();
done_testing();
