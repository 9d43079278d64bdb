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
#   perl bench/adaptive.pl [--seconds-per-step N] [--csv FILE]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use POSIX ();
use Time::HiRes qw(sleep time);
use JSON::PP ();
use RLTest;

my $step_s = 15;
my $csv;
GetOptions('seconds-per-step=i' => \$step_s, 'csv=s' => \$csv) or die "usage: $0 [--seconds-per-step N] [--csv F]\n";

my $W = 8;
my $MEAN = 40;
my $CAP = 1000 * $W / $MEAN;
my $python = '/usr/bin/python3';
my $helper = "$FindBin::Bin/../t/lib/rl_adaptive.py";
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
    my ($portfile) = @_;
    unlink $portfile;
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        exec($python, $helper, 'upstream', $portfile, '--workers', $W, '--mean-ms', $MEAN, '--sigma', 0.5)
            or POSIX::_exit(127);
    }
    RLTest::wait_until(sub { -s $portfile }, 10) or die "the upstream did not start\n";
    my $port = RLTest::read_file($portfile);
    chomp $port;
    return ($pid, $port);
}

my (%secs, %limits);
for my $name (@names) {
    my $t = RLTest->new;
    $t->{quiet} = 1;
    my ($up, $upport) = start_upstream($t->prefix . '/up.port');
    $t->start(<<"EOF", workers => 1, no_access_log => 1, connections => 8192);
ratelimit_zone b 1m;
map "" \$backend_key { default backend_a; }
limit_conn_zone \$backend_key zone=c:1m;
upstream backend {
    server 127.0.0.1:$upport;
    keepalive 64;
}
server {
    listen 127.0.0.1:%%PORT%%;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location / {
        $rule{$name}
        proxy_pass http://backend;
    }
    location = /stats {
        ratelimit_stats;
    }
}
EOF
    # the limit, each second, while the load runs
    my $poller = fork() // die;
    if ($poller == 0) {
        open(my $out, '>', $t->prefix . '/limits') or die;
        my $t0 = time;
        for my $i (0 .. @steps * $step_s) {
            my $s = $t->rule_stats('b', 'adaptive_64_adaptive');
            printf $out "%d %s\n", $i, $s ? $s->{limit_now} : '-';
            sleep(($t0 + $i + 1) - time) if $t0 + $i + 1 > time;
        }
        close $out;
        POSIX::_exit(0);
    }
    my $at = 4;   # S doubles as the last step starts
    my @lines = `$python $helper load ${\ $t->url('/')} --steps $steps --timeout 1 --at-step $at:http://127.0.0.1:$upport/set?mean=${\ (2 * $MEAN)}`;
    waitpid($poller, 0);
    $secs{$name} = [ map { JSON::PP::decode_json($_) } @lines ];
    $limits{$name} = [ map { (split ' ')[1] // '-' } split /\n/, RLTest::read_file($t->prefix . '/limits') ];
    $t->stop;
    kill 'TERM', $up;
    waitpid($up, 0);
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
