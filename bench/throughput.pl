#!/usr/bin/perl
# Throughput and worker CPU through Debian's nginx, side by side in one run:
# a static file served plain, with add_header sending the same bytes as
# ratelimit's default headers and no rule (the floor for a limiter with
# headers), behind limit_req, and behind ratelimit (gcra, with its default
# headers and with ratelimit_headers off), with limits high enough that
# nothing is rejected.  One worker pinned to CPU 0, wrk pinned to
# CPU 1.  Two workloads: one key, and a random key among 1,000,000 per
# request (an X-Key header, the key of both modules).  The locations run in
# turn A B C D, round after round; each figure is the median of the rounds.
#
#
# --workers 2: two workers (one on each CPU) and wrk unpinned, for lock
# contention between workers (one key: every request takes the same zone's
# lock, or limit_req's); CPU time is then both workers'.
#
#   bench/throughput.pl [--rounds 5] [--seconds 5] [--workers 1]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use RLTest;
use RLBench qw(cpu_seconds median);

my ($rounds, $seconds, $workers) = (5, 5, 1);
GetOptions('rounds=i' => \$rounds, 'seconds=i' => \$seconds, 'workers=i' => \$workers)
    or die "usage: $0 [--rounds N] [--seconds N] [--workers N]\n";
die "$0: --workers 1 or 2\n" unless $workers == 1 || $workers == 2;

my $t = RLTest->new(quiet => 1);
my $dir = $t->prefix;
RLTest::write_file("$dir/html/f", "x" x 100);

my $affinity = $workers == 1 ? 'worker_cpu_affinity 01;' : 'worker_cpu_affinity 01 10;';
$t->write_conf(<<'EOF', no_access_log => 1, workers => $workers, main => $affinity);
keepalive_requests 100000000;
limit_req_zone $http_x_key zone=lr:256m rate=1000000r/s;
ratelimit_zone rl 48m;
server {
    listen 127.0.0.1:%%PORT%%;
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
$t->start();
RLTest::wait_until(sub { (my @w = $t->worker_pids) == $workers }, 10);
my @workers = $t->worker_pids;
die "expected $workers workers, found " . scalar(@workers) . "\n" unless @workers == $workers;
my $pin = $workers == 1 ? 'taskset -c 1 ' : '';




sub run_wrk {
    my ($path, $script) = @_;
    my $before = 0;
    $before += cpu_seconds($_) for @workers;
    my $out = `${pin}wrk -t1 -c64 -d${seconds}s -s $FindBin::Bin/wrk/$script http://127.0.0.1:${\ $t->port}$path 2>&1`;
    my $after = 0;
    $after += cpu_seconds($_) for @workers;
    my ($n) = $out =~ /(\d+) requests in/ or die "wrk: $out";
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/;
    my ($non2xx) = $out =~ /Non-2xx or 3xx responses: (\d+)/;
    die "wrk: $path answered $non2xx non-2xx responses\n" if $non2xx;
    return ($rps, ($after - $before) * 1e6 / $n);
}


my @locations = ('plain', 'add_header', 'limit_req', 'ratelimit', 'ratelimit-noheaders');
my %r;
for my $workload ([ 'one key', 'one_key.lua' ], [ '1M random keys', 'random_keys.lua' ]) {
    my ($name, $script) = @$workload;
    run_wrk('/plain/f', $script);   # warm up: connections, caches, Lua
    for my $round (1 .. $rounds) {
        for my $loc (@locations) {
            my ($rps, $us) = run_wrk("/$loc/f", $script);
            push @{ $r{$name}{$loc}{rps} }, $rps;
            push @{ $r{$name}{$loc}{us} }, $us;
            printf STDERR "  %-15s round %d %-20s %9.0f req/s %7.2f us/req\n", $name, $round, $loc, $rps, $us;
        }
    }
}
$t->stop();

my $v = (`/usr/sbin/nginx -v 2>&1` =~ m{nginx/(\S+)})[0];
my $cores = `nproc`;
chomp $cores;
printf "throughput: nginx %s, %d cores, %s, %d rounds of %d s, medians\n", $v, $cores,
    $workers == 1 ? '1 worker on CPU 0, wrk -t1 -c64 on CPU 1' : '2 workers on CPUs 0 and 1, wrk -t1 -c64 unpinned',
    $rounds, $seconds;
for my $name ('one key', '1M random keys') {
    my %m = map { my $l = $_; ($l => { map { ($_ => median(@{ $r{$name}{$l}{$_} })) } qw(rps us) }) } @locations;
    printf "\n%s\n  %-20s %10s %9s %12s %12s %12s\n", $name, 'location', 'req/s', 'us/req', 'vs plain',
        'vs add_header', 'vs limit_req';
    for my $l (@locations) {
        printf "  %-20s %10.0f %9.2f %5.3f/%5.3f  %5.3f/%5.3f %5.3f/%5.3f\n", $l, $m{$l}{rps}, $m{$l}{us},
            (map { ($m{$l}{rps} / $m{$_}{rps}, $m{$l}{us} / $m{$_}{us}) } qw(plain add_header limit_req));
    }
}
print "\n(ratios: req/s ratio / worker CPU per request ratio; add_header sends ratelimit's default headers'\n"
    . " bytes with no rule: the floor for a limiter with headers)\n";
