#!/usr/bin/perl
# leaky_bucket, the shaper, through real nginx: requests over the pace are
# delayed to their slot on a timer (the worker serves others meanwhile),
# those that would wait past max_delay are rejected, a dry run only logs, and
# a client that leaves while delayed gives its slot back.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest;

my $t = RLTest->new->start(<<'EOF');
ratelimit_zone z 1m;
log_format shaped '$uri $http_x_user $status $ratelimit_status $msec';
server {
    listen 127.0.0.1:%%PORT%%;
    access_log %%PREFIX%%/shaped.log shaped;

    # 10 a second: one each 100 ms, waits of at most 500 ms
    location /shape/ {
        ratelimit zone=z key=$http_x_user algorithm=leaky_bucket limit=10 period=1s max_delay=500ms;
        alias %%PREFIX%%/html/;
    }
    # one each 10 s, waits of at most 50 s: a dry run only logs them
    location /dry/ {
        ratelimit zone=z key=$http_x_user algorithm=leaky_bucket limit=1 period=10s max_delay=50s;
        ratelimit_dry_run on;
        alias %%PREFIX%%/html/;
    }
    # one each 2 s
    location /slow/ {
        ratelimit zone=z key=$http_x_user algorithm=leaky_bucket limit=1 period=2s max_delay=10s;
        alias %%PREFIX%%/html/;
    }
    location /free/ {
        alias %%PREFIX%%/html/;
    }
}
EOF

# $n requests at once, each on its own connection; returns them sorted by
# when their answers came: [status, seconds taken, remaining header, time].
sub at_once {
    my ($path, $user, $n) = @_;
    return sort { $a->[3] <=> $b->[3] }
        map { [ $_->{status}, $_->{at} - $_->{sent}, $_->{headers}{'x-ratelimit-remaining'} // '-', $_->{at} ] }
        $t->at_once(([ $path, 'X-User' => $user ]) x $n);
}

# 8 at once: 6 fit (waits 0, 100, ..., 500 ms), 2 would wait 600 and 700 ms
{
    # meanwhile, another location answers at once
    my $free = RLTest::spawn(sub {
        sleep 0.15;
        my $start = time;
        my $status = $t->get('/free/index.html')->{status};
        return ($status, time - $start, time);
    });
    my @r = at_once('/shape/index.html', 'a', 8);

    my @ok = grep { $_->[0] == 200 } @r;
    is(scalar @ok, 6, 'shaper: 6 admitted');
    is(scalar(grep { $_->[0] == 429 } @r), 2, 'shaper: 2 rejected (they would wait more than 500 ms)');
    # released one slot (100 ms) after another, by nginx's clock (the
    # access log's $msec as each response went out): never before its slot,
    # and not long after it, whatever else the machine does (a line is
    # written after its response went out: a client may have it first)
    my @released;
    RLTest::wait_until(sub {
        @released = sort { $a <=> $b } $t->file('shaped.log') =~ m{^/shape/index\.html a 200 \S+ ([\d.]+)$}mg;
        @released >= 6;
    }, 5);
    is(scalar @released, 6, 'shaper: 6 released, by the access log');
    for my $i (1 .. 5) {
        my $after = $released[$i] - $released[0];
        ok($after > $i * 0.1 - 0.05 && $after < $i * 0.1 + 0.1,
           sprintf('shaper: #%d released %.3f s after #1 (its slot: %.1f s)', $i + 1, $after, $i * 0.1));
    }
    is($ok[5][2], 5, 'shaper: headers describe the key at release');

    # the worker is not held by the delayed requests: the other location's
    # answer comes before the last of them is released (sent 150 ms in,
    # with 350 ms to go), however busy the machine
    my ($status, $took, $answered) = $free->result;
    is($status, 200, 'another location is served while requests are delayed');
    ok($answered < $released[5], sprintf('... before the last delayed one is released (in %.3f s)', $took));
}

# dry run: nothing delayed, nothing rejected; logged as it would have been
{
    my @r = at_once('/dry/index.html', 'd', 8);
    is(join(' ', map { $_->[0] } @r), '200 200 200 200 200 200 200 200', 'dry run: all pass');
    ok($r[-1][1] < 0.2, sprintf('dry run: none delayed (slowest %.3f s)', $r[-1][1]));
}

# A client that leaves while delayed gives its slot back: A is served, B is
# delayed 2 s and leaves, C then waits only for B's slot, not the one after.
{
    is($t->get('/slow/index.html', { 'X-User' => 's' })->{status}, 200, 'abort: A at once');
    my $b = $t->open_request('/slow/index.html', { 'X-User' => 's' });
    my $sent = time;
    sleep 0.2;
    close $b;
    sleep 0.3;
    my $start = time;
    my $r = $t->get('/slow/index.html', { 'X-User' => 's' });
    my $waited = time - $start;
    is($r->{status}, 200, 'abort: C admitted');
    my $slot = $sent + 2 - $start;   # B's slot, 2 s after A
    ok(abs($waited - $slot) < 0.2, sprintf('abort: C took the abandoned slot (waited %.2f s, slot in %.2f s)', $waited, $slot));
}

$t->stop();

my $log = $t->file('shaped.log');
my %count;
$count{"$1 $2 $3"}++ while $log =~ m{^/(\w+)/index\.html \S+ (\d+) (\S+) [\d.]+$}mg;
is($count{'shape 200 PASSED'}, 1, 'log: one PASSED');
is($count{'shape 200 DELAYED'}, 5, 'log: five DELAYED');
is($count{'shape 429 REJECTED'}, 2, 'log: two REJECTED');
is($count{'dry 200 DELAYED_DRY_RUN'}, 5, 'log: dry run DELAYED_DRY_RUN');
is($count{'dry 200 REJECTED_DRY_RUN'}, 2, 'log: dry run REJECTED_DRY_RUN');
is($count{'slow 499 DELAYED'}, 1, 'log: the abandoned request, 499 while DELAYED');
like($t->error_log, qr/\[warn\].*ratelimit: delaying by rule "leaky_bucket_10_1s" in zone "z", key fingerprint [0-9a-f]{16}, cost 1, for \d+ ms/,
     'delays are logged one level below rejections');

done_testing();
