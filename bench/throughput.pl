#!/usr/bin/perl
# Throughput and worker CPU through Debian's nginx, side by side: a static
# file served plain, with add_header sending the same bytes as ratelimit's
# default headers and no rule (the floor for a limiter with headers), behind
# limit_req, and behind ratelimit (gcra, with its default headers and with
# ratelimit_headers off), with limits high enough that nothing is rejected.
# Two workloads: one key, and a random key among 1,000,000 per request (an
# X-Key header, the key of both modules), drawn afresh in every run, in zones
# first filled with all 1,000,000 (ratelimit's two locations share them).
#
# One worker (the default): the locations are measured at once, not in
# turn.  Five nginx instances, one worker each, all pinned to CPU 0, each
# driven by its own wrk (-t1 -c32) pinned to CPU 1; instance i serves
# location (i + round) mod 5, so that every location runs on every
# instance.  The kernel shares CPU 0 evenly between the five busy workers,
# so a location's requests/s against another's in the same round is the
# inverse of their costs a request, and whatever else this shared VM does
# at that moment falls on all five alike.  (Run in turn, as this script
# first did, plain alone moved by 15% between rounds on a noisy day: no 1%
# target could be read.)  Each ratio is the geometric mean over the rounds
# of the ratios within each round, with its standard error: with rounds a
# multiple of 5, every location runs on every instance equally often, so
# that what differs between instances cancels out.  req/s is a location's
# median share of CPU 0.
#
# --workers 2: one nginx with two workers (CPUs 0 and 1) and wrk unpinned,
# the locations in turn: lock contention between workers (one key: every
# request takes the same zone's lock, or limit_req's); CPU time is then
# both workers'.
#
#   bench/throughput.pl [--rounds 10] [--seconds 5] [--workers 1]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use RLTest;
use RLBench qw(geomean median);
use RLThroughput;

my ($rounds, $seconds, $workers) = (10, 5, 1);
GetOptions('rounds=i' => \$rounds, 'seconds=i' => \$seconds, 'workers=i' => \$workers)
    or die "usage: $0 [--rounds N] [--seconds N] [--workers N]\n";
die "$0: --workers 1 or 2\n" unless $workers == 1 || $workers == 2;

my @locations = ('plain', 'add_header', 'limit_req', 'ratelimit', 'ratelimit-noheaders');

my @workloads = ([ 'one key', 'one_key.lua' ], [ '1M random keys', 'random_keys.lua' ]);
my %r;   # {workload}{location}: rps, us => [a round each]; ratio => {other => [[rps, us] a round each]}

sub record {
    my ($name, $m) = @_;
    for my $l (@locations) {
        my $x = $r{$name}{$l} //= {};
        push @{ $x->{rps} }, $m->{$l}{rps};
        push @{ $x->{us} },  $m->{$l}{us};
        push @{ $x->{ratio}{$_} }, [ $m->{$l}{rps} / $m->{$_}{rps}, $m->{$l}{us} / $m->{$_}{us} ] for @locations;
    }
}

if ($workers == 1) {
    my @inst = map { RLThroughput::instance(1, '01') } @locations;
    for my $workload (@workloads) {
        my ($name, $script) = @$workload;
        RLThroughput::fill(\@inst, 'limit_req', 'ratelimit') if $script eq 'random_keys.lua';
        for my $round (0 .. $rounds) {   # round 0 warms up: connections, caches, Lua
            my @locs = map { $locations[($_ + $round) % @locations] } 0 .. $#inst;
            my @m = RLThroughput::at_once(\@inst, \@locs, $script, $seconds);
            my %m = map { ($locs[$_] => $m[$_]) } 0 .. $#locs;
            next if $round == 0;
            record($name, \%m);
            printf STDERR "  %-15s round %d: %s\n", $name, $round,
                join(', ', map { sprintf '%s %.0f', $_, $m{$_}{rps} } @locations);
        }
    }
    $_->{t}->stop() for @inst;
} else {
    my $inst = RLThroughput::instance(2, '01 10');
    for my $workload (@workloads) {
        my ($name, $script) = @$workload;
        RLThroughput::fill([$inst], 'limit_req', 'ratelimit') if $script eq 'random_keys.lua';
        RLThroughput::alone($inst, 'plain', $script, $seconds);   # warm up
        for my $round (1 .. $rounds) {
            my %m;
            for my $l (@locations) {
                $m{$l} = RLThroughput::alone($inst, $l, $script, $seconds);
                printf STDERR "  %-15s round %d %-20s %9.0f req/s %7.2f us/req\n", $name, $round, $l,
                    $m{$l}{rps}, $m{$l}{us};
            }
            record($name, \%m);
        }
    }
    $inst->{t}->stop();
}

my $v = (`/usr/sbin/nginx -v 2>&1` =~ m{nginx/(\S+)})[0];
my $cores = `nproc`;
chomp $cores;
printf "throughput: nginx %s, %d cores, %s, %d rounds of %d s\n", $v, $cores,
    $workers == 1
    ? 'the five locations at once: 5 nginx with 1 worker each on CPU 0, 5 wrk -t1 -c32 on CPU 1'
    : 'in turn: 1 nginx with 2 workers on CPUs 0 and 1, wrk -t1 -c64 unpinned', $rounds, $seconds;
for my $name (map { $_->[0] } @workloads) {
    printf "\n%s\n  %-20s %8s %7s %19s %19s %19s   %s\n", $name, 'location', 'req/s', 'us/req', 'vs plain',
        'vs add_header', 'vs limit_req', 'req/s vs plain, each round';
    for my $l (@locations) {
        my $x = $r{$name}{$l};
        printf "  %-20s %8.0f %7.2f", $l, median(@{ $x->{rps} }), median(@{ $x->{us} });
        for my $o (qw(plain add_header limit_req)) {
            my $p = $x->{ratio}{$o};
            printf "  %5.3f±%.3f/%5.3f", geomean(map { $_->[0] } @$p), scalar geomean(map { $_->[1] } @$p);
        }
        printf "   %s\n", join(' ', map { sprintf '%.3f', $_->[0] } @{ $x->{ratio}{plain} });
    }
}
print "\n(ratios: req/s ratio ± its standard error / worker CPU a request ratio, geometric means of the\n"
    . " rounds' ratios; add_header sends ratelimit's default headers' bytes with no rule: the floor for\n"
    . " a limiter with headers)\n";
