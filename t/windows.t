#!/usr/bin/perl
# sliding_window, sliding_log and quota through real nginx: the exact request
# first denied, its Retry-After and headers.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use POSIX qw(ceil floor);
use Time::HiRes qw(time sleep);
use Time::Local qw(timegm);
use RLTest;

my $t = RLTest->new->start(<<'EOF');
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location /window/ {
        ratelimit zone=z algorithm=sliding_window limit=3 period=10s;
        alias %%PREFIX%%/html/;
    }
    location /stacked/ {
        ratelimit zone=z limit=100 period=1s name=roomy;
        ratelimit zone=z algorithm=sliding_window limit=3 period=10s name=stacked_window;
        ratelimit zone=z algorithm=sliding_window limit=50 period=10s name=roomy_window;
        ratelimit_headers both;
        alias %%PREFIX%%/html/;
    }
    location /log/ {
        ratelimit zone=z algorithm=sliding_log limit=2 period=10s;
        alias %%PREFIX%%/html/;
    }
    location /daily/ {
        ratelimit zone=z algorithm=quota limit=2 reset=daily name=daily;
        ratelimit_headers both;
        alias %%PREFIX%%/html/;
    }
    location /monthly/ {
        ratelimit zone=z algorithm=quota limit=1 reset=monthly utc_offset=+05:30 name=monthly;
        ratelimit_headers both;
        alias %%PREFIX%%/html/;
    }
}
EOF

# Expected whole seconds from a deadline (in s) as seen between two clocks.
sub within {
    my ($got, $deadline, $before, $after, $what) = @_;
    my ($lo, $hi) = (ceil($deadline - $after - 0.0005), ceil($deadline - $before));
    ok($got >= $lo && $got <= $hi, "$what: $got in $lo..$hi");
}

# sliding_window limit=3 period=10s, 10 ticks of 1 s: the 3 units of tick k
# weigh fully until tick k+10, then fade; one more fits once 3 * (1 - e) <= 2,
# a third of a tick (333.4 ms) into tick k+10.
{
    my $frac = time - floor(time);
    sleep(1.02 - $frac) if $frac > 0.8;   # the three in one 1 s tick
    my $before = time;
    my @r = $t->gets('/window/index.html', 4);
    my $after = time;
    is(RLTest::statuses_of(@r), '200 200 200 429', 'sliding window: the 4th is denied');
    is_deeply([ map { $_->{headers}{'x-ratelimit-remaining'} } @r ], [ 2, 1, 0, 0 ], 'sliding window: remaining');
    my $tick = floor($before);    # the three fell in the same 1 s tick (or the test is very slow)
    within($r[3]{headers}{'retry-after'}, $tick + 10 + 0.3334, $before, $after, 'sliding window: Retry-After');
    within($r[3]{headers}{'x-ratelimit-reset'}, $tick + 11, $before, $after, 'sliding window: reset when the tick leaves');
}

# The same window stacked with a rule and a window that have room to spare:
# it leaves the fewest units, and the headers describe it as alone.  Two
# units of tick k weigh fully until tick k+10; one of them comes back half a
# tick into it (2 * (1 - e) <= 1), half a second before the tick leaves.
# The second request finds every rule's key (the stack's shorter path), the
# roomier window's next unit not worked out there.  Sent in the second half
# of a second, so that t (under 10 s) and the reset (over 10 s) differ.
{
    my $frac = time - floor(time);
    sleep(($frac < 0.55 ? 0.55 : 1.55) - $frac) if $frac < 0.55 || $frac > 0.75;   # the two in one 1 s tick
    my $before = time;
    my @r = $t->gets('/stacked/index.html', 2);
    my $after = time;
    is(RLTest::statuses_of(@r), '200 200', 'stacked window: both served');
    my ($name, $left, $next) = ($r[1]{headers}{ratelimit} // '') =~ /^"(\w+)";r=(\d+);t=(\d+)$/;
    is("$name $left", 'stacked_window 1', 'stacked window: RateLimit names the window, 1 left');
    my $tick = floor($before);
    within($next, $tick + 10.5, $before, $after, 'stacked window: t when its next unit comes back');
    within($r[1]{headers}{'x-ratelimit-reset'}, $tick + 11, $before, $after,
           'stacked window: the window empties half a second later');
}

# sliding_log limit=2 period=10s: exact; the oldest hit leaves after 10 s.
{
    my @r = $t->gets('/log/index.html', 3);
    is(RLTest::statuses_of(@r), '200 200 429', 'sliding log: the 3rd is denied');
    is($r[2]{headers}{'retry-after'}, 10, 'sliding log: Retry-After when the oldest hit leaves');
    is($r[1]{headers}{'x-ratelimit-reset'}, 10, 'sliding log: reset');
}

# quota daily: until midnight UTC; monthly in +05:30 until the 1st, 00:00 IST
{
    my $before = time;
    my @r = $t->gets('/daily/index.html', 3);
    my $after = time;
    is(RLTest::statuses_of(@r), '200 200 429', 'daily quota: 2 a day');
    my $midnight = (floor($before / 86400) + 1) * 86400;
    within($r[2]{headers}{'retry-after'}, $midnight, $before, $after, 'daily quota: Retry-After to midnight UTC');
    within($r[0]{headers}{'x-ratelimit-reset'}, $midnight, $before, $after, 'daily quota: reset to midnight UTC');
    is($r[0]{headers}{'ratelimit-policy'}, '"daily";q=2;w=86400', 'daily quota: IETF policy window is a day');
    like($r[1]{headers}{'ratelimit'}, qr/^"daily";r=0;t=\d+$/, 'daily quota: IETF RateLimit');

    $before = time;
    my $r = $t->get('/monthly/index.html');
    $after = time;
    my @lt = gmtime($before + 5.5 * 3600);
    my ($y, $m) = ($lt[5] + 1900, $lt[4] + 1);
    ($y, $m) = $m == 12 ? ($y + 1, 1) : ($y, $m + 1);
    my $next = timegm(0, 0, 0, 1, $m - 1, $y) - 5.5 * 3600;   # 00:00 at +05:30
    within($r->{headers}{'x-ratelimit-reset'}, $next, $before, $after, 'monthly quota: reset at the next 1st, 00:00 +05:30');
    my ($w) = $r->{headers}{'ratelimit-policy'} =~ /w=(\d+)/;
    ok($w >= 28 * 86400 && $w <= 31 * 86400 && $w % 86400 == 0, "monthly quota: w is this month's length ($w)");
    is($t->get('/monthly/index.html')->{status}, 429, 'monthly quota: spent');
}

$t->stop();
done_testing();
