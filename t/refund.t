#!/usr/bin/perl
# Delays whose client left are given back.  A leaky_bucket key (one a
# second) gets 1,000 requests at once: the first is served, the others
# queued a second apart.  995 of their clients close; then a new request
# waits only behind the requests still queued (the 4 kept), not behind a
# thousand seconds of requests nobody waits for, and not less: each left
# request gave back its place once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(sleep time);
use RLTest;

my $t = RLTest->new->start(<<'EOF');
log_format st '$http_x_n $status $ratelimit_status';
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        ratelimit zone=z key=$http_x_key algorithm=leaky_bucket limit=1 period=1s max_delay=2000s;
        access_log %%PREFIX%%/st.log st;
    }
}
EOF

my $first = time;
my @sockets = map { $t->open_request('/index.html', { 'X-Key' => 'q', 'X-N' => $_ }) } 0 .. 999;
# every request is decided (queued) before any client leaves
ok(RLTest::wait_until(sub {
    my $s = $t->get('/index.html', { 'X-Key' => 'other' });   # a request behind them on the worker
    $s->{status} == 200;
}, 30), 'the 1,000 requests are in');

close $_ for @sockets[5 .. 999];
ok(RLTest::wait_until(sub { (() = $t->file('st.log') =~ / 499 DELAYED$/mg) == 995 }, 30),
   '995 clients left while delayed (499)');

# the new request's slot is right after the 4 kept ones: 5 s after the first
my $start = time;
my $r = $t->get('/index.html', { 'X-Key' => 'q' });
my $waited = time - $start;
my $slot = $first + 5 - $start;
$slot = 0 if $slot < 0;
is($r->{status}, 200, 'a new request is admitted');
ok($waited < $slot + 1 && $waited > $slot - 0.3,
   sprintf('it waits for the 4 requests still queued only: %.2f s (their end in %.2f s)', $waited, $slot));

# the kept clients are served in turn
for my $i (0 .. 4) {
    my $line = do { local $/ = "\r\n"; readline($sockets[$i]) } // '';
    like($line, qr{^HTTP/1\.1 200}, "kept request $i served");
}
close $_ for @sockets[0 .. 4];

$t->stop();
done_testing();
