package RLBench;
# What the benchmarks share: a process's CPU time, medians, and the
# upstream of known capacity of the in-flight benchmarks (adaptive.pl,
# priority.pl).
use strict;
use warnings;
use Exporter 'import';
use FindBin;
use POSIX qw(sysconf _SC_CLK_TCK);
use RLTest;

our @EXPORT_OK = qw(cpu_seconds geomean median start_upstream);

# t/lib/rl_adaptive.py: the upstream and the open-loop load generator
our $python = '/usr/bin/python3';
our $helper = "$FindBin::Bin/../t/lib/rl_adaptive.py";

my $tick = sysconf(_SC_CLK_TCK);

# Seconds of CPU (user + system) a process has used: from schedstat, in
# nanoseconds, where the kernel has it; else stat's utime + stime, in ticks
# of 10 ms (a 1% step over a second of CPU).
sub cpu_seconds {
    my ($pid) = @_;
    my $ns = (RLTest::read_file("/proc/$pid/schedstat") // '') =~ /^(\d+)/ ? $1 : undef;
    return $ns / 1e9 if defined $ns;
    my @f = split ' ', (RLTest::read_file("/proc/$pid/stat") =~ /\) (.*)$/s)[0];
    return ($f[11] + $f[12]) / $tick;   # utime + stime
}

# The geometric mean of ratios, and (in list context, after it) its
# standard error, relative: the spread of their logarithms over sqrt(n).
sub geomean {
    my @l = map { log } @_;
    my $m = 0;
    $m += $_ / @l for @l;
    my $v = 0;
    $v += ($_ - $m)**2 / (@l > 1 ? @l - 1 : 1) for @l;
    my $g = exp($m);
    return wantarray ? ($g, $g * sqrt($v / @l)) : $g;
}

sub median {
    my @s = sort { $a <=> $b } @_;
    return @s % 2 ? $s[$#s / 2] : ($s[@s / 2 - 1] + $s[@s / 2]) / 2;
}

# rl_adaptive.py's upstream of $workers workers serving for a log-normal
# time of mean $mean_ms (sigma 0.5): (its pid, its port).
sub start_upstream {
    my ($portfile, $workers, $mean_ms) = @_;
    unlink $portfile;
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        exec($python, $helper, 'upstream', $portfile, '--workers', $workers, '--mean-ms', $mean_ms, '--sigma', 0.5)
            or POSIX::_exit(127);
    }
    RLTest::wait_until(sub { -s $portfile }, 10) or die "the upstream did not start\n";
    my $port = RLTest::read_file($portfile);
    chomp $port;
    return ($pid, $port);
}

# nginx ($t's, one worker) with one location of $directives in front of
# the upstream at $upport (keep-alive), $http in the http block (zones,
# maps), the stats at /stats.
sub start_inflight_nginx {
    my ($t, $http, $directives, $upport) = @_;
    $t->{quiet} = 1;
    $t->start(<<"EOF", workers => 1, no_access_log => 1, connections => 8192);
$http
upstream backend {
    server 127.0.0.1:$upport;
    keepalive 64;
}
server {
    listen 127.0.0.1:%%PORT%%;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location / {
        $directives
        proxy_pass http://backend;
    }
    location = /stats {
        ratelimit_stats;
    }
}
EOF
}

1;
