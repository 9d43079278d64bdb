#!/usr/bin/perl
# Zone flood: the smallest zone (32k) gets 100 times its capacity in
# distinct keys at full speed.  No 5xx, no worker crash, evictions counted,
# a denied key stays denied all along (the table evicts the keys
# owing least first), and the flood keys, each owing only its one request,
# leave no debt behind: fresh keys are never refused.  Every flood key stays
# live for the whole test, whatever the machine's speed.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $t = RLTest->new->start(<<'EOF', workers => 2);
keepalive_requests 100000000;
ratelimit_zone small 32k;
server {
    listen 127.0.0.1:%%PORT%% reuseport;
    location / {
        # a flood key owes its one request for an hour
        ratelimit zone=small key=$http_x_key limit=2 period=2h name=flood;
        # the victim is denied for half an hour after its two requests
        # (a key owing only its one request would be forgotten, README)
        ratelimit zone=small key=$http_x_victim limit=2 period=1h name=victim;
        ratelimit_log_level info;
    }
    location = /stats {
        ratelimit_stats;
    }
}
EOF

my $capacity = $t->zone_stats('small')->{capacity};
ok($capacity > 500 && $capacity < 2000, "the 32k zone holds $capacity keys");

my @victim = $t->gets('/index.html', 3, { 'X-Victim' => 'v' });
is($victim[0]{status}, 200, 'victim: its first request');
is($victim[1]{status}, 200, 'victim: its second request');
is($victim[2]{status}, 429, 'victim: then denied');

sub flood {
    my ($from, $to) = @_;
    return $t->pipelined('HEAD /index.html', 'X-Key', map { "flood$_" } $from .. $to - 1);
}

my $total = 100 * $capacity;
my (%status, $victim_denied, $checks);
for (my $k = 0; $k < $total; $k += $total / 20) {
    my %s = flood($k, $k + $total / 20);
    $status{$_} += $s{$_} for keys %s;
    $checks++;
    $victim_denied++ if $t->get('/index.html', { 'X-Victim' => 'v' })->{status} == 429;
}

is(join(',', sort keys %status), '200', "all $total flood requests answered 200, none 5xx");
is($status{200}, $total, 'every flood request admitted');
is($victim_denied, $checks, "the denied victim stayed denied at each of $checks checks during the flood");
my $st = $t->zone_stats('small');
ok($st->{evictions} >= $total - 2 * $capacity, "evictions counted: $st->{evictions}");
is($st->{live_evictions}, $st->{evictions}, 'every evicted key a live one');
is($st->{summary_refusals}, 0, 'keys owing one request leave nothing in the summary: no refusal by it');
my %fresh = flood($total, $total + 1000);
is_deeply(\%fresh, { 200 => 1000 }, 'fresh keys after the flood: all admitted');
ok($st->{keys} <= $capacity, "keys held $st->{keys} <= capacity $capacity");
is($st->{rules}{flood}{allowed}, $total, 'stats: every flood request counted');

$t->stop();
unlike($t->error_log, qr/exited on signal|worker process \d+ exited with code [^0]/, 'no worker died');
done_testing();
