#!/usr/bin/perl
# Redis zones side by side in one run, against plain nginx and a Kong-style
# peer: one nginx worker pinned to CPU 0, a private redis-server pinned to
# CPU 1, wrk -t2 -c64 over a random key among 100,000 a request, limits that
# never refuse.  The locations: plain (no limit); the exact Redis zone with
# a gcra rule, a fixed_window rule, gcra+sliding_window+quota, and gcra with
# charge= (a second call as each request ends, not waited for); a
# Kong-style fixed window in Lua (Debian's lua module: INCRBY and PEXPIRE
# pipelined on a pooled cosocket, bench/lua/kong_style.lua); a
# redis_sync=100ms zone (fixed_window, the default redis_timeout).  The
# locations run in turn, in one order then the other, round after round;
# each figure is the median of the rounds: requests/s, the worker's CPU time
# a request, Redis's commands and CPU time a request and a decision (INFO
# commandstats around the run: the FCALL's or the script's usec a call, its
# commands' inside), and the redis_sync zone's units dropped (its stats, 2 s
# after the run).  Then: exactness (limit 100 across two nginx servers
# sharing the Redis, 130 requests one at a time and 30 at once: the exact
# zone and the Kong-style peer); the Redis commands a request of one key
# runs, for stacks of rules (a figure that depends on nothing but the
# script); Redis's memory per key.
#
#   bench/redis.pl [--rounds 3] [--seconds 10] [--keys 100000]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use RLTest;
use RLBench qw(cpu_seconds median);
use RLRedis;

my ($rounds, $seconds, $nkeys) = (3, 10, 100_000);
GetOptions('rounds=i' => \$rounds, 'seconds=i' => \$seconds, 'keys=i' => \$nkeys)
    or die "usage: $0 [--rounds N] [--seconds N] [--keys N]\n";

my $modules = '/usr/lib/nginx/modules';
-e "$modules/ngx_http_lua_module.so"
    or die "the Kong-style peer needs Debian's libnginx-mod-http-lua (./build.sh bench redis installs it)\n";

my $redis = RLRedis->new->start;
my $rport = $redis->port;
system("taskset -a -p 2 $redis->{pid} >/dev/null") == 0 or die "taskset: cannot pin redis-server to CPU 1\n";
my $t = RLTest->new(quiet => 1);
my $dir = $t->prefix;
RLTest::write_file("$dir/html/f", "x" x 100);
my $kong = RLTest::read_file("$FindBin::Bin/lua/kong_style.lua");

my $never = 'limit=1000000000';   # never refuses
$t->write_conf(<<"EOF", no_access_log => 1, main => <<"MAIN");
keepalive_requests 100000000;
lua_socket_pool_size 64;
ratelimit_zone exact 16m redis=127.0.0.1:$rport redis_timeout=1s;
ratelimit_zone sync 16m redis=127.0.0.1:$rport redis_sync=100ms redis_prefix=sync:;
server {
    listen 127.0.0.1:%%PORT%%;
    location /plain/ { alias %%PREFIX%%/html/; }
    location /gcra/ {
        ratelimit zone=exact key=\$http_x_key $never period=1s;
        alias %%PREFIX%%/html/;
    }
    location /fixed_window/ {
        ratelimit zone=exact key=\$http_x_key algorithm=fixed_window $never period=10s;
        alias %%PREFIX%%/html/;
    }
    location /stack3/ {
        ratelimit zone=exact key=\$http_x_key $never period=1s name=s_gcra;
        ratelimit zone=exact key=\$http_x_key algorithm=sliding_window limit=100000000 period=1h name=s_window;
        ratelimit zone=exact key=\$http_x_key algorithm=quota limit=100000000 reset=daily name=s_quota;
        alias %%PREFIX%%/html/;
    }
    location /charged/ {
        ratelimit zone=exact key=\$http_x_key $never period=1s charge=1 name=charged;
        alias %%PREFIX%%/html/;
    }
    location /kong/ {
        set \$redis_port $rport;
        set \$limit 1000000000;
        access_by_lua_block {
$kong
        }
        alias %%PREFIX%%/html/;
    }
    location /sync/ {
        ratelimit zone=sync key=\$http_x_key algorithm=fixed_window $never period=10s;
        alias %%PREFIX%%/html/;
    }
    location /memory/ {
        ratelimit zone=exact key=\$http_x_key limit=100 period=1h name=memory;
        alias %%PREFIX%%/html/;
    }
    location /stack1/ {
        ratelimit zone=exact key=\$http_x_key limit=1000000 period=1s;
        alias %%PREFIX%%/html/;
    }
    location /stack2/ {
        ratelimit zone=exact key=\$http_x_key limit=1000000 period=1s;
        ratelimit zone=exact key=\$http_x_key limit=60000000 period=1m;
        alias %%PREFIX%%/html/;
    }
    location /stack4/ {
        ratelimit zone=exact key=\$http_x_key limit=1000000 period=1s charge=1 name=stack4_gcra;
        ratelimit zone=exact key=\$http_x_key algorithm=sliding_window limit=100000000 period=1h charge=1 name=stack4_window;
        alias %%PREFIX%%/html/;
    }
    location = /stats { ratelimit_stats; }
}
EOF
load_module $modules/ndk_http_module.so;
load_module $modules/ngx_http_lua_module.so;
worker_cpu_affinity 01;
MAIN
$t->start();
my ($worker) = $t->worker_pids;
my $load_before = (split ' ', RLTest::read_file('/proc/loadavg'))[0];

# INFO commandstats: each command's calls and usec
sub commandstats {
    my %c;
    my $info = $redis->cmd('INFO', 'commandstats');
    while ($info =~ /^cmdstat_([\w|]+):calls=(\d+),usec=(\d+)/mg) {
        $c{$1} = [ $2, $3 ];
    }
    delete $c{info};
    return %c;
}

# what Redis ran between two commandstats: {command => [calls, usec]}
sub ran {
    my ($before, $after) = @_;
    my %d;
    for my $cmd (keys %$after) {
        my ($c, $u) = @{ $after->{$cmd} };
        my ($c0, $u0) = @{ $before->{$cmd} // [ 0, 0 ] };
        $d{$cmd} = [ $c - $c0, $u - $u0 ] if $c > $c0;
    }
    return \%d;
}

sub sync_figures { $t->zone_stats('sync')->{sync} }

# one location for $seconds: requests/s, worker us a request, Redis's
# commands and us a request, its decision's us (the script's call, its
# commands inside it), and for the sync zone its units dropped and sent
sub run_wrk {
    my ($loc) = @_;
    my %before = commandstats();
    my $sync = $loc eq 'sync' ? sync_figures() : undef;
    my $cpu = cpu_seconds($worker);
    my $out = `wrk -t2 -c64 -d${seconds}s -s $FindBin::Bin/wrk/random_keys.lua http://127.0.0.1:${\ $t->port}/$loc/f -- $nkeys 2>&1`;
    my $cpu_after = cpu_seconds($worker);
    sleep($loc eq 'sync' ? 2 : 0.5);   # the exchanges, the charges, end
    my $ran = ran(\%before, { commandstats() });
    my ($n) = $out =~ /(\d+) requests in/ or die "wrk: $out";
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/ or die "wrk: $out";
    my ($non2xx) = $out =~ /Non-2xx or 3xx responses: (\d+)/;
    die "wrk: $loc answered $non2xx non-2xx responses\n" if $non2xx;
    my ($calls, $usec, $decisions, $decision_usec) = (0, 0, 0, 0);
    for my $cmd (keys %$ran) {
        $calls += $ran->{$cmd}[0];
        $usec += $ran->{$cmd}[1];
        # a decision: the library's call (FCALL) or the script's, which
        # holds the commands it runs; the Kong-style peer's two commands
        if ($cmd =~ /^(fcall|evalsha|eval)$/) {
            $decisions += $ran->{$cmd}[0];
            $decision_usec += $ran->{$cmd}[1];
        }
    }
    # a call decides one request, or a batch of them: the script's time a
    # decision is its time over the requests (charged: two calls each, the
    # decision and its charge)
    my $per = $loc eq 'charged' ? 2 : 1;
    my %r = (rps => $rps, us => ($cpu_after - $cpu) * 1e6 / $n, cmds => $calls / $n, redis_us => $usec / $n,
             decision_us => !$decisions ? 0 : $loc eq 'sync' ? $decision_usec / $decisions : $decision_usec / ($n * $per),
             batch => $decisions ? $n * $per / $decisions : 0, ran => $ran, requests => $n);
    if ($sync) {
        my $s = sync_figures();
        $r{dropped} = $s->{dropped} - $sync->{dropped};
        $r{units} = $s->{units} - $sync->{units};
        $r{failures} = $s->{failures} - $sync->{failures};
    }
    return \%r;
}

my @locations = qw(plain gcra fixed_window stack3 charged kong sync);
my %r;
run_wrk($_) for 'gcra', 'stack3', 'kong';   # warm up: connections, the library loaded
for my $round (1 .. $rounds) {
    for my $loc ($round % 2 ? @locations : reverse @locations) {
        my $x = run_wrk($loc);
        push @{ $r{$loc}{$_} }, $x->{$_} for grep { !ref $x->{$_} } keys %$x;
        printf STDERR "  round %d %-12s %8.0f req/s %6.2f us/req  Redis: %.2f commands %.2f us a request, "
            . "%.2f us a decision (%.1f a call)%s\n", $round, $loc, @$x{qw(rps us cmds redis_us decision_us batch)},
            $loc eq 'sync' ? sprintf(', %d of %d units dropped', $x->{dropped}, $x->{units} + $x->{dropped}) : '';
    }
}
my $fallbacks = $t->zone_stats('exact')->{redis}{fallbacks};

# ---- the Redis commands a request of one key runs (INFO commandstats
# around 100 requests, one at a time) ----
my %commands;
# (charge=: a second call as each request ends, not waited for: counted
# once all 100 have come)
my %calls = (charged => 2, stack4 => 2);
sub script_runs { my %c = @_; my $n = 0; $n += ($c{$_} // [0])->[0] for qw(fcall evalsha eval); $n }
sub commandstats_after {
    my ($loc, $since, $more) = @_;
    my %c;
    RLTest::wait_until(sub { %c = commandstats(); script_runs(%c) - script_runs(%$since) >= $more }, 10)
        or die "$loc: the script ran " . (script_runs(%c) - script_runs(%$since)) . " times, not $more\n";
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
    my $ran = ran(\%before, \%after);
    $commands{$loc} = { map { $_ => $ran->{$_}[0] / 100 } keys %$ran };
}

# ---- memory: keys that stay (100 an hour), one request each for most of them
$redis->cmd('FLUSHALL');
my ($empty) = $redis->cmd('INFO', 'memory') =~ /used_memory:(\d+)/;
`wrk -t2 -c64 -d${seconds}s -s $FindBin::Bin/wrk/random_keys.lua http://127.0.0.1:${\ $t->port}/memory/f 2>&1`;
my $keys = $redis->cmd('DBSIZE');
my ($used) = $redis->cmd('INFO', 'memory') =~ /used_memory:(\d+)/;
my $usage = $redis->cmd('MEMORY', 'USAGE', $redis->cmd('RANDOMKEY'));
$t->stop();

# ---- exactness: limit 100 across two nginx servers sharing the Redis ----
my @fleet = map { RLTest->new(quiet => 1) } 1 .. 2;
for my $s (@fleet) {
    RLTest::write_file($s->prefix . '/html/f', 'x');
    $s->write_conf(<<"EOF", no_access_log => 1, workers => 2, main => <<"MAIN");
ratelimit_zone exact 1m redis=127.0.0.1:$rport redis_timeout=5s;
server {
    listen 127.0.0.1:%%PORT%%;
    location /gcra/ { ratelimit zone=exact key=\$http_x_key limit=100 period=1h; alias %%PREFIX%%/html/; }
    location /kong/ {
        set \$redis_port $rport;
        set \$limit 100;
        access_by_lua_block {
$kong
        }
        alias %%PREFIX%%/html/;
    }
}
EOF
load_module $modules/ndk_http_module.so;
load_module $modules/ngx_http_lua_module.so;
MAIN
    $s->start();
}
my %exact;
for my $loc ('gcra', 'kong') {
    my @s = map { $fleet[ $_ % 2 ]->get("/$loc/f", { 'X-Key' => "seq-$loc" })->{status} } 1 .. 130;
    $exact{$loc}{sequential} = grep { $_ == 200 } @s;
    ($exact{$loc}{at_once}) = RLTest::burst(ports => [ map { $_->port } @fleet ], path => "/$loc/f",
                                            key => "burst-$loc", total => 130, conns => 30);
}
$_->stop for @fleet;
my $load_after = (split ' ', RLTest::read_file('/proc/loadavg'))[0];

# ---- the figures ----
my $v = (`/usr/sbin/nginx -v 2>&1` =~ m{nginx/(\S+)})[0];
my $rv = (`redis-server --version` =~ /v=(\S+)/)[0];
chomp(my $cores = `nproc`);
my $cpu = (RLTest::read_file('/proc/cpuinfo') =~ /^model name\s*:\s*(.*)$/m)[0] // '?';
printf "redis: nginx %s (1 worker, CPU 0), redis %s (CPU 1), %d cores (%s), wrk -t2 -c64, a random key of %d, "
     . "%d rounds of %d s, medians; load average %.2f before, %.2f after\n", $v, $rv, $cores, $cpu, $nkeys, $rounds,
     $seconds, $load_before, $load_after;
my %name = (plain => 'plain', gcra => 'exact Redis zone, gcra', fixed_window => 'the same, fixed_window',
            stack3 => 'the same, gcra+sliding_window+quota', charged => 'the same, gcra charge=',
            kong => 'Kong-style fixed window in Lua', sync => 'redis_sync=100ms, fixed_window');
my $plain = median(@{ $r{plain}{rps} });
printf "%-38s %10s %8s %10s %14s %13s %14s %12s\n", 'location', 'req/s', 'x plain', 'worker us', 'Redis cmd/req',
    'Redis us/req', 'us a decision', 'a call';
for my $loc (@locations) {
    my $m = { map { $_ => median(@{ $r{$loc}{$_} }) } keys %{ $r{$loc} } };
    printf "%-38s %10.0f %8.2f %10.2f %14.2f %13.2f %14s %12s\n", $name{$loc}, $m->{rps}, $m->{rps} / $plain, $m->{us},
        $m->{cmds}, $m->{redis_us}, $m->{decision_us} ? sprintf('%.2f', $m->{decision_us}) : '-',
        $m->{batch} && $loc ne 'sync' ? sprintf('%.1f', $m->{batch}) : '-';
}
my $k = median(@{ $r{kong}{rps} });
printf "exact Redis zone over the Kong-style peer, requests/s: gcra %.2fx, fixed_window %.2fx\n",
    median(@{ $r{gcra}{rps} }) / $k, median(@{ $r{fixed_window}{rps} }) / $k;
printf "Redis us a request over the Kong-style peer's: gcra %.2fx\n",
    median(@{ $r{gcra}{redis_us} }) / median(@{ $r{kong}{redis_us} });
printf "redis_sync=100ms, default settings: %s units dropped (each round) of %s, %s calls failed\n",
    join(' ', @{ $r{sync}{dropped} }), join(' ', map { $r{sync}{units}[$_] + $r{sync}{dropped}[$_] } 0 .. $rounds - 1),
    join(' ', @{ $r{sync}{failures} });
printf "exact zone: %d requests decided by on_redis_error\n", $fallbacks;
for my $loc ('gcra', 'kong') {
    printf "exactness, limit 100 across two servers, %s: %d admitted of 130 one at a time, %d of 130 30 at once\n",
        $loc eq 'gcra' ? 'exact Redis zone' : 'Kong-style peer', $exact{$loc}{sequential}, $exact{$loc}{at_once};
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
