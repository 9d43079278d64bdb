#!/usr/bin/perl
# Priority classes and fair shares against an overloaded upstream
# (./build.sh bench priority; about 6 minutes; not part of CI).  The
# upstream of bench/adaptive.pl (t/lib/rl_adaptive.py): W=8 workers, a
# log-normal service time of mean S=40 ms, capacity 200 requests a second;
# the same open-loop load (a 1 s client timeout), its requests of two
# classes by path: /critical/ and /best_effort/ (a map of $uri gives the
# class).  Scenarios in turn against one nginx (what a limit learned
# carries over, as in production):
#   x0.5    20% critical                (the unloaded p99 of critical)
#   x2      20% critical, 80% best effort
#   x4      the same
#   x0.5    back: refusals after its first 2 s
#   x2      critical alone above capacity (1.5x), best effort 0.5x
# side by side: a static algorithm=concurrency limit=W (no classes);
# algorithm=adaptive without classes; adaptive with classes and no queue
# (critical:50%,best_effort:10%); adaptive with classes and max_wait=100ms
# (critical,best_effort:10%).  Then fairness in one class: ten tenants by
# path, one at 10x the others' rate, 2x capacity in all, beside the nine
# alone (the flooder absent): adaptive without fair=, with fair=$tenant,
# and with fair=$tenant max_wait=100ms.  Figures of each scenario's last
# half (x0.5 back: from its third second).
#   perl bench/priority.pl [--seconds N] [--only classes|fair]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use JSON::PP ();
use RLTest;
use RLBench;

my ($secs, $only) = (12, '');
GetOptions('seconds=i' => \$secs, 'only=s' => \$only) or die "usage: $0 [--seconds N] [--only classes|fair]\n";

my ($W, $MEAN) = (8, 40);
my $CAP = 1000 * $W / $MEAN;
my ($python, $helper) = ($RLBench::python, $RLBench::helper);

my $rule = 'ratelimit zone=b key=backend_a';
my %classes = (
    'static W'         => "$rule algorithm=concurrency limit=$W;",
    'adaptive'         => "$rule algorithm=adaptive limit=64;",
    'classes'          => "$rule algorithm=adaptive limit=64 priority=\$request_class "
                          . "classes=critical:50%,best_effort:10%;",
    'classes, wait'    => "$rule algorithm=adaptive limit=64 max_wait=100ms priority=\$request_class "
                          . "classes=critical,best_effort:10%;",
);
my @class_names = ('static W', 'adaptive', 'classes', 'classes, wait');
my %fair = (
    'adaptive'         => "$rule algorithm=adaptive limit=64;",
    'fair'             => "$rule algorithm=adaptive limit=64 fair=\$tenant;",
    'fair, wait'       => "$rule algorithm=adaptive limit=64 max_wait=100ms fair=\$tenant;",
);
my @fair_names = ('adaptive', 'fair', 'fair, wait');

# [name, rate as a multiple of capacity, --mix of the critical path, seconds]
my @scenarios = (
    [ 'x0.5', 0.5, 0.2 ], [ 'x2', 2, 0.2 ], [ 'x4', 4, 0.2 ], [ 'x0.5 back', 0.5, 0.2 ],
    [ 'x2 critical 1.5x', 2, 0.75 ],
);

sub start_nginx {
    my ($t, $directives, $upport) = @_;
    RLBench::start_inflight_nginx($t, <<'EOF', $directives, $upport);
ratelimit_zone b 1m;
map $uri $request_class { ~^/critical/ critical; default best_effort; }
map $uri $tenant { ~^/t(\d+)/ $1; default none; }
EOF
}

# the load: $rate a second for $secs, each path of %mix its share of them
sub load {
    my ($t, $rate, $path, @mix) = @_;
    my $mix = join ' ', map { "--mix $_" } @mix;
    return [ map { JSON::PP::decode_json($_) }
             `$python $helper load ${\ $t->url($path)} --steps $rate:$secs $mix --timeout 1` ];
}

sub mean {
    my @v = grep { defined } @_;
    return undef unless @v;
    my $s = 0;
    $s += $_ for @v;
    return $s / @v;
}
sub fmt { defined $_[0] ? sprintf($_[1] // '%.0f', $_[0]) : '-' }

# a path's figure over seconds $from.. of a run
sub per_path {
    my ($run, $path, $field, $from) = @_;
    my @s = @$run[ $from .. $#$run ];
    return mean(map { ($_->{paths}{$path} // {})->{$field} // 0 } @s) if $field ne 'p99_ms';
    return mean(map { ($_->{paths}{$path} // {})->{p99_ms} } @s);
}

sub with_upstream {
    my ($directives, $code) = @_;
    my $t = RLTest->new;
    my ($up, $upport) = RLBench::start_upstream($t->prefix . '/up.port', $W, $MEAN);
    start_nginx($t, $directives, $upport);
    my @r = $code->($t);
    $t->stop;
    kill 'TERM', $up;
    waitpid($up, 0);
    return @r;
}

chomp(my $load = `cat /proc/loadavg`);
printf "upstream: W=%d workers, S=%d ms log-normal (sigma 0.5), capacity %d/s; %d s a scenario; "
    . "load average before: %s\n\n", $W, $MEAN, $CAP, $secs, $load;

my %res;   # config => scenario => run
if ($only ne 'fair') {
    for my $name (@class_names) {
        with_upstream($classes{$name}, sub {
            my ($t) = @_;
            for my $s (@scenarios) {
                $res{$name}{ $s->[0] } = load($t, $s->[1] * $CAP, '/best_effort/x', "/critical/x:$s->[2]");
            }
        });
    }
    my $unloaded = per_path($res{adaptive}{'x0.5'}, '/critical/x', 'p99_ms', $secs / 2);
    printf "critical's unloaded p99 (adaptive, x0.5): %s ms\n\n", fmt($unloaded);
    printf "%-18s %-14s %11s %11s %9s %11s %9s %9s\n", 'scenario', 'rule', 'critical/s', 'served %', 'p99 ms',
        'best eff./s', 'refused/s', 'goodput';
    for my $s (@scenarios) {
        my $sc = $s->[0];
        my $from = $sc eq 'x0.5 back' ? 2 : $secs / 2;
        for my $name (@class_names) {
            my $run = $res{$name}{$sc};
            my ($ok, $ref, $oth) = map { per_path($run, '/critical/x', $_, $from) } qw(ok refused other);
            my $be = per_path($run, '/best_effort/x', 'ok', $from);
            my $refused = $ref + per_path($run, '/best_effort/x', 'refused', $from);
            printf "%-18s %-14s %11s %11s %9s %11s %9s %8s%%\n", $name eq $class_names[0] ? $sc : '', $name,
                fmt($ok), fmt(100 * $ok / (($ok + $ref + $oth) || 1), '%.1f'),
                fmt(per_path($run, '/critical/x', 'p99_ms', $from)), fmt($be), fmt($refused, '%.1f'),
                fmt(100 * ($ok + $be) / $CAP);
        }
    }
    print "\n";
}

if ($only ne 'classes') {
    # ten tenants: t0 at 10x each other's rate, 2x capacity in all
    my $each = 2 * $CAP / 19;
    my @others = map { "/t$_/x" } 1 .. 9;
    my %fres;
    for my $name (@fair_names) {
        with_upstream($fair{$name}, sub {
            my ($t) = @_;
            $fres{$name}{flooded} = load($t, 2 * $CAP, '/t0/x', map { "$_:" . (1 / 19) } @others);
            $fres{$name}{alone} = load($t, 9 * $each, $others[0], map { "$_:" . (1 / 9) } @others[ 1 .. 8 ]);
        });
    }
    printf "fairness: one class, tenants t1..t9 at %.0f/s each, t0 at %.0f/s (2x capacity); alone: t1..t9 only\n\n",
        $each, 10 * $each;
    printf "%-12s %12s %12s %12s %14s %9s\n", 'rule', 'other/s', 'alone/s', 'other %', 'least other %', 't0/s';
    for my $name (@fair_names) {
        my ($f, $al) = ($fres{$name}{flooded}, $fres{$name}{alone});
        my @pct = map { 100 * per_path($f, $_, 'ok', $secs / 2) / (per_path($al, $_, "ok", $secs / 2) || 1) } @others;
        my $other = mean(map { per_path($f, $_, 'ok', $secs / 2) } @others);
        my $alone = mean(map { per_path($al, $_, 'ok', $secs / 2) } @others);
        printf "%-12s %12s %12s %12s %14s %9s\n", $name, fmt($other, '%.1f'), fmt($alone, '%.1f'),
            fmt(100 * $other / ($alone || 1), '%.0f'), fmt((sort { $a <=> $b } @pct)[0], '%.0f'),
            fmt(per_path($f, '/t0/x', 'ok', $secs / 2));
    }
}
chomp($load = `cat /proc/loadavg`);
print "\nload average after: $load\n";
