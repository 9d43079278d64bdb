#!/usr/bin/perl
# A worker reuses the contexts of its ended requests: nothing of one
# request's decision reaches the next one's headers or variables (an
# exempt request, a location without rules, one with headers off, after an
# admission and after a refusal), whatever the order; more requests at once
# than it keeps spare.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $t = RLTest->new();

$t->start(<<'EOF2');
log_format reuse '$uri $status [$ratelimit_status] [$ratelimit_remaining] [$ratelimit_limit] '
                 '[$ratelimit_reset] [$ratelimit_retry_after] [$ratelimit_fingerprint]';
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    access_log %%PREFIX%%/reuse.log reuse;

    location /limited/ {
        ratelimit zone=z key=$http_x_user limit=2 period=1m name=limited;
        ratelimit_headers both;
        alias %%PREFIX%%/html/;
    }
    location /exempt/ {
        ratelimit zone=z key=$http_x_none limit=1 period=1m name=exempt;
        ratelimit_headers both;
        alias %%PREFIX%%/html/;
    }
    location /off/ {
        ratelimit zone=z key=$http_x_user limit=5 period=1m name=off;
        ratelimit_headers off;
        alias %%PREFIX%%/html/;
    }
    location /plain/ {
        alias %%PREFIX%%/html/;
    }
    location /held/ {
        ratelimit zone=z key=$http_x_user limit=100000 period=1s name=held;
        ratelimit_headers off;
        limit_rate 1;   # each response sent for minutes: held until its client leaves
        alias %%PREFIX%%/html/;
    }
    location = /stats {
        ratelimit_stats;
    }
}
EOF2

my @fields = qw(x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset ratelimit ratelimit-policy retry-after);

# the rate-limit fields a response carries, as "name=value ..."
sub fields {
    my ($r) = @_;
    return join ' ', map { "$_=$r->{headers}{$_}" } grep { defined $r->{headers}{$_} } @fields;
}

my @sequence = (
    # path, user, status, rate-limit fields (a pattern)
    [ '/limited/f', 'alice', 200, qr/^x-ratelimit-limit=2 x-ratelimit-remaining=1 x-ratelimit-reset=\d+ ratelimit=\S.* ratelimit-policy=\S.*$/ ],
    [ '/limited/f', 'alice', 200, qr/x-ratelimit-remaining=0 / ],
    [ '/limited/f', 'alice', 429, qr/x-ratelimit-remaining=0 .*retry-after=\d+$/ ],
    [ '/exempt/f',  'alice', 200, qr/^$/ ],
    [ '/plain/f',   'alice', 200, qr/^$/ ],
    [ '/limited/f', 'alice', 429, qr/retry-after=\d+$/ ],
    [ '/off/f',     'bob',   200, qr/^$/ ],
    [ '/limited/f', 'carol', 200, qr/^x-ratelimit-limit=2 x-ratelimit-remaining=1 x-ratelimit-reset=\d+ ratelimit=\S.* ratelimit-policy=\S.*$/ ],
    [ '/plain/f',   'carol', 200, qr/^$/ ],
    [ '/exempt/f',  'carol', 200, qr/^$/ ],
);

for my $s (@sequence) {
    my ($path, $user, $status, $want) = @$s;
    my $r = $t->get_as($path, user => $user);
    is($r->{status}, $status, "$path as $user: $status");
    like(fields($r), $want, "$path as $user: its own rate-limit fields");
}

# the variables of each request, in the access log: only a decided
# request's own (a request's line is written after its response is sent)
my @lines;
RLTest::wait_until(sub {
    @lines = grep { length } split /\n/, RLTest::read_file($t->prefix . '/reuse.log');
    @lines >= @sequence;
}, 10);
is(scalar @lines, scalar @sequence, 'a log line a request');
my %want = (
    '/exempt/f 200' => qr/^\[EXEMPT\] \[-\] \[-\] \[-\] \[-\] \[-\]$/,
    '/plain/f 200'  => qr/^\[-\] \[-\] \[-\] \[-\] \[-\] \[-\]$/,
    '/off/f 200'    => qr/^\[PASSED\] \[4\] \[5\] \[\d+\] \[0\] \[[0-9a-f]{16}\]$/,
    '/limited/f 200' => qr/^\[PASSED\] \[[01]\] \[2\] \[\d+\] \[0\] \[[0-9a-f]{16}\]$/,
    '/limited/f 429' => qr/^\[REJECTED\] \[0\] \[2\] \[\d+\] \[[1-9]\d*\] \[[0-9a-f]{16}\]$/,
);
for my $line (@lines) {
    my ($what, $vars) = $line =~ /^(\S+ \d+) (.*)$/ or next;
    like($vars, $want{$what}, "variables of $what: $vars");
}

# carol's fingerprint is hers, not alice's (the context's key hash is the
# binding rule's of this request)
my ($alice) = $lines[0] =~ /\[([0-9a-f]{16})\]$/;
my ($carol) = $lines[7] =~ /\[([0-9a-f]{16})\]$/;
isnt($carol, $alice, 'a later request has its own key fingerprint');

# More requests at once than the worker keeps spare contexts (1,024), each
# holding its context until its client leaves: the contexts past the spare
# ones are freed as their requests end, and requests go on as before.
my $held = 1100;
my @socks = map { $t->open_request('/held/f', { 'X-User' => "h$_" }) } 1 .. $held;
ok(RLTest::wait_until(sub { ($t->zone_stats('z')->{rules}{held}{allowed} // 0) == $held }, 60),
   "$held requests decided and held at once");
close $_ for @socks;
ok(RLTest::wait_until(sub { (() = RLTest::read_file($t->prefix . '/reuse.log') =~ m{^/held/f \d+ }mg) == $held }, 60),
   "the $held requests ended when their clients left");
for my $s (@sequence[ 7 .. 9 ]) {
    my ($path, $user, $status, $want) = @$s;
    my $r = $t->get_as($path, user => "$user-again");
    is($r->{status}, $status, "after them, $path: $status");
    like(fields($r), $want, "after them, $path: its own rate-limit fields");
}

$t->stop;
done_testing();
