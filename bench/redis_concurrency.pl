#!/usr/bin/perl
# A concurrency rule on a Redis zone against a rate rule on the same zone,
# side by side in one run: one nginx worker, a private redis-server on
# loopback, a gcra rule and a concurrency rule (a lease taken in the
# request's script call, released by a second call as it ends, not waited
# for), each in its own location of one Redis zone, limits high enough that
# nothing is refused.  Requests/s with wrk -c64, the worker's CPU time a
# request (/proc/<pid>/stat around the run), and the Redis commands a
# request costs (INFO commandstats around the run: the script calls and
# the commands they run), for one key and for a random key among
# 1,000,000.  The locations run in turn, round after round; each figure is
# the median of the rounds.
#
#   bench/redis_concurrency.pl [--rounds 3] [--seconds 5]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use RLTest;
use RLBench qw(cpu_seconds median);
use RLRedis;

my ($rounds, $seconds) = (3, 5);
GetOptions('rounds=i' => \$rounds, 'seconds=i' => \$seconds) or die "usage: $0 [--rounds N] [--seconds N]\n";

my $redis = RLRedis->new->start;
my $rport = $redis->port;
my $t = RLTest->new(quiet => 1);
my $dir = $t->prefix;
RLTest::write_file("$dir/html/f", "x" x 100);

$t->write_conf(<<"EOF", no_access_log => 1);
keepalive_requests 100000000;
ratelimit_zone fleet 1m redis=127.0.0.1:$rport redis_timeout=1s;
server {
    listen 127.0.0.1:%%PORT%%;
    location /rate/ {
        ratelimit zone=fleet key=\$http_x_key limit=1000000 period=1s burst=1000000 name=rate;
        alias %%PREFIX%%/html/;
    }
    location /inflight/ {
        ratelimit zone=fleet key=\$http_x_key algorithm=concurrency limit=4096 name=inflight;
        alias %%PREFIX%%/html/;
    }
}
EOF
$t->start();
my ($worker) = $t->worker_pids;

# every command Redis executed, scripts' own included
sub commands {
    my $info = $redis->cmd('INFO', 'commandstats');
    my $total = 0;
    $total += $1 while $info =~ /^cmdstat_(?!info\b)\w+:calls=(\d+)/mg;
    return $total;
}

sub run_wrk {
    my ($path, $script) = @_;
    my $before = cpu_seconds($worker);
    my $cmds = commands();
    my $out = `wrk -t1 -c64 -d${seconds}s -s $FindBin::Bin/wrk/$script http://127.0.0.1:${\ $t->port}$path 2>&1`;
    my $after = cpu_seconds($worker);
    sleep 0.2;   # the last releases
    my $ran = commands() - $cmds;
    my ($n) = $out =~ /(\d+) requests in/ or die "wrk: $out";
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/ or die "wrk: $out";
    my ($non2xx) = $out =~ /Non-2xx or 3xx responses: (\d+)/;
    die "wrk: $path answered $non2xx non-2xx responses\n" if $non2xx;
    return ($rps, ($after - $before) * 1e6 / $n, $ran / $n);
}

my %r;
for my $workload ([ 'one key', 'one_key.lua' ], [ '1M random keys', 'random_keys.lua' ]) {
    my ($name, $script) = @$workload;
    run_wrk('/rate/f', $script);   # warm up: connections, script loaded
    for my $round (1 .. $rounds) {
        for my $loc ('rate', 'inflight') {
            my ($rps, $us, $cmds) = run_wrk("/$loc/f", $script);
            push @{ $r{$name}{$loc}{rps} }, $rps;
            push @{ $r{$name}{$loc}{us} }, $us;
            push @{ $r{$name}{$loc}{cmds} }, $cmds;
            printf STDERR "  %-15s round %d %-8s %8.0f req/s %6.2f us/req %5.2f Redis commands/req\n",
                $name, $round, $loc, $rps, $us, $cmds;
        }
    }
}
$t->stop();

my $v = (`/usr/sbin/nginx -v 2>&1` =~ m{nginx/(\S+)})[0];
my $rv = (`redis-server --version` =~ /v=(\S+)/)[0];
chomp(my $cores = `nproc`);
printf "redis_concurrency: nginx %s, redis %s, %d cores, 1 worker, wrk -t1 -c64, %d rounds of %d s, medians\n",
    $v, $rv, $cores, $rounds, $seconds;
printf "%-15s %-9s %10s %10s %16s\n", 'workload', 'rule', 'req/s', 'worker us', 'Redis cmds/req';
for my $name ('one key', '1M random keys') {
    for my $loc ('rate', 'inflight') {
        printf "%-15s %-9s %10.0f %10.2f %16.2f\n", $name, $loc, map { median(@{ $r{$name}{$loc}{$_} }) } qw(rps us cmds);
    }
    my ($a, $b) = map { $r{$name}{$_} } 'rate', 'inflight';
    printf "%-15s concurrency/rate: %.2fx req/s, %.2fx worker CPU a request, %+.2f Redis commands a request\n", $name,
        median(@{ $b->{rps} }) / median(@{ $a->{rps} }), median(@{ $b->{us} }) / median(@{ $a->{us} }),
        median(@{ $b->{cmds} }) - median(@{ $a->{cmds} });
}
