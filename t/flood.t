#!/usr/bin/perl
# Zone flood: the smallest zone (32k) gets 100 times its capacity in
# distinct keys at full speed.  No 5xx, no worker crash, evictions counted,
# and a key that was denied stays denied all along: while the zone holds
# fewer live keys than its capacity, only keys back to full budget go.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use JSON::PP;
use RLTest;

my $t = RLTest->new();
$t->write_conf(<<'EOF', workers => 2);
keepalive_requests 100000000;
ratelimit_zone small 32k;
server {
    listen 127.0.0.1:%%PORT%% reuseport;
    location / {
        # a flood key is back to full budget 10 ms after its request
        ratelimit zone=small key=$http_x_key limit=100 period=1s name=flood;
        # the victim is denied for an hour after its one request
        ratelimit zone=small key=$http_x_victim limit=1 period=1h name=victim;
        ratelimit_log_level info;
    }
    location = /stats {
        ratelimit_stats;
    }
}
EOF
$t->start();

sub stats { decode_json($t->get('/stats')->{content})->{zones}{small} }

my $capacity = stats()->{capacity};
ok($capacity > 500 && $capacity < 2000, "the 32k zone holds $capacity keys");

is($t->get('/index.html', { 'X-Victim' => 'v' })->{status}, 200, 'victim: its one request');
is($t->get('/index.html', { 'X-Victim' => 'v' })->{status}, 429, 'victim: then denied');

# Sends the keys [from, to) on one keep-alive connection, pipelined;
# returns the count of each status.
sub flood {
    my ($from, $to) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . $t->port) or die "connect: $!";
    my %status;
    for (my $k = $from; $k < $to; $k += 250) {
        my $end = $k + 250 < $to ? $k + 250 : $to;
        print $s join '', map { "HEAD /index.html HTTP/1.1\r\nHost: f\r\nX-Key: flood$_\r\n\r\n" } $k .. $end - 1;
        my $buf = '';
        my $seen = 0;
        while ($seen < $end - $k) {
            sysread($s, $buf, 65536, length $buf) or die "read: $!";
            $seen = () = $buf =~ /^HTTP\/1\.1 \d+/mg;
        }
        $status{$1}++ while $buf =~ /^HTTP\/1\.1 (\d+)/mg;
    }
    return %status;
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
my $st = stats();
ok($st->{evictions} >= $total - 2 * $capacity, "evictions counted: $st->{evictions}");
is($st->{live_evictions}, 0, 'no live key evicted: the flood keys were back to full budget');
ok($st->{keys} <= $capacity, "keys held $st->{keys} <= capacity $capacity");
is($st->{rules}{flood}{allowed}, $total, 'stats: every flood request counted');

$t->stop();
unlike($t->error_log, qr/exited on signal|worker process \d+ exited with code [^0]/, 'no worker died');
done_testing();
