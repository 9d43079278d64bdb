#!/usr/bin/perl
# ratelimit_bandwidth's cost, on one worker pinned to CPU 0, the client
# (curl) on CPU 1:
#
#   - a large file over loopback through a rule whose rate never binds
#     (rate=100g) against the same location without it: the median of
#     five downloads each, alternated;
#   - the worker's CPU time (utime + stime, /proc/PID/stat) a delayed
#     megabyte: 8 connections of one key at 64 MB/s together under the
#     rule, against limit_rate 8m on each of 8 connections (the same
#     64 MB/s), 256 MB each way;
#   - the same two through nginx's stream proxy (stream {}, proxy_pass to
#     the HTTP server of the same worker, so the worker's CPU includes
#     serving the file, alike in both): a rule that never binds against
#     none; a delayed megabyte under the rule against proxy_download_rate
#     8m on each of 8 sessions.
#
#   bench/bandwidth.pl [--size-mb 1024]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib";
use Getopt::Long;
use POSIX qw(sysconf);
use Time::HiRes qw(time);
use RLTest;
use RLStream;

my $size_mb = 1024;
GetOptions('size-mb=i' => \$size_mb) or die "usage: $0 [--size-mb N]\n";

my $t = RLTest->new(quiet => 1);
my %sp = map { $_ => RLTest::free_port() } qw(none free shared plain);
my $http = $t->port;
my $stream = <<"EOF";
    ratelimit_zone s 1m;
    server {
        listen 127.0.0.1:$sp{none};
        proxy_pass 127.0.0.1:$http;
    }
    server {
        listen 127.0.0.1:$sp{free};
        ratelimit_bandwidth zone=s key=\$remote_addr rate=100g name=free;
        proxy_pass 127.0.0.1:$http;
    }
    server {
        listen 127.0.0.1:$sp{shared};
        ratelimit_bandwidth zone=s key=\$remote_addr rate=64m name=shared;
        proxy_pass 127.0.0.1:$http;
    }
    server {
        listen 127.0.0.1:$sp{plain};
        proxy_download_rate 8m;
        proxy_pass 127.0.0.1:$http;
    }
EOF
my $main = "worker_cpu_affinity 01;\n" . RLStream::main($t, $stream);
$t->write_conf(<<'EOF', no_access_log => 1, log_level => 'error', main => $main);
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location /none/ {
        alias %%PREFIX%%/html/;
    }
    location /free/ {
        ratelimit_bandwidth zone=z key=$remote_addr rate=100g name=free;
        alias %%PREFIX%%/html/;
    }
    location /shared/ {
        ratelimit_bandwidth zone=z key=$remote_addr rate=64m name=shared;
        alias %%PREFIX%%/html/;
    }
    location /plain/ {
        limit_rate 8m;
        alias %%PREFIX%%/html/;
    }
}
EOF
# a sparse file: its pages come from the page cache, not the disk
open(my $fh, '>', $t->prefix . '/html/big') or die;
truncate($fh, $size_mb * 1024 * 1024) or die;
close $fh;
RLTest::write_file($t->prefix . '/html/m32', 'x' x (32 * 1024 * 1024));
$t->start();
my ($worker) = $t->worker_pids;
my $port = $t->port;

sub curl {
    my (@paths) = @_;
    my $to = $paths[0] =~ /^\d+$/ ? shift @paths : $port;
    my $urls = join ' ', map { "-o /dev/null http://127.0.0.1:$to$_" } @paths;
    my $s = time;
    system("taskset -c 1 curl -s --no-progress-meter -Z --parallel-immediate --parallel-max 8 $urls") == 0 or die "curl failed\n";
    return time - $s;
}

sub cpu_ticks {
    my @f = split ' ', (RLTest::read_file("/proc/$worker/stat") =~ /\)\s+(.*)/)[0];
    return $f[11] + $f[12];    # utime, stime
}

sub median { my @s = sort { $a <=> $b } @_; return $s[ @s / 2 ] }

my (@none, @free);
curl('/none/big');    # the page cache warmed
for (1 .. 5) {
    push @none, curl('/none/big');
    push @free, curl('/free/big');
}
my ($n, $f) = (median(@none), median(@free));
printf "%d MB over loopback: without a rule %.0f MB/s, with a rule that never binds %.0f MB/s: %.3fx\n",
    $size_mb, $size_mb / $n, $size_mb / $f, $n / $f;

my (@snone, @sfree);
for (1 .. 5) {
    push @snone, curl($sp{none}, '/none/big');
    push @sfree, curl($sp{free}, '/none/big');
}
($n, $f) = (median(@snone), median(@sfree));
printf "%d MB through the stream proxy: without a rule %.0f MB/s, with a rule that never binds %.0f MB/s: %.3fx\n",
    $size_mb, $size_mb / $n, $size_mb / $f, $n / $f;

my $hz = sysconf(POSIX::_SC_CLK_TCK()) || 100;
for my $case (['ratelimit_bandwidth rate=64m, one key', $port, '/shared/m32'],
              ['limit_rate 8m a connection', $port, '/plain/m32'],
              ['stream: ratelimit_bandwidth rate=64m, one key', $sp{shared}, '/none/m32'],
              ['stream: proxy_download_rate 8m a session', $sp{plain}, '/none/m32'])
{
    my ($what, $to, $path) = @$case;
    my $c0 = cpu_ticks();
    my $wall = curl($to, map { "$path?$_" } 1 .. 8);
    my $cpu = (cpu_ticks() - $c0) / $hz;
    printf "256 MB delayed, 8 connections, %s: %.2f s (%.1f MB/s), worker CPU %.0f ms, %.2f ms a MB\n",
        $what, $wall, 256 / $wall, $cpu * 1000, $cpu * 1000 / 256;
}

$t->stop();
