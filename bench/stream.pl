#!/usr/bin/perl
# New TCP connections a second through nginx's stream {} proxy, side by
# side in one run, from 100,000 source addresses (127.1.0.0 + i, round
# robin):
#
#   plain       proxy_pass, no rule
#   rule        the same with a ratelimit rule per $binary_remote_addr that
#               never refuses (limit=1000000000 period=1s)
#   refused     a rule (limit=1 period=1h per address) whose every address
#               has spent its one connection: every connection refused
#               before nginx connects upstream
#   ha-accept   HAProxy (Debian's), tcp-request connection track-sc0 src and
#               reject if { sc_conn_rate(0) gt N }, N never reached
#   ha-refused  the same with N = 1 and every address spent
#
# nginx has one worker pinned to CPU 0, its error log at notice and no
# stream access log (at info, nginx logs every connection); HAProxy one
# thread on CPU 0.  The upstream is a second nginx answering "ok\n" and
# closing (stream return), one worker on CPU 1, beside the client
# (bench/connect.c, built here: 64 connections at a time, each closed by a
# reset once the peer closed).  The five run in turn, in an order that
# turns each round; each figure is the median of the rounds: connections a
# second, and the proxy's CPU time a connection (/proc/<pid>/schedstat),
# which a busy machine moves less than the rate, and the connections a
# second one CPU of the proxy would handle at that cost.
#
#   bench/stream.pl [--rounds 5] [--seconds 5] [--sources 100000]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use IO::Socket::INET;
use POSIX ();
use RLTest qw(wait_until);
use RLStream;
use RLBench qw(cpu_seconds median);

my ($rounds, $seconds, $sources) = (5, 5, 100_000);
GetOptions('rounds=i' => \$rounds, 'seconds=i' => \$seconds, 'sources=i' => \$sources)
    or die "usage: $0 [--rounds N] [--seconds N] [--sources N]\n";

my $root = "$FindBin::Bin/..";
my $connect = "$root/build/bench-connect";
system('gcc', '-O2', '-Wall', '-o', $connect, "$FindBin::Bin/connect.c") == 0 or die "$0: gcc failed\n";
-x '/usr/sbin/haproxy' or die "$0: no /usr/sbin/haproxy (apt-get install haproxy)\n";

# the upstream: "ok\n", then closed
my $up = RLTest->new(quiet => 1);
my $upp = RLTest::free_port();
$up->start('server { listen 127.0.0.1:%%PORT%%; return 204; }',
           no_access_log => 1, connections => 20000,
           main => "worker_cpu_affinity 10;\nworker_rlimit_nofile 65536;\n" . RLStream::load_lines($up)
                 . "stream {\n    server { listen 127.0.0.1:$upp backlog=4096; return \"ok\\n\"; }\n}\n");

my $t = RLTest->new(quiet => 1);
my %port = map { $_ => RLTest::free_port() } qw(plain rule refused ha-accept ha-refused);
my $stream = <<"EOF";
    ratelimit_zone s 64m;
    ratelimit_zone r 64m;
    server { listen 127.0.0.1:$port{plain} backlog=4096; proxy_pass 127.0.0.1:$upp; }
    server {
        listen 127.0.0.1:$port{rule} backlog=4096;
        ratelimit zone=s key=\$binary_remote_addr limit=1000000000 period=1s;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$port{refused} backlog=4096;
        ratelimit zone=r key=\$binary_remote_addr limit=1 period=1h;
        proxy_pass 127.0.0.1:$upp;
    }
EOF
$t->start('server { listen 127.0.0.1:%%PORT%%; return 204; }',
          no_access_log => 1, connections => 20000,
          main => "worker_cpu_affinity 01;\nworker_rlimit_nofile 65536;\n" . RLStream::main($t, $stream));
my ($worker) = $t->worker_pids;

# HAProxy: the manual's form, the source tracked, then refused over N; the
# rate over an hour, as nginx's period, so that an address spent stays so
# between its rounds
my $dir = $t->prefix;
my $stick = 'stick-table type ip size 400k expire 1h store conn_rate(1h)';
# frontend NAME refuses a source over N connections
my $frontends = join '', map { <<"EOF" } [ 'accept', 'ha-accept', 1000000000 ], [ 'refused', 'ha-refused', 1 ];
frontend $_->[0]
    bind 127.0.0.1:$port{ $_->[1] }
    $stick
    tcp-request connection track-sc0 src
    tcp-request connection reject if { sc_conn_rate(0) gt $_->[2] }
    default_backend up
EOF
RLTest::write_file("$dir/haproxy.cfg", <<"EOF");
global
    nbthread 1
    maxconn 4096
defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
${frontends}backend up
    server up 127.0.0.1:$upp
EOF
my $ha = fork() // die "fork: $!\n";
if ($ha == 0) {
    open(STDOUT, '>', "$dir/haproxy.log");
    open(STDERR, '>&', \*STDOUT);
    exec('taskset', '-c', '0', '/usr/sbin/haproxy', '-db', '-f', "$dir/haproxy.cfg") or POSIX::_exit(127);
}
END { local $?; if ($ha) { kill 'TERM', $ha; waitpid($ha, 0); } }
wait_until(sub { IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port{'ha-refused'}") }, 10)
    or die "haproxy did not start:\n" . RLTest::read_file("$dir/haproxy.log");

my %proxy = (plain => $worker, rule => $worker, refused => $worker, 'ha-accept' => $ha, 'ha-refused' => $ha);

# each server's flood goes on from the source address where its last one
# stopped
my %first = map { $_ => 0 } keys %port;

sub run {
    my ($name, $secs) = @_;
    my $cpu = cpu_seconds($proxy{$name});
    my $out = `taskset -c 1 $connect $port{$name} $secs 64 $sources $first{$name}`;
    my $used = cpu_seconds($proxy{$name}) - $cpu;
    my ($p, $r, $f, $s, $next) = $out =~ /proxied (\d+) refused (\d+) failed (\d+) seconds ([\d.]+) next (\d+)/
        or die "connect: $out";
    my $n = $p + $r;
    die "$name: no connection completed\n" unless $n;
    $first{$name} = $next;
    return { n => $n, rate => $n / $s, us => $used * 1e6 / $n, proxied => $p / $n, failed => $f };
}

# every address spends its one connection of the refusing rules: a pass
# over all of them, then a check that none is admitted any more
for my $name ('refused', 'ha-refused') {
    my ($seen, $r) = (0);
    do {
        $r = run($name, 2);
        $seen += $r->{n};
        printf STDERR "  warm-up %-10s %8.0f conn/s, %5.1f%% proxied\n", $name, $r->{rate}, 100 * $r->{proxied};
    } while ($seen < $sources || $r->{proxied} > 0) && $seen < 20 * $sources;
    die "$name: connections still proxied after the warm-up\n" if $r->{proxied} > 0;
}

my @names = ('plain', 'rule', 'refused', 'ha-accept', 'ha-refused');
my %r;
for my $round (1 .. $rounds) {
    for my $i (0 .. $#names) {
        my $name = $names[($i + $round) % @names];
        my $x = run($name, $seconds);
        push @{ $r{$name}{$_} }, $x->{$_} for qw(rate us proxied failed);
        printf STDERR "  round %d %-10s %8.0f conn/s %7.2f us/conn %5.1f%% proxied\n",
            $round, $name, $x->{rate}, $x->{us}, 100 * $x->{proxied};
    }
}
$t->stop();
$up->stop();

my %m = map { my $n = $_; $n => { map { $_ => median(@{ $r{$n}{$_} }) } qw(rate us proxied failed) } } @names;
my $v = (`/usr/sbin/nginx -v 2>&1` =~ m{nginx/(\S+)})[0];
my $hv = (`/usr/sbin/haproxy -v` =~ /version (\S+)/)[0];
chomp(my $cores = `nproc`);
printf "stream: nginx %s (1 worker, CPU 0), haproxy %s (1 thread, CPU 0), %d cores, %d sources, "
    . "64 connections at a time, %d rounds of %d s, medians\n", $v, $hv, $cores, $sources, $rounds, $seconds;
# conn/s a CPU: what the proxy's one CPU would handle, were the client not
# the bound (here it shares CPU 1 with the upstream)
printf "%-11s %10s %14s %14s %9s\n", 'server', 'conn/s', 'proxy us/conn', 'conn/s a CPU', 'proxied';
printf "%-11s %10.0f %14.2f %14.0f %8.1f%%\n", $_, $m{$_}{rate}, $m{$_}{us}, 1e6 / $m{$_}{us}, 100 * $m{$_}{proxied}
    for @names;
printf "rule / plain:           %.2fx conn/s, %.2fx CPU a connection (target: >= 0.95x conn/s)\n",
    $m{rule}{rate} / $m{plain}{rate}, $m{rule}{us} / $m{plain}{us};
printf "refused / rule:         %.2fx conn/s, %.2fx CPU a connection (target: >= 2x conn/s)\n",
    $m{refused}{rate} / $m{rule}{rate}, $m{refused}{us} / $m{rule}{us};
printf "ha-refused / ha-accept: %.2fx conn/s, %.2fx CPU a connection\n",
    $m{'ha-refused'}{rate} / $m{'ha-accept'}{rate}, $m{'ha-refused'}{us} / $m{'ha-accept'}{us};
printf "nginx / haproxy:        accepted %.2fx conn/s (%.2fx CPU), refused %.2fx conn/s (%.2fx CPU)\n",
    $m{rule}{rate} / $m{'ha-accept'}{rate}, $m{rule}{us} / $m{'ha-accept'}{us},
    $m{refused}{rate} / $m{'ha-refused'}{rate}, $m{refused}{us} / $m{'ha-refused'}{us};
