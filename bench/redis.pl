#!/usr/bin/perl
# Redis against the local zone, side by side in one run: one nginx worker,
# a private redis-server on loopback, the same gcra rule in a local zone and
# in a Redis zone, and in the Redis zone with charge= (a second script call
# as each request ends, not waited for).  Throughput with wrk -c64 (requests/s), and the latency a
# request sees with one connection (wrk -c1 --latency: p50, p99), and the
# worker's CPU time a request (/proc/<pid>/stat around the -c64 run), for one
# key and for a random key among 1,000,000.  The locations run in turn,
# round after round; each figure is the median of the rounds.  Then Redis's
# memory per key: a rule of 100 an hour, random keys for one run.  Then the
# Redis commands a request of one key runs (INFO commandstats around 100
# requests, one at a time: the script call, the clock it reads and each
# command the script runs), for one gcra rule and for stacks of rules on
# the key (gcra+gcra, gcra+sliding_window+quota), and with charge= (one
# rule, and gcra+sliding_window) the call that settles each request as it
# ends counted in: a figure that depends on nothing but the script.
#
#   bench/redis.pl [--rounds 3] [--seconds 5]
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
ratelimit_zone local 48m;
ratelimit_zone fleet 1m redis=127.0.0.1:$rport redis_timeout=1s;
server {
    listen 127.0.0.1:%%PORT%%;
    location /local/ {
        ratelimit zone=local key=\$http_x_key limit=1000000 period=1s burst=1000000;
        alias %%PREFIX%%/html/;
    }
    location /redis/ {
        ratelimit zone=fleet key=\$http_x_key limit=1000000 period=1s burst=1000000;
        alias %%PREFIX%%/html/;
    }
    location /charged/ {
        ratelimit zone=fleet key=\$http_x_key limit=1000000 period=1s burst=1000000 charge=1 name=charged;
        alias %%PREFIX%%/html/;
    }
    location /stack1/ {
        ratelimit zone=fleet key=\$http_x_key limit=1000000 period=1s;
        alias %%PREFIX%%/html/;
    }
    location /stack2/ {
        ratelimit zone=fleet key=\$http_x_key limit=1000000 period=1s;
        ratelimit zone=fleet key=\$http_x_key limit=60000000 period=1m;
        alias %%PREFIX%%/html/;
    }
    location /stack3/ {
        ratelimit zone=fleet key=\$http_x_key limit=1000000 period=1s;
        ratelimit zone=fleet key=\$http_x_key algorithm=sliding_window limit=100000000 period=1h;
        ratelimit zone=fleet key=\$http_x_key algorithm=quota limit=100000000 reset=daily;
        alias %%PREFIX%%/html/;
    }
    location /stack4/ {
        ratelimit zone=fleet key=\$http_x_key limit=1000000 period=1s charge=1 name=stack4_gcra;
        ratelimit zone=fleet key=\$http_x_key algorithm=sliding_window limit=100000000 period=1h charge=1 name=stack4_window;
        alias %%PREFIX%%/html/;
    }
    location /memory/ {
        ratelimit zone=fleet key=\$http_x_key limit=100 period=1h name=memory;
        alias %%PREFIX%%/html/;
    }
}
EOF
$t->start();
my ($worker) = $t->worker_pids;



sub ms {
    my ($v, $unit) = @_;
    return $unit eq 'us' ? $v / 1000 : $unit eq 's' ? $v * 1000 : $v;
}

sub run_wrk {
    my ($path, $script, $conns) = @_;
    my $before = cpu_seconds($worker);
    my $out = `wrk -t1 -c$conns -d${seconds}s --latency -s $FindBin::Bin/wrk/$script http://127.0.0.1:${\ $t->port}$path 2>&1`;
    my $after = cpu_seconds($worker);
    my ($n) = $out =~ /(\d+) requests in/ or die "wrk: $out";
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/ or die "wrk: $out";
    my ($non2xx) = $out =~ /Non-2xx or 3xx responses: (\d+)/;
    die "wrk: $path answered $non2xx non-2xx responses\n" if $non2xx;
    my ($p50, $u50) = $out =~ /^\s+50%\s+([\d.]+)(us|ms|s)$/m;
    my ($p99, $u99) = $out =~ /^\s+99%\s+([\d.]+)(us|ms|s)$/m;
    return ($rps, ms($p50, $u50), ms($p99, $u99), ($after - $before) * 1e6 / $n);
}


my %r;
for my $workload ([ 'one key', 'one_key.lua' ], [ '1M random keys', 'random_keys.lua' ]) {
    my ($name, $script) = @$workload;
    run_wrk('/redis/f', $script, 64);   # warm up: connections, script loaded
    for my $round (1 .. $rounds) {
        for my $loc ('local', 'redis', 'charged') {
            my ($rps, undef, undef, $us) = run_wrk("/$loc/f", $script, 64);
            my (undef, $p50, $p99) = run_wrk("/$loc/f", $script, 1);
            push @{ $r{$name}{$loc}{rps} }, $rps;
            push @{ $r{$name}{$loc}{us} }, $us;
            push @{ $r{$name}{$loc}{p50} }, $p50;
            push @{ $r{$name}{$loc}{p99} }, $p99;
            printf STDERR "  %-15s round %d %-7s %8.0f req/s %6.2f us/req  p50 %.3f ms  p99 %.3f ms\n",
                $name, $round, $loc, $rps, $us, $p50, $p99;
        }
    }
}

# memory: keys that stay (100 an hour), one request each for most of them
$redis->cmd('FLUSHALL');
my ($empty) = $redis->cmd('INFO', 'memory') =~ /used_memory:(\d+)/;
run_wrk('/memory/f', 'random_keys.lua', 64);
my $keys = $redis->cmd('DBSIZE');
my ($used) = $redis->cmd('INFO', 'memory') =~ /used_memory:(\d+)/;
my $sample = $redis->cmd('RANDOMKEY');
my $usage = $redis->cmd('MEMORY', 'USAGE', $sample);

# Redis commands a request, by command, for one key's requests
sub commandstats {
    my %c;
    my $info = $redis->cmd('INFO', 'commandstats');
    $c{$1} = $2 while $info =~ /^cmdstat_(\w+):calls=(\d+)/mg;
    delete $c{info};
    return %c;
}
my %commands;
# (charge=: a second call as each request ends, not waited for: counted
# once all 100 have come)
my %calls = (charged => 2, stack4 => 2);
# the counts once the script has run `more` times since `since`
sub commandstats_after {
    my ($loc, $since, $more) = @_;
    my %c;
    RLTest::wait_until(sub { %c = commandstats(); ($c{evalsha} // 0) - ($since->{evalsha} // 0) >= $more }, 10)
        or die "$loc: the script ran " . (($c{evalsha} // 0) - ($since->{evalsha} // 0)) . " times, not $more\n";
    return %c;
}
for my $loc ('stack1', 'stack2', 'stack3', 'charged', 'stack4') {
    my $calls = $calls{$loc} // 1;
    my %start = commandstats();
    $t->get("/$loc/f", { 'X-Key' => "warm-$loc" });   # its first call
    my %before = commandstats_after($loc, \%start, $calls);
    for (1 .. 100) {
        my $res = $t->get("/$loc/f", { 'X-Key' => "stack-$loc" });
        die "$loc: answered $res->{status}\n" unless $res->{status} == 200;
    }
    my %after = commandstats_after($loc, \%before, 100 * $calls);
    $commands{$loc} = { map { $_ => (($after{$_} // 0) - ($before{$_} // 0)) / 100 } keys %after };
}
$t->stop();

my $v = (`/usr/sbin/nginx -v 2>&1` =~ m{nginx/(\S+)})[0];
my $rv = (`redis-server --version` =~ /v=(\S+)/)[0];
chomp(my $cores = `nproc`);
printf "redis: nginx %s, redis %s, %d cores, 1 worker, wrk -t1 (-c64 for req/s, -c1 for latency), "
     . "%d rounds of %d s, medians\n", $v, $rv, $cores, $rounds, $seconds;
printf "%-15s %-7s %10s %10s %10s %10s\n", 'workload', 'zone', 'req/s', 'worker us', 'p50 ms', 'p99 ms';
for my $name ('one key', '1M random keys') {
    for my $loc ('local', 'redis', 'charged') {
        printf "%-15s %-7s %10.0f %10.2f %10.3f %10.3f\n", $name, $loc,
            map { median(@{ $r{$name}{$loc}{$_} }) } qw(rps us p50 p99);
    }
    my ($l, $rd) = map { $r{$name}{$_} } 'local', 'redis';
    printf "%-15s redis/local: %.2fx req/s, %.2fx worker CPU a request, +%.3f ms p50, +%.3f ms p99\n", $name,
        median(@{ $rd->{rps} }) / median(@{ $l->{rps} }), median(@{ $rd->{us} }) / median(@{ $l->{us} }),
        median(@{ $rd->{p50} }) - median(@{ $l->{p50} }), median(@{ $rd->{p99} }) - median(@{ $l->{p99} });
    my $c = $r{$name}{charged};
    printf "%-15s charged/redis: %.2fx req/s, %.2fx worker CPU a request, %+.3f ms p50, %+.3f ms p99\n", $name,
        median(@{ $c->{rps} }) / median(@{ $rd->{rps} }), median(@{ $c->{us} }) / median(@{ $rd->{us} }),
        median(@{ $c->{p50} }) - median(@{ $rd->{p50} }), median(@{ $c->{p99} }) - median(@{ $rd->{p99} });
}
my %stack_name = (stack1 => 'gcra', stack2 => 'gcra+gcra', stack3 => 'gcra+sliding_window+quota',
                  charged => 'gcra charge= (with its settling call)',
                  stack4 => 'gcra+sliding_window charge= (with its settling call)');
for my $loc ('stack1', 'stack2', 'stack3', 'charged', 'stack4') {
    my $c = $commands{$loc};
    my $total = 0;
    $total += $_ for values %$c;
    printf "redis commands a request, one key, %s: %.2f (%s)\n", $stack_name{$loc}, $total,
        join(', ', map { sprintf '%s %.2f', $_, $c->{$_} } grep { $c->{$_} } sort keys %$c);
}
printf "redis memory: %d keys, %.1f bytes a key (used_memory %d - %d empty); MEMORY USAGE of one key: %d bytes\n",
    $keys, ($used - $empty) / ($keys || 1), $used, $empty, $usage;
