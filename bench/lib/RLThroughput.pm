package RLThroughput;
# What throughput.pl and compare.pl share: an nginx serving the benchmark's
# locations, and wrk driving them, at once or alone.
use strict;
use warnings;
use FindBin;
use Time::HiRes qw(time);
use RLTest;
use RLBench qw(cpu_seconds);

my $wrk = "$FindBin::Bin/wrk";

# plain: a 100-byte static file; add_header: the same bytes as ratelimit's
# default headers, no rule (the floor for a limiter with headers);
# limit_req; ratelimit (gcra) with its default headers and with them off;
# limits high enough that nothing is rejected, keyed by the X-Key header.
my $conf = <<'EOF';
keepalive_requests 100000000;
limit_req_zone $http_x_key zone=lr:256m rate=1000000r/s;
ratelimit_zone rl 48m;
server {
    listen 127.0.0.1:%%PORT%%;
    location = /status {
        stub_status;
    }
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

# An nginx serving every location, its workers pinned as asked (RL_MODULE
# chooses the module, as for the tests).
sub instance {
    my ($n, $affinity) = @_;
    my $t = RLTest->new(quiet => 1);
    RLTest::write_file($t->prefix . '/html/f', 'x' x 100);
    $t->write_conf($conf, no_access_log => 1, workers => $n, main => "worker_cpu_affinity $affinity;");
    $t->start();
    RLTest::wait_until(sub { (my @w = $t->worker_pids) == $n }, 10);
    my @w = $t->worker_pids;
    die "expected $n workers, found " . scalar(@w) . "\n" unless @w == $n;
    return { t => $t, workers => \@w };
}

sub cpu_of {
    my ($inst) = @_;
    my $s = 0;
    $s += cpu_seconds($_) for @{ $inst->{workers} };
    return $s;
}

# Starts wrk on an instance's location; wrk_done() reads what it measured.
sub wrk_start {
    my ($inst, $loc, $script, $conns, $pin, $duration) = @_;
    my $cmd = "exec ${pin}wrk -t1 -c$conns -d${duration}s -s $wrk/$script "
        . "http://127.0.0.1:${\ $inst->{t}->port}/$loc/f 2>&1";
    my $pid = open(my $fh, '-|', $cmd) or die "wrk: $!\n";
    return { fh => $fh, pid => $pid, loc => $loc, inst => $inst, cpu => cpu_of($inst) };
}

sub wrk_done {
    my ($run) = @_;
    my $out = do { local $/; readline $run->{fh} };
    close $run->{fh};
    my ($n) = $out =~ /(\d+) requests in/ or die "wrk: $out";
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/;
    my ($non2xx) = $out =~ /Non-2xx or 3xx responses: (\d+)/;
    die "wrk: /$run->{loc}/ answered $non2xx non-2xx responses\n" if $non2xx;
    return { rps => $rps, us => (cpu_of($run->{inst}) - $run->{cpu}) * 1e6 / $n };
}

# Requests an instance has served (stub_status).
sub served {
    my ($inst) = @_;
    my $r = $inst->{t}->get('/status');
    my ($n) = $r->{content} =~ /^\s*\d+\s+\d+\s+(\d+)\s*$/m or die "stub_status: $r->{content}\n";
    return $n;
}

# Each instance's location driven by its own wrk, all at once, and measured
# over the same $seconds once every wrk is sending (a wrk reading a million
# requests in first starts late): requests/s from stub_status, CPU time
# from /proc, both read at the window's two ends.
sub at_once {
    my ($inst, $locs, $script, $seconds) = @_;
    my @runs = map {
        my $r = wrk_start($inst->[$_], $locs->[$_], $script, 32, 'taskset -c 1 ', $seconds + 120);
        $r->{start} = served($inst->[$_]);
        $r
    } 0 .. $#$inst;
    RLTest::wait_until(sub { !grep { served($_->{inst}) < $_->{start} + 1000 } @runs }, 100)
        or die "throughput: a wrk did not start\n";
    my $t0 = time;
    for (@runs) { $_->{n} = served($_->{inst}); $_->{cpu} = cpu_of($_->{inst}); }
    select(undef, undef, undef, $seconds);
    my $t1 = time;
    for (@runs) { $_->{n} = served($_->{inst}) - $_->{n}; $_->{cpu} = cpu_of($_->{inst}) - $_->{cpu}; }
    for my $run (@runs) {
        kill 'INT', $run->{pid};
        wrk_done($run);
    }
    return map { { rps => $_->{n} / ($t1 - $t0), us => $_->{cpu} * 1e6 / $_->{n} } } @runs;
}

# Every key of random_keys.lua once in each of the locations on every
# instance (all_keys.lua), the instances at once: the rounds measured after
# it find keys in zones that hold a million, as zones in service do, rather
# than inserting most of them.
sub fill {
    my ($inst, @locs) = @_;
    for my $loc (@locs) {
        my @runs = map {
            my $r = wrk_start($_, $loc, 'all_keys.lua', 32, 'taskset -c 1 ', 600);
            $r->{start} = served($_);
            $r
        } @$inst;
        RLTest::wait_until(sub {
            for my $r (grep { !$_->{done} } @runs) {
                next if served($r->{inst}) < $r->{start} + 1_000_000;
                kill 'INT', $r->{pid};
                wrk_done($r);
                $r->{done} = 1;
            }
            return !grep { !$_->{done} } @runs;
        }, 600) or die "throughput: filling /$loc/ took over 600 s\n";
    }
}

# One instance's location alone, wrk unpinned (-c64): requests/s from wrk.
sub alone {
    my ($inst, $loc, $script, $seconds) = @_;
    return wrk_done(wrk_start($inst, $loc, $script, 64, '', $seconds));
}


1;
