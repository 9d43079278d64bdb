#!/usr/bin/perl
# Where a request's time goes: nginx (one process, no master) under
# valgrind's callgrind, the counters zeroed after a warm-up, then a few
# seconds of wrk on one location; instructions per request (Ir), in all and
# by function, for each location in turn.  Instruction counts do not depend
# on the machine's load, so runs compare side by side; they do not see
# cache misses (bench/throughput.pl measures time).
#
#   bench/profile.pl [--seconds 10] [--keys one|random] [--top 25] [--keep DIR]
#                    [LOCATION...]
#
# --keep DIR copies each location's callgrind dump to DIR/LOCATION.callgrind
# (for callgrind_annotate --inclusive=yes, or kcachegrind).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep);
use RLTest;

my ($seconds, $keys, $top, $keep) = (10, 'one', 25, undef);
GetOptions('seconds=i' => \$seconds, 'keys=s' => \$keys, 'top=i' => \$top, 'keep=s' => \$keep)
    or die "usage: $0 [--seconds N] [--keys one|random] [--top N] [--keep DIR] [LOCATION...]\n";
my @locations = @ARGV ? @ARGV : qw(plain add_header ratelimit ratelimit-noheaders limit_req);
my $script = $keys eq 'random' ? 'random_keys.lua' : 'one_key.lua';

my %loc = (
    'plain'               => '',
    # the same bytes as ratelimit's default headers, with no rule: the floor
    'add_header'          => join('', map { "add_header $_ always;" }
                                 'X-RateLimit-Limit 1000000', 'X-RateLimit-Remaining 999999',
                                 'X-RateLimit-Reset 1'),
    'ratelimit'           => 'ratelimit zone=rl key=$http_x_key limit=1000000 period=1s burst=1000000;',
    'ratelimit-noheaders' => 'ratelimit zone=rl key=$http_x_key limit=1000000 period=1s burst=1000000; '
                           . 'ratelimit_headers off;',
    'limit_req'           => 'limit_req zone=lr burst=1000000 nodelay;',
);

printf "profile: callgrind, %s key%s, %d s of wrk -t1 -c16 a location; instructions a request\n",
    $keys, $keys eq 'one' ? '' : 's among 1,000,000', $seconds;

for my $name (@locations) {
    die "unknown location $name\n" unless exists $loc{$name};
    my $t = RLTest->new(quiet => 1);
    my $p = $t->prefix;
    RLTest::write_file("$p/html/f", 'x' x 100);
    my $conf = $t->write_conf(<<"EOF", no_access_log => 1, master => 'off');
keepalive_requests 100000000;
limit_req_zone \$http_x_key zone=lr:256m rate=1000000r/s;
ratelimit_zone rl 64m;
server {
    listen 127.0.0.1:%%PORT%%;
    location /f {
        $loc{$name}
        alias %%PREFIX%%/html/f;
    }
}
EOF
    my $out = "$p/callgrind.out";
    my $pid = fork() // die;
    if ($pid == 0) {
        open(STDOUT, '>', "$p/stdout.log");
        open(STDERR, '>', "$p/stderr.log");
        exec('valgrind', '--tool=callgrind', "--callgrind-out-file=$out", '--dump-instr=no',
             $t->nginx, '-p', "$p/", '-c', "$p/nginx.conf", '-e', "$p/error.log") or die;
    }
    RLTest::wait_until(sub { IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . $t->port) }, 60)
        or die "nginx under valgrind did not start\n";
    my $url = 'http://127.0.0.1:' . $t->port . '/f';
    `wrk -t1 -c16 -d3s -s $FindBin::Bin/wrk/$script $url 2>&1`;   # warm up
    system('callgrind_control', '-z', $pid) == 0 or die "callgrind_control -z failed\n";
    my $w = `wrk -t1 -c16 -d${seconds}s -s $FindBin::Bin/wrk/$script $url 2>&1`;
    my ($n) = $w =~ /(\d+) requests in/ or die "wrk: $w";
    my ($bad) = $w =~ /Non-2xx or 3xx responses: (\d+)/;
    die "$name: $bad responses were not 2xx\n" if $bad;
    system('callgrind_control', '-d', $pid) == 0 or die "callgrind_control -d failed\n";
    # a signal may land just before the worker sleeps in epoll_wait, where
    # valgrind's slow signal delivery leaves it: send it again until it goes
    for (my $i = 0; waitpid($pid, WNOHANG) == 0; $i++) {
        kill($i < 60 ? 'QUIT' : 'KILL', $pid);
        sleep 0.5;
    }

    # the dump after zeroing is the last file written
    my ($dump) = sort { -M $a <=> -M $b } grep { !/\.out$/ } glob("$out*");
    $dump //= $out;
    if (defined $keep) {
        mkdir $keep;
        system('cp', $dump, "$keep/$name.callgrind") == 0 or die "cp $dump $keep: $?\n";
    }
    my @lines = `callgrind_annotate --inclusive=no --threshold=100 $dump 2>/dev/null`;
    my ($total) = map { /^([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS/ ? $1 : () } @lines;
    die "$name: no totals in $dump\n" unless defined $total;
    $total =~ tr/,//d;
    printf "\n%-20s %8.0f instructions a request (%d requests)\n", $name, $total / $n, $n;
    my $shown = 0;
    for (@lines) {
        next unless /^\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+(\S+):(\S+)/;
        my ($ir, $pct, $file, $fn) = ($1, $2, $3, $4);
        $ir =~ tr/,//d;
        $fn =~ s/\s.*//;
        printf "  %7.0f %5.1f%%  %s\n", $ir / $n, $pct, $fn;
        last if ++$shown >= $top;
    }
}
