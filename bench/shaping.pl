#!/usr/bin/perl
# Shaping at scale: 10,000 requests delayed at once by a leaky_bucket rule
# (one a second, so their delays run from 0 to ~3 hours), on one worker
# pinned to CPU 0.  Shows the worker's memory with them waiting (and that it
# stays flat while they wait), that another location is still served at
# full speed meanwhile, and that clients leaving give their slots back.
#
#   bench/shaping.pl [--requests 10000]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib";
use Getopt::Long;
use IO::Socket::INET;
use Time::HiRes qw(time sleep);
use RLTest;

my $n = 10000;
GetOptions('requests=i' => \$n) or die "usage: $0 [--requests N]\n";

my $t = RLTest->new(quiet => 1);
my $main = "worker_cpu_affinity 01;\nworker_rlimit_nofile 19000;";
$t->write_conf(<<'EOF', no_access_log => 1, log_level => 'error', main => $main, connections => 12000);
keepalive_requests 100000000;
ratelimit_zone z 1m;
ratelimit_log_level info;
server {
    listen 127.0.0.1:%%PORT%% backlog=65535;
    location /shape/ {
        ratelimit zone=z key=one algorithm=leaky_bucket limit=1 period=1s max_delay=1d;
        alias %%PREFIX%%/html/;
    }
    location /plain/ {
        alias %%PREFIX%%/html/;
    }
    location = /status {
        stub_status;
    }
}
EOF
RLTest::write_file($t->prefix . '/html/f', 'x' x 100);
$t->start();
my ($worker) = $t->worker_pids;
my $port = $t->port;

sub rss_kb { (RLTest::read_file("/proc/$worker/status") =~ /VmRSS:\s+(\d+)/)[0] }
sub active { ($t->get('/status')->{content} =~ /Active connections: (\d+)/)[0] // 0 }

# the median of three 4-second runs
sub plain_rps {
    my @r;
    for (1 .. 3) {
        my $out = `taskset -c 1 wrk -t1 -c64 -d4s http://127.0.0.1:$port/plain/f 2>&1`;
        push @r, ($out =~ /Requests\/sec:\s+([\d.]+)/)[0] // die "wrk: $out";
    }
    return (sort { $a <=> $b } @r)[1];
}

my $rss0 = rss_kb();
my $rps0 = plain_rps();

# n clients, each with one request that the shaper delays
my @socks;
for my $i (1 .. $n) {
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") or die "connect #$i: $!";
    print $s "GET /shape/f HTTP/1.1\r\nHost: s\r\n\r\n";
    push @socks, $s;
}
RLTest::wait_until(sub { active() >= $n }, 60) or die "only " . active() . " connections active\n";
sleep 1;
my $rss1 = rss_kb();
my $rps1 = plain_rps();   # 12 s of traffic elsewhere while they wait
sleep 1;
my $rss2 = rss_kb();
my $open = active() - 1;

# the clients leave, newest first: each gives its slot back
close($_) for reverse @socks;
RLTest::wait_until(sub { active() <= 1 }, 60);
my $start = time;
my $r = $t->get('/shape/f');
my $wait = time - $start;
my $rss3 = rss_kb();
$t->stop();

printf "shaping: %d requests delayed at once by leaky_bucket limit=1 period=1s (delays 0 to %d s), one worker\n",
    $n, $n - 1;
printf "  worker RSS: %d kB before, %d kB with them delayed (+%.1f kB a request), %d kB 13 s later (%+d kB), "
    . "%d kB after they left\n", $rss0, $rss1, ($rss1 - $rss0) / $n, $rss2, $rss2 - $rss1, $rss3;
printf "  another location meanwhile: %.0f req/s (%.0f req/s with none delayed: %.3fx)\n", $rps1, $rps0, $rps1 / $rps0;
printf "  %d client connections still open 13 s later; once they left, newest first, a new request waited %.2f s "
    . "(status %d): the slots were given back\n", $open, $wait, $r->{status};
