#!/usr/bin/perl
# Throughput and worker CPU through Debian's nginx, side by side: a static
# file served plain, with add_header sending the same bytes as ratelimit's
# default headers and no rule (the floor for a limiter with headers), behind
# limit_req, and behind ratelimit (gcra, with its default headers and with
# ratelimit_headers off), with limits high enough that nothing is rejected.
# Two workloads: one key, and a random key among 1,000,000 per request (an
# X-Key header, the key of both modules).
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
# target could be read.)  Each ratio is the median over the rounds of the
# ratios within each round; req/s is a location's median share of CPU 0.
#
# --workers 2: one nginx with two workers (CPUs 0 and 1) and wrk unpinned,
# the locations in turn: lock contention between workers (one key: every
# request takes the same zone's lock, or limit_req's); CPU time is then
# both workers'.
#
#   bench/throughput.pl [--rounds 7] [--seconds 5] [--workers 1]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use RLTest;
use RLBench qw(cpu_seconds median);
use Time::HiRes qw(time);

my ($rounds, $seconds, $workers) = (7, 5, 1);
GetOptions('rounds=i' => \$rounds, 'seconds=i' => \$seconds, 'workers=i' => \$workers)
    or die "usage: $0 [--rounds N] [--seconds N] [--workers N]\n";
die "$0: --workers 1 or 2\n" unless $workers == 1 || $workers == 2;

my @locations = ('plain', 'add_header', 'limit_req', 'ratelimit', 'ratelimit-noheaders');
my $conf = <<'EOF';
keepalive_requests 100000000;
limit_req_zone $http_x_key zone=lr:256m rate=1000000r/s;
ratelimit_zone rl 48m;
server {
    listen 127.0.0.1:%%PORT%%;
    location = /status {
        stub_status;
    }
    location /plain/ {
        alias %%PREFIX%%/html/;
    }
    location /add_header/ {
        add_header X-RateLimit-Limit 1000000 always;
        add_header X-RateLimit-Remaining 999999 always;
        add_header X-RateLimit-Reset 1 always;
        alias %%PREFIX%%/html/;
    }
    location /limit_req/ {
        limit_req zone=lr burst=1000000 nodelay;
        alias %%PREFIX%%/html/;
    }
    location /ratelimit/ {
        ratelimit zone=rl key=$http_x_key limit=1000000 period=1s burst=1000000;
        alias %%PREFIX%%/html/;
    }
    location /ratelimit-noheaders/ {
        ratelimit zone=rl key=$http_x_key limit=1000000 period=1s burst=1000000;
        ratelimit_headers off;
        alias %%PREFIX%%/html/;
    }
}
EOF

# An nginx serving every location, its workers pinned as asked.
sub instance {
    my ($n, $affinity) = @_;
    my $t = RLTest->new(quiet => 1);
    RLTest::write_file($t->prefix . '/html/f', 'x' x 100);
    $t->write_conf($conf, no_access_log => 1, workers => $n, main => "worker_cpu_affinity $affinity;");
    $t->start();
    RLTest::wait_until(sub { (my @w = $t->worker_pids) == $n }, 10);
    my @w = $t->worker_pids;
    die "expected $n workers, found " . scalar(@w) . "\n" unless @w == $n;
    return { t => $t, workers => \@w };
}

sub cpu_of {
    my ($inst) = @_;
    my $s = 0;
    $s += cpu_seconds($_) for @{ $inst->{workers} };
    return $s;
}

# Starts wrk on an instance's location; wrk_done() reads what it measured.
sub wrk_start {
    my ($inst, $loc, $script, $conns, $pin, $duration) = @_;
    my $cmd = "exec ${pin}wrk -t1 -c$conns -d" . ($duration // $seconds) . "s -s $FindBin::Bin/wrk/$script "
        . "http://127.0.0.1:${\ $inst->{t}->port}/$loc/f 2>&1";
    my $pid = open(my $fh, '-|', $cmd) or die "wrk: $!\n";
    return { fh => $fh, pid => $pid, loc => $loc, inst => $inst, cpu => cpu_of($inst) };
}

sub wrk_done {
    my ($run) = @_;
    my $out = do { local $/; readline $run->{fh} };
    close $run->{fh};
    my ($n) = $out =~ /(\d+) requests in/ or die "wrk: $out";
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/;
    my ($non2xx) = $out =~ /Non-2xx or 3xx responses: (\d+)/;
    die "wrk: /$run->{loc}/ answered $non2xx non-2xx responses\n" if $non2xx;
    return { rps => $rps, us => (cpu_of($run->{inst}) - $run->{cpu}) * 1e6 / $n };
}

# Requests an instance has served (stub_status).
sub served {
    my ($inst) = @_;
    my $r = $inst->{t}->get('/status');
    my ($n) = $r->{content} =~ /^\s*\d+\s+\d+\s+(\d+)\s*$/m or die "stub_status: $r->{content}\n";
    return $n;
}

# Each instance's location driven by its own wrk, all at once, and measured
# over the same $seconds once every wrk is sending (a wrk reading a million
# requests in first starts late): requests/s from stub_status, CPU time
# from /proc, both read at the window's two ends.
sub at_once {
    my ($inst, $locs, $script) = @_;
    my @runs = map {
        my $r = wrk_start($inst->[$_], $locs->[$_], $script, 32, 'taskset -c 1 ', $seconds + 120);
        $r->{start} = served($inst->[$_]);
        $r
    } 0 .. $#$inst;
    RLTest::wait_until(sub { !grep { served($_->{inst}) < $_->{start} + 1000 } @runs }, 100)
        or die "throughput: a wrk did not start\n";
    my $t0 = time;
    for (@runs) { $_->{n} = served($_->{inst}); $_->{cpu} = cpu_of($_->{inst}); }
    select(undef, undef, undef, $seconds);
    my $t1 = time;
    for (@runs) { $_->{n} = served($_->{inst}) - $_->{n}; $_->{cpu} = cpu_of($_->{inst}) - $_->{cpu}; }
    my %m;
    for my $run (@runs) {
        kill 'INT', $run->{pid};
        wrk_done($run);
        $m{ $run->{loc} } = { rps => $run->{n} / ($t1 - $t0), us => $run->{cpu} * 1e6 / $run->{n} };
    }
    return %m;
}

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
    my @inst = map { instance(1, '01') } @locations;
    for my $workload (@workloads) {
        my ($name, $script) = @$workload;
        for my $round (0 .. $rounds) {   # round 0 warms up: connections, caches, Lua, the keys
            my %m = at_once(\@inst, [ map { $locations[($_ + $round) % @locations] } 0 .. $#inst ], $script);
            next if $round == 0;
            record($name, \%m);
            printf STDERR "  %-15s round %d: %s\n", $name, $round,
                join(', ', map { sprintf '%s %.0f', $_, $m{$_}{rps} } @locations);
        }
    }
    $_->{t}->stop() for @inst;
} else {
    my $inst = instance(2, '01 10');
    for my $workload (@workloads) {
        my ($name, $script) = @$workload;
        wrk_done(wrk_start($inst, 'plain', $script, 64, ''));   # warm up
        for my $round (1 .. $rounds) {
            my %m;
            for my $l (@locations) {
                $m{$l} = wrk_done(wrk_start($inst, $l, $script, 64, ''));
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
printf "throughput: nginx %s, %d cores, %s, %d rounds of %d s, medians\n", $v, $cores,
    $workers == 1
    ? 'the five locations at once: 5 nginx with 1 worker each on CPU 0, 5 wrk -t1 -c32 on CPU 1'
    : 'in turn: 1 nginx with 2 workers on CPUs 0 and 1, wrk -t1 -c64 unpinned', $rounds, $seconds;
for my $name (map { $_->[0] } @workloads) {
    printf "\n%s\n  %-20s %8s %7s %13s %13s %13s   %s\n", $name, 'location', 'req/s', 'us/req', 'vs plain',
        'vs add_header', 'vs limit_req', 'req/s vs plain, each round';
    for my $l (@locations) {
        my $x = $r{$name}{$l};
        printf "  %-20s %8.0f %7.2f", $l, median(@{ $x->{rps} }), median(@{ $x->{us} });
        for my $o (qw(plain add_header limit_req)) {
            my $p = $x->{ratio}{$o};
            printf "  %5.3f/%5.3f", median(map { $_->[0] } @$p), median(map { $_->[1] } @$p);
        }
        printf "   %s\n", join(' ', map { sprintf '%.3f', $_->[0] } @{ $x->{ratio}{plain} });
    }
}
print "\n(ratios: req/s ratio / worker CPU a request ratio, each the median of the rounds' ratios;\n"
    . " add_header sends ratelimit's default headers' bytes with no rule: the floor for a limiter with headers)\n";
