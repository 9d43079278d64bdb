#!/usr/bin/perl
# algorithm=adaptive against an overloaded upstream (./build.sh bench
# adaptive; about 5 minutes; not part of CI).  The upstream
# (t/lib/rl_adaptive.py) has W=8 workers, each serving one request at a
# time for a log-normal service time of mean S=40 ms (sigma 0.5), requests
# beyond W queued: its ideal concurrency is W, its capacity W/S = 200
# requests a second.  An open-loop generator (the same file: arrivals at a
# set rate whatever the answers, a 1 s client timeout) sends it, through
# nginx, steps of 0.5x, 2x, 4x and 0.5x its capacity, then 2x while S
# doubles to 80 ms (its capacity halves, its ideal concurrency stays W).
# The same run, side by side: no limit; a static algorithm=concurrency
# limit=W (the oracle that knows W); nginx's limit_conn at W; the adaptive
# rule.  Per second: goodput (2xx within the timeout), the admitted
# requests' p50 and p99, refusals, and the adaptive limit (from the stats).
#
# Then a minority of requests in front of an upstream with room to spare
# (1,000 workers: it never queues), where the limit should not move: a
# static algorithm=concurrency limit=16 and algorithm=adaptive limit=16
# side by side, 20 s each, the figures of the last 10 s:
#   * 5% of the requests 20 times as slow (800 ms beside 40 ms), open-loop
#     at 200 a second (16 in flight on average: the limit reached often);
#   * the closed-loop clients of an API, 12 on the slow endpoint beside 20
#     on the fast one;
#   * 20 fast clients and a thread of fast 502s (8 a second);
#   * 20 fast clients and as many sending requests answered 404 at once.
# Per case: the fast requests' goodput, the minority's answers, the
# limit's mean and least, the baseline at the end; the targets: the limit
# within 25% of 16 and the fast goodput within 10% of the static limit's.
#   perl bench/adaptive.pl [--seconds-per-step N] [--csv FILE]
#                          [--only overload|minority]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use POSIX ();
use Time::HiRes qw(sleep time);
use JSON::PP ();
use RLTest;
use RLBench;

my $step_s = 15;
my ($csv, $only) = (undef, '');
GetOptions('seconds-per-step=i' => \$step_s, 'csv=s' => \$csv, 'only=s' => \$only)
    or die "usage: $0 [--seconds-per-step N] [--csv F] [--only overload|minority]\n";

my $W = 8;
my $MEAN = 40;
my $CAP = 1000 * $W / $MEAN;
my ($python, $helper) = ($RLBench::python, $RLBench::helper);
my @steps = ([0.5, 'x0.5'], [2, 'x2'], [4, 'x4'], [0.5, 'x0.5 again'], [2, 'x2, S doubled']);
my $steps = join ',', map { ($_->[0] * $CAP) . ":$step_s" } @steps;

my %rule = (
    'no limit'    => '',
    'static W'    => "ratelimit zone=b key=backend_a algorithm=concurrency limit=$W; ratelimit_status 503;",
    'limit_conn W' => "limit_conn c $W; limit_conn_status 503;",
    'adaptive'    => 'ratelimit zone=b key=backend_a algorithm=adaptive limit=64;',
);
my @names = ('no limit', 'static W', 'limit_conn W', 'adaptive');

sub start_upstream {
    my ($portfile, $workers) = @_;
    return RLBench::start_upstream($portfile, $workers // $W, $MEAN);
}

# nginx ($t's) with a location of $directives in front of the upstream at
# $upport
sub start_nginx {
    my ($t, $directives, $upport) = @_;
    RLBench::start_inflight_nginx($t, <<'EOF', $directives, $upport);
ratelimit_zone b 1m;
map "" $backend_key { default backend_a; }
limit_conn_zone $backend_key zone=c:1m;
EOF
}

# A poller of the adaptive rule's figures, once a second for $n seconds,
# into the prefix's file limits: "second limit baseline_us" a line.
sub start_poller {
    my ($t, $rule, $n) = @_;
    my $poller = fork() // die;
    if ($poller == 0) {
        open(my $out, '>', $t->prefix . '/limits') or die;
        my $t0 = time;
        for my $i (0 .. $n) {
            my $s = $t->rule_stats('b', $rule);
            printf $out "%d %s %s\n", $i, $s ? $s->{limit_now} : '-', $s ? $s->{baseline_us} : '-';
            sleep(($t0 + $i + 1) - time) if $t0 + $i + 1 > time;
        }
        close $out;
        POSIX::_exit(0);
    }
    return $poller;
}

sub polled {
    my ($t, $column) = @_;
    return [ map { (split ' ')[$column] // '-' } split /\n/, RLTest::read_file($t->prefix . '/limits') ];
}

my (%secs, %limits);
for my $name ($only eq 'minority' ? () : @names) {
    my $t = RLTest->new;
    my ($up, $upport) = start_upstream($t->prefix . '/up.port');
    start_nginx($t, $rule{$name}, $upport);
    # the limit, each second, while the load runs
    my $poller = start_poller($t, 'adaptive_64_adaptive', @steps * $step_s);
    my $at = 4;   # S doubles as the last step starts
    my @lines = `$python $helper load ${\ $t->url('/')} --steps $steps --timeout 1 --at-step $at:http://127.0.0.1:$upport/set?mean=${\ (2 * $MEAN)}`;
    waitpid($poller, 0);
    $secs{$name} = [ map { JSON::PP::decode_json($_) } @lines ];
    $limits{$name} = polled($t, 1);
    $t->stop;
    kill 'TERM', $up;
    waitpid($up, 0);
}

# ---- a minority of requests, an upstream with room to spare --------------------

my $SLOW = 20 * $MEAN;
my $MINORITY_S = 20;
my @cases = (
    [ '5% slow, open-loop', '/ms/' . $MEAN, "--steps 200:$MINORITY_S --mix /ms/$SLOW:0.05", "/ms/$SLOW" ],
    [ '12 slow + 20 fast clients', '/ms/' . $MEAN, "--steps 0:$MINORITY_S --clients /ms/$MEAN:20 --clients /ms/$SLOW:12",
      "/ms/$SLOW" ],
    [ '20 fast clients + 502s', '/ms/' . $MEAN, "--steps 0:$MINORITY_S --clients /ms/$MEAN:20 --clients /status/502:1:125",
      '/status/502' ],
    [ '20 fast + 20 404 clients', '/ms/' . $MEAN, "--steps 0:$MINORITY_S --clients /ms/$MEAN:20 --clients /status/404:20",
      '/status/404' ],
);
my %minority_rule = (
    'static 16'   => 'ratelimit zone=b key=backend_a algorithm=concurrency limit=16; ratelimit_status 503;',
    'adaptive 16' => 'ratelimit zone=b key=backend_a algorithm=adaptive limit=16;',
);
my @minority_names = ('static 16', 'adaptive 16');
my %minority;   # case => rule => { fast, minority, refused, limit, low, baseline }
for my $case ($only eq 'overload' ? () : @cases) {
    my ($what, $path, $load, $minor) = @$case;
    for my $name (@minority_names) {
        my $t = RLTest->new;
        my ($up, $upport) = start_upstream($t->prefix . '/up.port', 1000);
        start_nginx($t, $minority_rule{$name}, $upport);
        my $poller = start_poller($t, 'adaptive_16_adaptive', $MINORITY_S);
        my @secs = map { JSON::PP::decode_json($_) }
            `$python $helper load ${\ $t->url($path)} $load --timeout 2`;
        waitpid($poller, 0);
        my @last = @secs[ $MINORITY_S / 2 .. $MINORITY_S - 1 ];
        my $per = sub {
            my ($p, $field) = @_;
            my $n = 0;
            $n += ($_->{paths}{$p} // {})->{$field} // 0 for @last;
            return $n / @last;
        };
        my @l = grep { /^\d+$/ && $_ > 0 } @{ polled($t, 1) }[ $MINORITY_S / 2 .. $MINORITY_S ];
        my @b = grep { /^\d+$/ && $_ > 0 } @{ polled($t, 2) };
        $minority{$what}{$name} = {
            fast     => $per->($path, 'ok'),
            minority => $per->($minor, 'ok') + $per->($minor, 'other'),
            refused  => $per->($path, 'refused') + $per->($minor, 'refused'),
            limit    => @l ? mean(@l) : undef,
            low      => @l ? (sort { $a <=> $b } @l)[0] : undef,
            baseline => @b ? $b[-1] / 1000 : undef,
        };
        $t->stop;
        kill 'TERM', $up;
        waitpid($up, 0);
    }
}

# ---- the figures ---------------------------------------------------------------

sub mean {
    my @v = grep { defined } @_;
    return @v ? (eval { my $s = 0; $s += $_ for @v; $s }) / @v : undef;
}
sub fmt { defined $_[0] ? sprintf($_[1] // '%.0f', $_[0]) : '-' }

# a step's settled part: its last half
sub settled {
    my ($name, $i, $field) = @_;
    my @s = @{ $secs{$name} }[ $i * $step_s + int($step_s / 2) .. ($i + 1) * $step_s - 1 ];
    return mean(map { $_->{$field} } @s);
}

minority_figures() if %minority;
exit 0 if $only eq 'minority';

my $unloaded_p99 = settled('no limit', 0, 'p99_ms');
printf "upstream: W=%d workers, S=%d ms log-normal (sigma 0.5), capacity %d/s; steps of %d s; client timeout 1 s\n",
    $W, $MEAN, $CAP, $step_s;
printf "unloaded p99 (no limit, x0.5): %.0f ms\n\n", $unloaded_p99;
printf "%-14s %-13s %9s %9s %8s %8s %8s\n", 'step', 'rule', 'goodput/s', 'refused/s', 'p50 ms', 'p99 ms', 'limit';
for my $i (0 .. $#steps) {
    for my $name (@names) {
        my @l = @{ $limits{$name} }[ $i * $step_s + int($step_s / 2) .. ($i + 1) * $step_s - 1 ];
        my $lim = $name eq 'adaptive' ? mean(grep { defined && /^\d+$/ } @l) : $name =~ /W$/ ? $W : undef;
        printf "%-14s %-13s %9s %9s %8s %8s %8s\n", $i == 0 || $name eq $names[0] ? $steps[$i][1] : '', $name,
            fmt(settled($name, $i, 'ok')), fmt(settled($name, $i, 'refused')), fmt(settled($name, $i, 'p50_ms')),
            fmt(settled($name, $i, 'p99_ms')), fmt($lim, '%.1f');
    }
}

# the targets
print "\ntargets (adaptive):\n";
my $capacity_of = sub { $_[0] == $#steps ? $CAP / 2 : $CAP };
for my $i (1, 2, 4) {
    my $g = settled('adaptive', $i, 'ok');
    my $o = settled('static W', $i, 'ok');
    my $p99 = settled('adaptive', $i, 'p99_ms');
    my $cap = $capacity_of->($i);
    my @l = @{ $limits{adaptive} }[ $i * $step_s .. ($i + 1) * $step_s - 1 ];
    my $settle;
    for my $k (0 .. $#l) {   # the first second from which it stays within W +-30%
        if (!grep { !defined $_ || $_ !~ /^\d+$/ || $_ < 0.7 * $W || $_ > 1.3 * $W } @l[ $k .. $#l ]) {
            $settle = $k;
            last;
        }
    }
    printf "  %-14s goodput %.0f/s = %.0f%% of capacity %.0f (>= 90%%), %.0f%% of static W (>= 90%%); "
        . "p99 %.0f ms = %.1fx unloaded (<= 3x); limit within W+-30%% from second %s (<= 10)\n",
        $steps[$i][1], $g, 100 * $g / $cap, $cap, 100 * $g / ($o || 1), $p99, $p99 / $unloaded_p99,
        $settle // 'never';
}
for my $i (0, 3) {
    printf "  %-14s refused %d (0)\n", $steps[$i][1],
        eval { my $n = 0; $n += $_->{refused} for @{ $secs{adaptive} }[ $i * $step_s .. ($i + 1) * $step_s - 1 ]; $n };
}
printf "  no limit at x4: goodput %.0f/s, timeouts %.0f/s (collapse)\n", settled('no limit', 2, 'ok'),
    settled('no limit', 2, 'timeouts');

if ($csv) {
    open(my $f, '>', $csv) or die "$csv: $!";
    print $f "rule,second,step,rate,sent,ok,refused,timeouts,p50_ms,p99_ms,limit\n";
    for my $name (@names) {
        for my $s (@{ $secs{$name} }) {
            print $f join(',', $name, $s->{t}, $s->{step}, $s->{rate}, $s->{sent}, $s->{ok}, $s->{refused},
                          $s->{timeouts}, $s->{p50_ms} // '', $s->{p99_ms} // '', $limits{$name}[ $s->{t} ] // ''), "\n";
        }
    }
}

sub minority_figures {
    printf "minority: an upstream of 1,000 workers (never queues), S=%d ms log-normal (sigma 0.5), the slow "
        . "endpoint %d ms; %d s a case, the figures of its last %d s\n\n", $MEAN, $SLOW, $MINORITY_S, $MINORITY_S / 2;
    printf "%-26s %-12s %8s %10s %9s %7s %7s %10s\n", 'case', 'rule', 'fast/s', 'minority/s', 'refused/s', 'limit',
        'least', 'baseline';
    for my $case (@cases) {
        my $what = $case->[0];
        for my $name (@minority_names) {
            my $f = $minority{$what}{$name};
            printf "%-26s %-12s %8s %10s %9s %7s %7s %10s\n", $name eq $minority_names[0] ? $what : '', $name,
                fmt($f->{fast}), fmt($f->{minority}), fmt($f->{refused}),
                $name =~ /adaptive/ ? (fmt($f->{limit}, '%.1f'), fmt($f->{low}), fmt($f->{baseline}, '%.1f ms'))
                                    : ('16', '16', '-');
        }
    }
    print "\ntargets (adaptive 16 against static 16):\n";
    for my $case (@cases) {
        my $what = $case->[0];
        my ($a, $s) = ($minority{$what}{'adaptive 16'}, $minority{$what}{'static 16'});
        printf "  %-26s limit %s (mean), %s (least): %s%%, %s%% of 16 (>= 75%%); fast goodput %s%% of static (>= 90%%)\n",
            $what, fmt($a->{limit}, '%.1f'), fmt($a->{low}),
            fmt(defined $a->{limit} ? 100 * $a->{limit} / 16 : undef), fmt(defined $a->{low} ? 100 * $a->{low} / 16 : undef),
            fmt($s->{fast} ? 100 * $a->{fast} / $s->{fast} : undef);
    }
    print "\n";
}
