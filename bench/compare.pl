#!/usr/bin/perl
# Two builds of the module side by side, at once, as throughput.pl measures
# locations: one nginx a (module, location) pair, one worker each, all on
# CPU 0, each driven by its own wrk on CPU 1 (a pair keeps its instance:
# the module is the instance's); requests/s and CPU a request of each pair
# against the first, geometric means of the rounds' ratios (requests/s with
# its standard error).  For the before/after
# figures of a change:
#
#   git worktree add /tmp/before HEAD~1 && (cd /tmp/before && ./build.sh build)
#   bench/compare.pl [--rounds 10] [--seconds 5] [--keys one|random] \
#       plain=build/ngx_http_ratelimit_module.so:plain \
#       before=/tmp/before/build/ngx_http_ratelimit_module.so:ratelimit \
#       after=build/ngx_http_ratelimit_module.so:ratelimit
#
# --workers 2: each nginx has two workers (CPUs 0 and 1), the pairs run in
# turn, wrk unpinned: the zone lock's contention between workers.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use RLBench qw(geomean median);
use RLThroughput;

my ($rounds, $seconds, $keys, $workers) = (10, 5, 'one', 1);
GetOptions('rounds=i' => \$rounds, 'seconds=i' => \$seconds, 'keys=s' => \$keys, 'workers=i' => \$workers)
    or die "usage: $0 [--rounds N] [--seconds N] [--keys one|random] [--workers 1|2] LABEL=MODULE:LOCATION...\n";
my @pairs = map { /^([^=]+)=(.+):([\w-]+)$/ or die "$0: $_: expected LABEL=MODULE:LOCATION\n"; [ $1, $2, $3 ] } @ARGV;
die "$0: two pairs at least\n" if @pairs < 2;
my $script = $keys eq 'random' ? 'random_keys.lua' : 'one_key.lua';

my %r;
my @inst = map { local $ENV{RL_MODULE} = $_->[1]; RLThroughput::instance($workers, $workers == 1 ? '01' : '01 10') }
    @pairs;
if ($keys eq 'random') {   # each instance's zone filled with the million keys first
    RLThroughput::fill([ $inst[$_] ], $pairs[$_][2]) for grep { $pairs[$_][2] =~ /limit/ } 0 .. $#pairs;
}
if ($workers == 1) {
    for my $round (0 .. $rounds) {
        my @m = RLThroughput::at_once(\@inst, [ map { $_->[2] } @pairs ], $script, $seconds);
        next if $round == 0;
        push @{ $r{ $pairs[$_][0] } }, [ $m[$_]{rps} / $m[0]{rps}, $m[$_]{us} / $m[0]{us}, $m[$_]{rps} ]
            for 0 .. $#pairs;
        printf STDERR "  round %d: %s\n", $round, join(', ', map { sprintf '%s %.0f', $pairs[$_][0], $m[$_]{rps} } 0 .. $#pairs);
    }
    $_->{t}->stop() for @inst;
} else {
    for my $round (0 .. $rounds) {
        my @m = map { RLThroughput::alone($inst[$_], $pairs[$_][2], $script, $seconds) } 0 .. $#pairs;
        next if $round == 0;
        push @{ $r{ $pairs[$_][0] } }, [ $m[$_]{rps} / $m[0]{rps}, $m[$_]{us} / $m[0]{us}, $m[$_]{rps} ]
            for 0 .. $#pairs;
        printf STDERR "  round %d: %s\n", $round, join(', ', map { sprintf '%s %.0f', $pairs[$_][0], $m[$_]{rps} } 0 .. $#pairs);
    }
    $_->{t}->stop() for @inst;
}
printf "compare: %s keys, %s, %d rounds of %d s\n", $keys,
    $workers == 1 ? 'at once on CPU 0' : 'in turn, 2 workers each', $rounds, $seconds;
printf "  %-12s %-22s %8s   %s\n", 'label', 'location', 'req/s', "vs $pairs[0][0] (req/s ± se / CPU a request)";
for my $p (@pairs) {
    my $x = $r{ $p->[0] };
    printf "  %-12s %-22s %8.0f   %5.3f±%.3f / %5.3f\n", $p->[0], $p->[2], median(map { $_->[2] } @$x),
        geomean(map { $_->[0] } @$x), scalar geomean(map { $_->[1] } @$x);
}
