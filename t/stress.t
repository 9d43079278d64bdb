#!/usr/bin/perl
# Reloads and crashes under load: each round reloads nginx and kills a
# random worker with SIGKILL while clients keep sending requests (limits
# high enough that none is refused).  The master must never hang (it takes
# no zone lock, so a worker dying in one cannot block it), every round ends
# with nginx answering, and no request gets a 5xx: the only failures are
# the connections of the killed workers.
#
# RL_STRESS_ROUNDS (default 20) sets the rounds; ./build.sh stress runs 100.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use HTTP::Tiny;
use Time::HiRes qw(sleep time);
use RLTest;

my $rounds = $ENV{RL_STRESS_ROUNDS} // 20;

my $t = RLTest->new->start(<<'EOF', workers => 2, no_access_log => 1);
ratelimit_zone z 1m;
ratelimit_zone w 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        ratelimit zone=z key=$http_x_key limit=1000000 period=1s;
        ratelimit zone=w key=$http_x_key algorithm=sliding_window limit=1000000 period=1s;
    }
}
EOF

# clients: each sends batches of pipelined requests on a keep-alive
# connection (a new one after each batch, or when its worker is killed) and
# counts the statuses until told to stop
my @clients = map {
    RLTest::spawn(sub {
        my %n;
        my $stop = 0;
        local $SIG{TERM} = sub { $stop = 1 };
        my $i = 0;
        until ($stop) {
            my %s = eval { $t->pipelined('/index.html', 'X-Key', map { 'k' . $i++ % 500 } 1 .. 50) };
            $n{error}++ if $@;
            $n{$_} += $s{$_} for keys %s;
        }
        return \%n;
    });
} 1 .. 4;

my ($hangs, $killed, @victims) = (0, 0);
for my $round (1 .. $rounds) {
    $t->signal('HUP');
    sleep rand(0.05);   # the master is reloading meanwhile
    my @now = $t->worker_pids;
    if (@now) {
        push @victims, $now[ int rand @now ];
        $killed += kill 'KILL', $victims[-1];
    }
    # the master reaps, replaces the worker, and nginx answers
    my $ok = RLTest::wait_until(sub {
        my @w = $t->worker_pids;
        return 0 unless @w >= 2;
        my $r = HTTP::Tiny->new(timeout => 2)->get('http://127.0.0.1:' . $t->port . '/index.html');
        return $r->{status} == 200;
    }, 15);
    unless ($ok) {
        $hangs++;
        diag("round $round: nginx did not recover within 15 s");
        last;
    }
}
is($hangs, 0, "$rounds rounds of reload and SIGKILL of a worker under load: no hang");
ok($killed >= $rounds / 2, "$killed workers killed");

my %total;
for my $c (@clients) {
    kill 'TERM', $c->pid;
    my ($n) = $c->result;
    $total{$_} += $n->{$_} for keys %$n;
}
my $five = 0;
$five += $total{$_} for grep { /^5\d\d$/ } keys %total;
is($five, 0, 'no 5xx: ' . join(', ', map { "$_ $total{$_}" } sort keys %total));
ok(($total{200} // 0) > 100, 'requests went through all along');

# the crashes are the test's: once the master has reaped every killed
# worker, what nginx logs about them is dropped before the harness checks
# the log
ok($t->forget_kills(\@victims, locked => 1), 'the master reaped every killed worker');
$t->stop();
done_testing();
