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
#   bench/density.pl [--zone 1m]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib";
use Getopt::Long;
use IO::Socket::INET;
use RLTest;

my $zone = '1m';
GetOptions('zone=s' => \$zone) or die "usage: $0 [--zone SIZE]\n";

my %module = (
    ratelimit => "keepalive_requests 100000000;\nratelimit_zone d $zone;\n"
        . 'server { listen 127.0.0.1:%%PORT%%; location / {'
        . ' ratelimit zone=d key=$http_x_key limit=1 period=1m burst=1; ratelimit_headers off; } }',
    limit_req => "keepalive_requests 100000000;\nlimit_req_zone \$http_x_key zone=d:$zone rate=1r/m;\n"
        . 'server { listen 127.0.0.1:%%PORT%%; location / { limit_req zone=d; } }',
);

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
    my $again = pass($t->port, 0, $n);
    $t->stop();
    die "$name: only $first of $n first requests were allowed\n" if $first != $n;
    return $again == 0;
}

my %held;
for my $name ('limit_req', 'ratelimit') {
    my ($lo, $hi) = (1000, 1000);
    $hi *= 2 while keeps($name, $hi);   # grow until a key is evicted
    $lo = $hi / 2;
    while ($hi - $lo > 50) {            # then halve: to within 50 keys
        my $mid = int(($lo + $hi) / 2);
        if (keeps($name, $mid)) { $lo = $mid } else { $hi = $mid }
    }
    $held{$name} = $lo;
    printf STDERR "  %-10s holds %d keys in a %s zone\n", $name, $lo, $zone;
}

my $mb = $zone =~ /^(\d+)m$/ ? $1 : 1;
printf "density: keys a %s zone holds before the first live key is evicted (within 50)\n", $zone;
printf "  %-10s %7d keys  %7.0f keys/MB\n", $_, $held{$_}, $held{$_} / $mb for 'limit_req', 'ratelimit';
printf "  ratelimit / limit_req: %.2fx\n", $held{ratelimit} / $held{limit_req};
