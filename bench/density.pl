#!/usr/bin/perl
# Density: how many distinct keys a 1 MB zone holds before the first key
# that still holds state is evicted, for ratelimit (gcra) and for limit_req,
# measured the same way through real nginx.
#
# A probe of N keys starts a fresh nginx, sends one request for each of N
# distinct keys (each allowed, each then limited for a minute), then one
# more request for each: a key still in the zone is rejected, an evicted one
# is allowed again.  A binary search finds the largest N with no eviction.
#
# The stacks (several rules on one key, the common production policy: a
# burst rule, a sustained rule, a daily quota) are probed the same way but
# judged by the zone's own count of live evictions (ratelimit_stats): with
# several rules a key evicted under one rule is still refused by another,
# so the second pass alone would not see it.
#
#   bench/density.pl [--zone 1m] [NAME...]   (NAME: limit_req, ratelimit,
#                                            gcra+gcra, gcra+sliding_window+quota,
#                                            gcra+sliding_window, sliding_window)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib";
use Getopt::Long;
use IO::Socket::INET;
use RLTest;

my $zone = '1m';
GetOptions('zone=s' => \$zone) or die "usage: $0 [--zone SIZE] [NAME...]\n";

# a stack's rules, each limiting a key after its one request for a minute
# (or a day), in the location of a server that also answers ratelimit_stats
sub stack {
    my ($rules) = @_;
    return "keepalive_requests 100000000;\nratelimit_zone d $zone;\n"
        . 'server { listen 127.0.0.1:%%PORT%%; location / {'
        . join('', map {" ratelimit zone=d key=\$http_x_key $_;"} @$rules)
        . ' ratelimit_headers off; } location = /stats { ratelimit_stats; } }';
}

my %module = (
    ratelimit => "keepalive_requests 100000000;\nratelimit_zone d $zone;\n"
        . 'server { listen 127.0.0.1:%%PORT%%; location / {'
        . ' ratelimit zone=d key=$http_x_key limit=1 period=1m burst=1; ratelimit_headers off; } }',
    limit_req => "keepalive_requests 100000000;\nlimit_req_zone \$http_x_key zone=d:$zone rate=1r/m;\n"
        . 'server { listen 127.0.0.1:%%PORT%%; location / { limit_req zone=d; } }',
    'gcra+gcra' => stack([ 'limit=1 period=1m burst=1', 'limit=2 period=1h' ]),
    'gcra+sliding_window+quota' => stack([ 'limit=1 period=1m burst=1',
        'algorithm=sliding_window limit=2 period=1h', 'algorithm=quota limit=3 reset=daily' ]),
    'gcra+sliding_window' => stack([ 'limit=1 period=1m burst=1', 'algorithm=sliding_window limit=2 period=1h' ]),
    'sliding_window' => stack([ 'algorithm=sliding_window limit=1 period=1h' ]),
);
my %stacked = map { $_ => 1 } grep { /sliding_window|\+/ } keys %module;
my @names = @ARGV ? @ARGV : ('limit_req', 'ratelimit', sort keys %stacked);
for (@names) { die "$0: unknown $_ (one of: @{[ sort keys %module ]})\n" unless $module{$_} }

# Sends one HEAD request for each key on one keep-alive connection,
# pipelined in batches; returns how many were answered 200.
sub pass {
    my ($port, $from, $to) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") or die "connect: $!";
    my $ok = 0;
    for (my $k = $from; $k < $to; $k += 200) {
        my $end = $k + 200 < $to ? $k + 200 : $to;
        print $s join '', map { "HEAD /index.html HTTP/1.1\r\nHost: d\r\nX-Key: key$_\r\n\r\n" } $k .. $end - 1;
        my ($buf, $seen) = ('', 0);
        while ($seen < $end - $k) {
            sysread($s, $buf, 65536, length $buf) or die "read after $seen of " . ($end - $k) . " responses: $!";
            $seen = () = $buf =~ /^HTTP\/1\.1 \d+/mg;
        }
        $ok += () = $buf =~ /^HTTP\/1\.1 200/mg;
    }
    close $s;
    return $ok;
}

# True if a fresh nginx keeps all n keys.
sub keeps {
    my ($name, $n) = @_;
    my $t = RLTest->new(quiet => 1);
    $t->write_conf($module{$name}, no_access_log => 1, log_level => 'crit');
    $t->start();
    my $first = pass($t->port, 0, $n);
    my $again = $stacked{$name} ? 0 : pass($t->port, 0, $n);
    my $live = $stacked{$name} ? $t->zone_stats('d')->{live_evictions} : 0;
    $t->stop();
    die "$name: only $first of $n first requests were allowed\n" if $first != $n;
    die "$name: no live_evictions in the zone's stats\n" unless defined $live;
    return $again == 0 && $live == 0;
}

my %held;
for my $name (@names) {
    my ($lo, $hi) = (1000, 1000);
    $hi *= 2 while keeps($name, $hi);   # grow until a key is evicted
    $lo = $hi / 2;
    while ($hi - $lo > 50) {            # then halve: to within 50 keys
        my $mid = int(($lo + $hi) / 2);
        if (keeps($name, $mid)) { $lo = $mid } else { $hi = $mid }
    }
    $held{$name} = $lo;
    printf STDERR "  %-25s holds %d keys in a %s zone\n", $name, $lo, $zone;
}

my $mb = $zone =~ /^(\d+)m$/ ? $1 : 1;
printf "density: keys a %s zone holds before the first live key is evicted (within 50)\n", $zone;
printf "  %-25s %7d keys  %7.0f keys/MB\n", $_, $held{$_}, $held{$_} / $mb for @names;
printf "  ratelimit / limit_req: %.2fx\n", $held{ratelimit} / $held{limit_req} if $held{ratelimit} && $held{limit_req};
