#!/usr/bin/perl
# redis_sync against a local zone and the exact Redis zone, side by side in
# one run: one nginx worker, a private redis-server on loopback, the same
# fixed_window rule (never refusing) in a local zone, in a Redis zone (a
# script call a request) and in a redis_sync=100ms zone (decided locally,
# exchanged every 100 ms).  Throughput with wrk -c64 over a random key
# among 10,000 a request, the worker's CPU time a request, and the commands
# Redis ran a request (INFO commandstats around the run: EVALSHA and EVAL,
# and what the scripts called).  The locations run in turn, round after
# round; each figure is the median of the rounds.
#
#   bench/sync.pl [--rounds 3] [--seconds 5]
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
RLTest::write_file($t->prefix . '/html/f', 'x' x 100);

$t->write_conf(<<"EOF2", no_access_log => 1);
keepalive_requests 100000000;
ratelimit_zone local 16m;
ratelimit_zone exact 16m redis=127.0.0.1:$rport redis_timeout=1s;
ratelimit_zone sync 16m redis=127.0.0.1:$rport redis_timeout=1s redis_sync=100ms;
server {
    listen 127.0.0.1:%%PORT%%;
    location /local/ {
        ratelimit zone=local key=\$http_x_key algorithm=fixed_window limit=1000000000 period=10s;
        alias %%PREFIX%%/html/;
    }
    location /exact/ {
        ratelimit zone=exact key=\$http_x_key algorithm=fixed_window limit=1000000000 period=10s;
        alias %%PREFIX%%/html/;
    }
    location /sync/ {
        ratelimit zone=sync key=\$http_x_key algorithm=fixed_window limit=1000000000 period=10s;
        alias %%PREFIX%%/html/;
    }
}
EOF2
$t->start();
my ($worker) = $t->worker_pids;

# every command Redis ran so far, scripts' own calls included
sub redis_calls {
    my ($sum, $info) = (0, $redis->cmd('INFO', 'commandstats'));
    $sum += $1 while $info =~ /^cmdstat_(?!info)\w+:calls=(\d+)/mg;
    return $sum;
}

sub run_wrk {
    my ($path) = @_;
    my ($before, $calls) = (cpu_seconds($worker), redis_calls());
    my $out = `wrk -t1 -c64 -d${seconds}s -s $FindBin::Bin/wrk/random_keys.lua http://127.0.0.1:${\ $t->port}$path -- 10000 2>&1`;
    my ($after, $calls_after) = (cpu_seconds($worker), redis_calls());
    my ($n) = $out =~ /(\d+) requests in/ or die "wrk: $out";
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/ or die "wrk: $out";
    my ($non2xx) = $out =~ /Non-2xx or 3xx responses: (\d+)/;
    die "wrk: $path answered $non2xx non-2xx responses\n" if $non2xx;
    return ($rps, ($after - $before) * 1e6 / $n, ($calls_after - $calls) / $n);
}

my %r;
run_wrk("/$_/f") for 'exact', 'sync';   # warm up: connections, scripts loaded
for my $round (1 .. $rounds) {
    for my $loc ('local', 'exact', 'sync') {
        my ($rps, $us, $cmds) = run_wrk("/$loc/f");
        push @{ $r{$loc}{rps} }, $rps;
        push @{ $r{$loc}{us} }, $us;
        push @{ $r{$loc}{cmds} }, $cmds;
        printf STDERR "  round %d %-6s %8.0f req/s %6.2f us/req %.4f Redis commands/req\n", $round, $loc, $rps, $us,
            $cmds;
    }
}
$t->stop();

my $v = (`/usr/sbin/nginx -v 2>&1` =~ m{nginx/(\S+)})[0];
my $rv = (`redis-server --version` =~ /v=(\S+)/)[0];
chomp(my $cores = `nproc`);
printf "sync: nginx %s, redis %s, %d cores, 1 worker, wrk -t1 -c64, a random key of 10,000 a request, "
     . "%d rounds of %d s, medians\n", $v, $rv, $cores, $rounds, $seconds;
printf "%-7s %10s %10s %14s %10s\n", 'zone', 'req/s', 'worker us', 'Redis cmd/req', 'vs local';
my $local = median(@{ $r{local}{rps} });
for my $loc ('local', 'exact', 'sync') {
    my $rps = median(@{ $r{$loc}{rps} });
    printf "%-7s %10.0f %10.2f %14.4f %9.2fx\n", $loc, $rps, median(@{ $r{$loc}{us} }), median(@{ $r{$loc}{cmds} }),
        $rps / $local;
}
